"""Context budget: the command's exit codes, samples from real usage shapes, and the hook."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from winnow.cli import main
from winnow.runtime.budget import ContextBudget, context_tokens, read_samples

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "winnow" / "runtime" / "hooks" / "claude_code_posttooluse.py"


@pytest.mark.parametrize(
    "argv, out, code",
    [
        (["80000"], "40% of the 200,000-token window: over the 40% line: checkpoint now", 2),
        (["79999"], "39% of the 200,000-token window: under the 40% line", 0),
        (["150000", "1000000"], "15% of the 1,000,000-token window: under the 40% line", 0),
        (["199,999", "200k"], "99% of the 200,000-token window: over the 40% line", 2),
        (["84000", "--threshold", "50"], "42% of the 200,000-token window: under the 50% line", 0),
        (
            ["300000", "200000"],
            "150% of the 200,000-token window: the window is exceeded by 100,000 tokens",
            2,
        ),
    ],
)
def test_budget_says_what_the_percentage_means(argv, out, code, capsys, monkeypatch):
    monkeypatch.delenv("HARNESS_CTX_THRESHOLD", raising=False)
    assert main(["budget", *argv]) == code
    line = capsys.readouterr().out.strip()
    assert line.startswith(out) and "\n" not in line
    assert line.split()[0] == out.split()[0], "the percentage stays the first word, for scripts"


def test_budget_threshold_from_env(capsys, monkeypatch):
    monkeypatch.setenv("HARNESS_CTX_THRESHOLD", "75")
    assert main(["budget", "100000"]) == 0
    assert main(["budget", "150000"]) == 2


@pytest.mark.parametrize("argv", [["abc"], ["-5"], ["1", "0"], ["1", "x"], ["1", "2", "3"], []])
def test_budget_bad_numbers_one_line_exit_1(argv, capsys):
    assert main(["budget", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("winnow budget:") and "\n" not in err


def test_context_tokens_from_both_providers():
    anthropic = {
        "input_tokens": 8,
        "cache_creation_input_tokens": 1591,
        "cache_read_input_tokens": 87066,
        "output_tokens": 1,
    }
    assert context_tokens(anthropic) == 88_666
    assert (
        context_tokens({"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020})
        == 1020
    )


def test_budget_crossings_checkpoint_and_report(tmp_path, capsys):
    log, ckpt = tmp_path / "b.jsonl", tmp_path / "checkpoint.md"
    fired = []
    budget = ContextBudget(
        log, window=100_000, threshold=40, checkpoint_path=ckpt, clock=lambda: 1.0e9
    )
    for used in (10_000, 30_000, 45_000, 50_000, 12_000, 60_000):
        budget.record({"input_tokens": used})
    samples = read_samples(log)
    assert [s.crossed for s in samples] == [False, False, True, False, False, True]
    assert "60% of a 100,000-token window" in ckpt.read_text()  # the latest crossing
    # a new process continues from the file: already over, so no second crossing
    again = ContextBudget(log, window=100_000, threshold=40, on_cross=fired.append)
    again.record({"input_tokens": 70_000})
    assert fired == []
    assert main(["budget", "report", str(log), "--threshold", "40"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"max\s*│\s*70\.0%", out) and re.search(r"crossings\s*│\s*2\s*│", out)
    png = log.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _line(kind: str, usage: dict | None = None, sidechain: bool = False, text: str = "x") -> str:
    """A line in the shape Claude Code writes (fields as in the real sessions in shared/traces)."""
    rec = {
        "parentUuid": "b6831eb4",
        "isSidechain": sidechain,
        "userType": "external",
        "cwd": "/repo",
        "sessionId": "f6833005",
        "version": "2.0.76",
        "type": kind,
        "uuid": "a1c02dd4",
        "timestamp": "2026-01-06T14:31:10.295Z",
    }
    if kind == "assistant":
        rec["message"] = {
            "model": "claude-opus-4-5-20251101",
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "stop_reason": None,
            "usage": {**usage, "service_tier": "standard"},
        }
    else:
        rec["message"] = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": text}],
        }
    return json.dumps(rec)


def _run_hook(
    tmp_path: Path, transcript: Path, env: dict | None = None
) -> subprocess.CompletedProcess:
    event = {
        "session_id": "f6833005",
        "transcript_path": str(transcript),
        "cwd": str(tmp_path),
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_response": {"stdout": ""},
    }
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_CTX_THRESHOLD": "40", **(env or {})}
    full_env.pop("HARNESS_CTX_LOG", None)
    return subprocess.run(
        [sys.executable, str(HOOK)],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
    )


def test_posttooluse_hook_asks_for_checkpoint_once(tmp_path):
    t = tmp_path / "session.jsonl"
    under = {
        "input_tokens": 8,
        "cache_creation_input_tokens": 1591,
        "cache_read_input_tokens": 57066,
        "output_tokens": 1,
    }
    over = {**under, "cache_read_input_tokens": 87066}
    t.write_text(_line("assistant", under) + "\n" + _line("user") + "\n")
    r = _run_hook(tmp_path, t)
    assert (r.returncode, r.stdout) == (0, "")
    # the latest main-thread assistant usage counts, not a subagent's (sidechain) line
    sidechain = {**under, "cache_read_input_tokens": 190_000}
    with t.open("a") as f:
        f.write(
            _line("assistant", over)
            + "\n"
            + _line("assistant", sidechain, sidechain=True)
            + '\n{"type": "progr'
        )
    r = _run_hook(tmp_path, t)
    assert r.returncode == 0, r.stderr
    reply = json.loads(r.stdout)
    assert reply["decision"] == "block" and "44%" in reply["reason"]
    assert reply["hookSpecificOutput"]["hookEventName"] == "PostToolUse"
    assert (tmp_path / ".winnow" / "checkpoint.md").is_file()
    samples = read_samples(tmp_path / ".winnow" / "budget.jsonl")
    assert [s.used for s in samples] == [58_666, 88_666]
    r = _run_hook(tmp_path, t)  # still over: no second request
    assert (r.returncode, r.stdout) == (0, "")


def test_budget_hook_prints_settings_entry(capsys):
    assert main(["budget", "hook"]) == 0
    entry = json.loads(capsys.readouterr().out)["hooks"]["PostToolUse"][0]
    assert entry["matcher"] == "*" and str(HOOK) in entry["hooks"][0]["command"]


def test_posttooluse_hook_bad_input_never_fails_the_tool(tmp_path):
    r = _run_hook(tmp_path, tmp_path / "missing.jsonl")
    assert r.returncode == 0 and r.stdout == "" and r.stderr.count("\n") == 1


TRACES = ROOT.parent / "shared" / "traces" / "entireio-cli"


@pytest.mark.traces
@pytest.mark.skipif(not TRACES.is_dir(), reason="needs ../shared/traces")
def test_posttooluse_hook_on_a_real_session(tmp_path):
    real = TRACES / "bb" / "781d6f3a8e" / "0" / "full.jsonl"
    if not real.is_file():
        pytest.skip("trace not present")
    r = _run_hook(tmp_path, real)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["decision"] == "block"  # the session ends at 88,666 tokens: 44%


def _usage_line(usage_json: str) -> str:
    """An assistant line whose usage is raw JSON text (values JSON allows but a count is not)."""
    line = _line("assistant", {"input_tokens": 1})
    return line.replace('"usage": {"input_tokens": 1', '"usage": ' + usage_json[:-1], 1)


@pytest.mark.parametrize(
    ("case", "note"),
    [
        ("usage abc", "not a number of tokens"),
        ("usage 1e400", "not a number of tokens"),
        ("usage [1]", "not a number of tokens"),
        ("window 0", "HARNESS_CTX_WINDOW"),
        ("window abc", "HARNESS_CTX_WINDOW"),
        ("cwd is a file", "Not a directory"),
        ("log is a folder", "Is a directory"),
        ("deep JSON", "nested too deeply"),
        ("not JSON", "bad hook input"),
        ("input a list", "bad hook input"),
    ],
)
def test_posttooluse_hook_exits_0_on_any_input(tmp_path, case, note):
    t = tmp_path / "session.jsonl"
    usage = {"usage abc": '{"input_tokens": "abc"}', "usage 1e400": '{"input_tokens": 1e400}',
             "usage [1]": '{"input_tokens": [1]}'}.get(case, '{"input_tokens": 5}')  # fmt: skip
    t.write_text(_usage_line(usage) + "\n")
    event = {"transcript_path": str(t), "cwd": str(tmp_path), "tool_name": "Bash"}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HARNESS_CTX_LOG", None)
    stdin = json.dumps(event)
    if case.startswith("window"):
        env["HARNESS_CTX_WINDOW"] = case.split()[1]
    elif case == "cwd is a file":
        (tmp_path / "file").write_text("x")
        stdin = json.dumps({**event, "cwd": str(tmp_path / "file")})
    elif case == "log is a folder":
        env["HARNESS_CTX_LOG"] = str(tmp_path)
    elif case == "deep JSON":
        stdin = "[" * 100_000 + "]" * 100_000
    elif case == "not JSON":
        stdin = "{transcript_path"
    elif case == "input a list":
        stdin = "[1, 2]"
    r = subprocess.run(
        [sys.executable, str(HOOK)],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and note in r.stderr and "Traceback" not in r.stderr, r.stderr


DEEP_LINE = '{"type": "assistant", "usage": ' + "[" * 100_000 + "]" * 100_000 + "}"


def test_budget_report_and_hook_read_past_a_line_nested_100000_deep(tmp_path, capsys):
    """A damaged line costs that line: the samples and the usage around it still count."""
    log = tmp_path / "b.jsonl"
    ContextBudget(log, window=100_000, threshold=40).record({"input_tokens": 30_000})
    with log.open("a") as f:
        f.write(DEEP_LINE + "\n")
    assert [s.used for s in read_samples(log)] == [30_000]
    assert main(["budget", "report", str(log), "--plot", str(tmp_path / "p.png")]) == 0
    assert "Traceback" not in capsys.readouterr().err
    again = ContextBudget(log, window=100_000, threshold=40)  # continues from the file
    assert again.record({"input_tokens": 50_000}).crossed
    t = tmp_path / "session.jsonl"
    usage = {"input_tokens": 8, "cache_read_input_tokens": 87_066, "output_tokens": 1}
    t.write_text(_line("assistant", usage) + "\n" + DEEP_LINE + "\n")
    r = _run_hook(tmp_path, t)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert json.loads(r.stdout)["decision"] == "block"


def test_budget_report_without_samples_is_one_line_exit_1(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no .winnow/budget.jsonl here
    assert main(["budget", "report"]) == 1
    (tmp_path / "empty.jsonl").write_text("\n")
    assert main(["budget", "report", "empty.jsonl"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no samples file" in err[0] and "no samples" in err[1]
    assert not (tmp_path / "empty.png").exists()
