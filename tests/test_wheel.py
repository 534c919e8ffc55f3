"""The wheel installs without extras into a fresh venv (no torch, pyarrow or tokenizers) and
classifies and compresses with the shipped model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# The fresh venv must see only what it installed: no PYTHONPATH (a source checkout on it
# holds winnow.egg-info, and pip would take winnow as already installed).
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def run(*cmd, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("env", CLEAN_ENV)
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


@pytest.mark.slow
def test_wheel_classifies_without_torch(tmp_path, classifier_sessions):
    # Build from a copy: setuptools leaves build/ and *.egg-info beside the sources.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    shutil.copytree(ROOT / "winnow", src / "winnow", ignore=ignore)
    shutil.copytree(ROOT / "models", src / "models", ignore=ignore)
    dist = tmp_path / "dist"
    built = run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        dist,
        src,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next(dist.glob("winnow-*.whl"))

    venv = tmp_path / "venv"
    assert run(sys.executable, "-m", "venv", venv, timeout=120).returncode == 0
    py = venv / "bin" / "python"
    installed = run(
        py, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel, timeout=600
    )
    if (
        installed.returncode != 0
        and "Could not find a version" in installed.stderr + installed.stdout
    ):
        pytest.skip(f"no package index reachable: {installed.stderr[-300:]}")
    assert installed.returncode == 0, installed.stderr[-2000:]

    code = (
        "import importlib.util, json, sys\n"
        "from winnow.serving import ImportanceClassifier, default_model_path\n"
        "clf = ImportanceClassifier.load()\n"
        "p = clf.predict_one({'role': 'user', 'kind': 'text', 'text': 'Add rate limiting to the login endpoint'})\n"
        "heavy = ('torch', 'pyarrow', 'tokenizers')  # extras: train, parquet, transformer\n"
        "print(json.dumps({'category': p.category, 'path': str(default_model_path()),\n"
        "                  'installed': [m for m in heavy if importlib.util.find_spec(m)],\n"
        "                  'loaded': 'torch' in sys.modules}))\n"
    )
    out = run(py, "-c", code, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout)
    assert res["installed"] == [] and res["loaded"] is False
    assert "site-packages" in res["path"], "the model must come from the installed package"
    assert res["category"] == "requirement"

    outfile = tmp_path / "out.jsonl"
    cli = run(
        venv / "bin" / "winnow",
        "classify",
        classifier_sessions,
        "-o",
        outfile,
        cwd=tmp_path,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert len(outfile.read_text().splitlines()) == len(
        classifier_sessions.read_text().splitlines()
    )

    compressed = run(
        venv / "bin" / "winnow",
        "compress",
        classifier_sessions,
        "--limit",
        "30%",
        "-o",
        tmp_path / "compressed.jsonl",
        cwd=tmp_path,
        timeout=120,
    )
    assert compressed.returncode == 0, compressed.stderr[-2000:]
