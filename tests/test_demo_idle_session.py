"""scripts/demo_idle_session.py on a session other than the bundled one summarizes that session."""

from __future__ import annotations

import os
import subprocess
import sys

from winnow.data.readers import read_paths


def run_demo(root, session):
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "demo_idle_session.py"), str(session)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},  # whole summary lines
    )


def test_another_session_gets_its_own_summary(root, fixtures, demo_session):
    other = fixtures / "readers_a" / "claude_code.jsonl"  # a real session with one bad line
    run = run_demo(root, other)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = run.stdout.split("summary block (head):", 1)[1]
    first_request = next(u for u in read_paths([other]) if u.role == "user").text
    assert " ".join(first_request.split())[:60] in " ".join(summary.split())
    bundled = "CHANGELOG.md: new `## [0.4.4]"  # from the bundled session's hand-written summary
    assert bundled not in run.stdout and "0.4.4" not in summary
    assert f"{other}:31: invalid JSON" in run.stderr  # bad input is one line, the rest is kept

    run = run_demo(root, demo_session)
    assert run.returncode == 0, run.stderr[-2000:]
    assert bundled in run.stdout
