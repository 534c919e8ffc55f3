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
    ids = [u["id"] for u in source]
    assert [u["id"] for u in units] == [i for i in ids if i in {u["id"] for u in units}]
    changed = [u for u in units if "strategy" in u]
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


def test_pins_manifest_and_must_keep_changes(tmp_path, capsys) -> None:
    out, manifest = tmp_path / "out.jsonl", tmp_path / "manifest.jsonl"
    source = [json.loads(line) for line in NORMALIZED.read_text().splitlines()]
    # a status note of a few dozen tokens: pinned beside the must-keep units (107 tokens)
    big = next(u for u in source if u["category"] == "status" and 150 < len(u["text"]) < 300)
    argv = [NORMALIZED, "--limit", "150", "--pin", big["id"], "--pin", "re:^$NEVER"]
    rc, stdout, _ = run(capsys, *argv, "-o", out, "--manifest", manifest)
    assert rc == 0
    units = {u["id"]: u for u in map(json.loads, out.read_text().splitlines())}
    assert units[big["id"]]["text"] == big["text"]  # pinned: verbatim
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert [r["id"] for r in rows] == [u["id"] for u in source]
    for r in rows:
        assert {
            "category",
            "scores",
            "action",
            "tokens_before",
            "tokens_after",
            "output_id",
        } <= set(r)
    # the pin leaves the must-keep units too little: each change is printed, with why
    changed = [r for r in rows if r["must_keep"] and r["action"] != "kept"]
    assert changed and "must-keep unit(s) changed" in stdout
    for r in changed:
        assert r["id"] in stdout and "must-keep overflow" in r["reason"]
    rc, _, stderr = run(capsys, NORMALIZED, "--limit", "100", "--pin", "re:(")
    assert rc == 1 and "bad regular expression" in stderr


def test_headline_command_fits_and_fills(tmp_path, capsys) -> None:
    """`winnow compress FILE --limit 30% --to anthropic --cache -o out.json`: within the limit,
    at least 90% of it used, counted as sent."""
    from winnow.data.readers import read_paths
    from winnow.serving.tokens import default_token_counter, read_back, sent_tokens, unit_tokens

    out = tmp_path / "out.json"
    rc, _, _ = run(capsys, CLAUDE_CODE, "--limit", "30%", "--to", "anthropic", "--cache", "-o", out)
    assert rc == 0
    body = json.loads(out.read_text())
    assert_valid_anthropic(body)
    units = list(read_paths([CLAUDE_CODE]))
    limit = int(sent_tokens(units, "anthropic") * 0.3)
    # the body read back and counted as the compressor counts it
    sent = sum(unit_tokens(u, default_token_counter()) for u in read_back(body, "anthropic"))
    assert 0.9 * limit <= sent <= limit


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
        ([NORMALIZED, "--limit", "10", "--on-overflow", "error"], "must-keep units alone need"),
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
    # requirement (20 tokens) + decision (87) need 107: one goes, the oldest first, but the
    # user's request last under every policy (a request without the user's words is none)
    assert rc == 0
    units = [json.loads(line) for line in out.read_text().splitlines()]
    assert [u["category"] for u in units if u["category"] in MUST_KEEP] == ["requirement"]


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


@pytest.mark.parametrize("to", ["normalized", "anthropic"])
def test_a_session_with_nothing_left_is_named_and_the_others_are_written(
    tmp_path, capsys, to
) -> None:
    """As in a real Aider history (34 sessions, the first one only a .gitignore prompt): the
    session that compresses to nothing is named, the others are written."""
    noise = {"session_id": "a", "role": "system", "kind": "text", "category": "boilerplate"}
    lines = [{**noise, "id": "a:0", "index": 0, "text": "Add .aider* to .gitignore? (Y)es/(N)o"}]
    lines += [
        json.loads(line) for line in NORMALIZED.read_text().splitlines()
    ]  # one real session beside it
    src = tmp_path / "two.jsonl"
    src.write_text("".join(json.dumps(u) + "\n" for u in lines))
    out = tmp_path / "out"
    rc, stdout, _ = run(capsys, src, "--limit", "30%", "--to", to, "-o", out)
    # a request needs a message: a session without one says so at any limit
    why = (
        "nothing is left under the limit" if to == "normalized" else "no user or assistant message"
    )
    assert rc == 0
    assert f"session a: {why}" in stdout
    if to == "normalized":
        units = [json.loads(line) for line in out.read_text().splitlines()]
        assert units and {u["session_id"] for u in units} == {lines[-1]["session_id"]}
    else:
        assert [p.stem for p in out.iterdir()] == [lines[-1]["session_id"]]
    src.write_text(json.dumps(lines[0]) + "\n")  # nothing at all left: no output, exit 1
    rc, _, err = run(capsys, src, "--limit", "30%", "--to", to, "-o", tmp_path / "none")
    assert rc == 1 and why in err
    assert not (tmp_path / "none").exists()


