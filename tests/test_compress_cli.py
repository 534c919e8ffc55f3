"""`winnow compress`: formats in and out, the token table, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_cache import assert_valid_anthropic, assert_valid_openai

from winnow.cli import main
from winnow.data.schema import MUST_KEEP

FIXTURES = Path(__file__).parent / "fixtures"
NORMALIZED = FIXTURES / "compressor" / "codex.jsonl"  # carries categories: no classifier needed
CLAUDE_CODE = FIXTURES / "demo_session.jsonl"  # raw Claude Code: classified on the fly


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["compress", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_normalized_output_keeps_ids_and_names_sources(tmp_path, capsys) -> None:
    out = tmp_path / "out.jsonl"
    rc, stdout, _ = run(capsys, NORMALIZED, "--limit", "30%", "-o", out)
    assert rc == 0
    source = [json.loads(line) for line in NORMALIZED.read_text().splitlines()]
    units = [json.loads(line) for line in out.read_text().splitlines()]
    ids = {u["id"] for u in source}
    made = [u for u in units if u["id"] not in ids]
    assert made and all(u["strategy"] == "summarize" and len(u["source_ids"]) > 1 for u in made)
    changed = [u for u in units if u["id"] in ids and "strategy" in u]
    assert changed and all(u["source_ids"] == [u["id"]] for u in changed)
    kept = {u["id"]: u for u in units}
    for u in source:
        if u["category"] in MUST_KEEP:
            assert kept[u["id"]] == u
    assert "total" in stdout and "requirement" in stdout and f"wrote {out}" in stdout


def test_raw_transcript_to_anthropic(tmp_path, capsys) -> None:
    out = tmp_path / "body.json"
    rc, stdout, _ = run(capsys, CLAUDE_CODE, "--limit", "2500", "--to", "anthropic", "-o", out)
    assert rc == 0
    body = json.loads(out.read_text())
    assert_valid_anthropic(body)
    used = {b["name"] for m in body["messages"] for b in m["content"] if b["type"] == "tool_use"}
    assert used and [t["name"] for t in body["tools"]] == sorted(used)  # the API wants them defined
    assert "categories:" in stdout  # says which classifier labelled the units


def test_cache_aware_openai_to_stdout(capsys) -> None:
    rc, stdout, stderr = run(capsys, NORMALIZED, "--limit", "3000", "--to", "openai", "--cache")
    assert rc == 0
    assert_valid_openai(json.loads(stdout))
    assert "total" in stderr  # the table goes to stderr when the body goes to stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["/no/such/file.jsonl", "--limit", "100"], "/no/such/file.jsonl: no such file"),
        (
            [NORMALIZED, "--limit", "100", "--to", "xml"],
            "--to must be one of normalized, anthropic, openai",
        ),
        ([NORMALIZED, "--limit", "ten"], "--limit must be a positive token count or a percentage"),
        ([NORMALIZED, "--limit", "inf%"], "--limit must be a positive token count or a percentage"),
        ([NORMALIZED, "--limit", "nan%"], "--limit must be a positive token count or a percentage"),
        ([NORMALIZED, "--limit", "0%"], "--limit must be a positive token count or a percentage"),
        ([NORMALIZED, "--limit", "-5"], "--limit must be a positive token count or a percentage"),
        (
            [NORMALIZED, "--limit", "1e400"],
            "--limit must be a positive token count or a percentage",
        ),
        ([NORMALIZED, "--limit", "100", "--model", "/no/such/model"], "--model /no/such/model: "),
        ([NORMALIZED, "--limit", "10"], "must-keep units alone need"),
        ([Path(__file__), "--limit", "100"], "unknown format"),
    ],
)
def test_errors_are_one_line(capsys, argv, message) -> None:
    rc, stdout, stderr = run(capsys, *argv)
    assert rc == 1
    assert stdout == ""
    assert stderr.count("\n") == 1 and message in stderr and stderr.startswith("winnow compress: ")


def test_truncate_oldest_policy_from_the_command_line(tmp_path, capsys) -> None:
    out = tmp_path / "out.jsonl"
    rc, *_ = run(
        capsys, NORMALIZED, "--limit", "100", "--on-overflow", "truncate_oldest", "-o", out
    )
    assert rc == 0  # requirement (20 tokens) + decision (87) need 107: the older one goes
    units = [json.loads(line) for line in out.read_text().splitlines()]
    assert [u["category"] for u in units if u["category"] in MUST_KEEP] == ["decision"]


def test_llm_summarizer_from_the_command_line(tmp_path, capsys, monkeypatch) -> None:
    from llm_server import LLMServer

    monkeypatch.setenv("OPENAI_API_KEY", "test")
    out = tmp_path / "out.jsonl"
    with LLMServer(replies=["[condensed]"]) as srv:
        argv = [
            NORMALIZED,
            "--limit",
            "30%",
            "--summarizer",
            "openai",
            "--base-url",
            srv.openai_base_url,
        ]
        rc, *_ = run(capsys, *argv, "--summarizer-model", "small-model", "-o", out)
        models = {r.body["model"] for r in srv.requests}
    assert rc == 0 and models == {"small-model"}
    units = [json.loads(line) for line in out.read_text().splitlines()]
    assert any(u["text"] == "[condensed]" for u in units)


def test_llm_summarizer_without_a_key_fails_early(capsys, monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    rc, stdout, stderr = run(capsys, NORMALIZED, "--limit", "2000", "--summarizer", "anthropic")
    assert rc == 1 and stdout == ""
    assert stderr == "winnow compress: --summarizer anthropic: no API key (set ANTHROPIC_API_KEY)\n"


def test_llm_model_names_the_request_and_the_cache_minimum(tmp_path, capsys) -> None:
    out = tmp_path / "body.json"
    argv = [CLAUDE_CODE, "--limit", "40%", "--to", "anthropic", "--cache", "-o", out]
    rc, _stdout, stderr = run(capsys, *argv, "--llm-model", "claude-opus-4-8")
    assert rc == 0 and "unknown model" not in stderr
    body = json.loads(out.read_text())
    assert body["model"] == "claude-opus-4-8" and body["max_tokens"] > 0  # a complete request
    assert_valid_anthropic(body)
    # an unknown model: one warning line on stderr (as a user sees it, no test logging set up)
    cmd = [sys.executable, "-m", "winnow.cli", "compress", *map(str, argv[:-1])]
    done = subprocess.run(
        [*cmd, str(tmp_path / "nova.json"), "--llm-model", "claude-nova-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "nova.json").read_text())["model"] == "claude-nova-1"
    warning = [line for line in done.stderr.splitlines() if "claude-nova-1" in line]
    assert len(warning) == 1 and "minimum cacheable" in warning[0]
    assert "Traceback" not in done.stderr


def test_help_lists_the_output_formats(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["compress", "--help"])
    text = capsys.readouterr().out
    assert "{normalized,anthropic,openai}" in text and "--llm-model" in text
    assert "classifier model directory" in text and "JSON Lines" in text
