"""Shared fixtures: the repository's paths and the fixture files several test modules read.

Fixture files are read once per test session and shared: a test copies before it changes one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
TRACES = ROOT.parent / "shared" / "traces"  # the real transcripts, beside the repository


@pytest.fixture(scope="session")
def root() -> Path:
    """The repository's root folder."""
    return ROOT


@pytest.fixture(scope="session")
def fixtures() -> Path:
    """tests/fixtures."""
    return FIXTURES


@pytest.fixture(scope="session")
def traces() -> Path:
    """../shared/traces; the test is skipped where it is absent (a clone on its own)."""
    if not TRACES.is_dir():
        pytest.skip("needs ../shared/traces")
    return TRACES


@pytest.fixture(scope="session")
def demo_session() -> Path:
    """The whole Claude Code session that `make demo` runs on."""
    return FIXTURES / "demo_session.jsonl"


@pytest.fixture(scope="session")
def classifier_sessions() -> Path:
    """tests/fixtures/classifier/sessions.jsonl: real units with heuristic and hand labels."""
    return FIXTURES / "classifier" / "sessions.jsonl"


@pytest.fixture(scope="session")
def classifier_rows(classifier_sessions: Path) -> list[dict]:
    """The records of classifier/sessions.jsonl (shared: copy before changing)."""
    return [json.loads(line) for line in classifier_sessions.read_text().splitlines()]