def test_the_categories_line_says_who_labelled_what(tmp_path, capsys) -> None:
    rc, stdout, _ = run(capsys, CLAUDE_CODE, "--limit", "50%", "-o", tmp_path / "a.jsonl")
    n = sum(1 for _ in CLAUDE_CODE.open())  # an upper bound on the units
    line = next(x for x in stdout.splitlines() if x.startswith("categories:"))
    assert rc == 0 and "winnow-small" in line and "ImportanceClassifier" not in line
    assert 0 < int(line.split()[1].replace(",", "")) <= n  # how many units it labelled
    rc, stdout, _ = run(capsys, NORMALIZED, "--limit", "50%", "-o", tmp_path / "b.jsonl")
    assert rc == 0 and "categories: the input's own (every unit had one)" in stdout


@pytest.mark.parametrize("to", ["openai", "anthropic"])
def test_cache_minimum_follows_the_api_the_request_goes_to(tmp_path, capsys, caplog, to) -> None:
    """An OpenAI body (model gpt-4.1-mini): OpenAI caches from 1,024 tokens whatever the model,
    and --to anthropic writes a Claude request (claude-sonnet-4-6), whose minimum is known:
    no 'unknown model' warning about a model the output does not name."""
    from winnow.serving import render

    caplog.set_level("WARNING")
    body = FIXTURES / "roundtrip" / "openai" / "tools.json"
    out = tmp_path / "body.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(render, "_warned", set())
        rc, _, err = run(capsys, body, "--limit", "100%", "--to", to, "--cache", "-o", out)
    assert rc == 0, err
    assert "unknown model" not in caplog.text + err


def test_normalized_output_named_as_a_folder_is_one_line(tmp_path, capsys) -> None:
    """`-o out/` reads as a folder; the normalized output is one file, so say so rather than
    write a file called `out`."""
    rc, _, err = run(capsys, NORMALIZED, "--limit", "50%", "-o", f"{tmp_path / 'out'}/")
    assert rc == 1 and "one file" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_session_without_a_message_writes_no_empty_request(tmp_path, capsys) -> None:
    """A real Aider history opens sessions that hold only aider's start-up notes (a system
    unit): an Anthropic request of them would have `messages: []`, which the API rejects."""
    note = {"id": "a:0", "session_id": "a", "index": 0, "role": "system", "kind": "text"}
    note |= {"text": "Warning: vertex_ai/claude-sonnet-4 expects VERTEXAI_PROJECT", "category": "constraint"}  # fmt: skip
    lines = [note, *(json.loads(line) for line in NORMALIZED.read_text().splitlines())]
    src = tmp_path / "two.jsonl"
    src.write_text("".join(json.dumps(u) + "\n" for u in lines))
    out = tmp_path / "out"
    rc, stdout, _ = run(capsys, src, "--limit", "100%", "--to", "anthropic", "-o", out)
    assert rc == 0 and "session a: no user or assistant message" in stdout
    # at a limit too small for the note the reason is the same: no limit makes it a request
    alone = tmp_path / "alone.jsonl"
    alone.write_text(json.dumps(note) + "\n")
    rc, _, err = run(capsys, alone, "--limit", "3", "--to", "anthropic", "-o", tmp_path / "o2")
    assert rc == 1 and "session a: no user or assistant message" in err
    assert "raise --limit" not in err and err.count("\n") == 1
    assert [p.stem for p in out.iterdir()] == [lines[-1]["session_id"]]
    for p in out.iterdir():
        assert_valid_anthropic(json.loads(p.read_text()))
