"""Readers for Claude Code, Codex CLI, Copilot CLI and Gemini CLI: real excerpts and real traces."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from winnow.data.readers import ReadReport, detect_format, read_file, read_paths

FIXTURES = Path(__file__).parent / "fixtures" / "readers_a"
TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def read(path: Path) -> tuple[list, ReadReport]:
    report = ReadReport()
    return list(read_file(path, report)), report


def by_role_kind(units) -> Counter:
    return Counter((u.role, u.kind) for u in units)


def unpaired_results(units) -> list:
    """Tool results whose call_id has no tool_call earlier in the same session."""
    calls: dict[str, set] = defaultdict(set)
    bad = []
    for u in units:
        if u.kind == "tool_call":
            calls[u.session_id].add(u.call_id)
        elif u.kind == "tool_result" and u.call_id not in calls[u.session_id]:
            bad.append(u)
    return bad


def raw_claude_counts(path: Path) -> Counter:
    """Independent count of Claude Code content blocks by (role, kind), straight from the JSON.

    Deliberately simple and free of winnow code: every user/assistant line (glued lines split,
    a line repeated with the same uuid counted once), every block of its content, and each
    message the user queued that was not dequeued (as an ordinary user line) later.
    """
    kinds = {
        "text": "text",
        "image": "text",
        "thinking": "thinking",
        "redacted_thinking": "thinking",
    }
    kinds |= {"tool_use": "tool_call", "tool_result": "tool_result"}
    counts: Counter = Counter()
    seen = set()
    decoder = json.JSONDecoder()
    queue: list[bool] = []  # True: typed by the user (not a JSON or tagged notification)
    for line in path.read_text(encoding="utf-8").splitlines():
        line, pos = line.strip(), 0
        while pos < len(line):
            record, pos = decoder.raw_decode(line, pos)
            if record.get("type") == "queue-operation":
                op, text = record.get("operation"), record.get("content")
                if op == "enqueue":
                    queue.append(isinstance(text, str) and text.lstrip()[:1] not in "{<")
                elif op in ("dequeue", "remove") and queue:
                    typed = queue.pop(0)
                    counts["user", "text"] += op == "remove" and typed
                continue
            if record.get("type") not in ("user", "assistant") or record.get("uuid") in seen:
                continue
            seen.add(record.get("uuid"))
            content = record["message"]["content"]
            for block in [{"type": "text"}] if isinstance(content, str) else content:
                kind = kinds[block["type"]]
                counts["tool" if kind == "tool_result" else record["type"], kind] += 1
    counts["user", "text"] += sum(queue)
    return counts


def test_every_fixture_is_detected_from_content():
    assert detect_format(FIXTURES / "claude_code.jsonl") == "claude_code"
    assert detect_format(FIXTURES / "claude_code_tool_reference.jsonl") == "claude_code"
    assert detect_format(FIXTURES / "codex.jsonl") == "codex"
    assert detect_format(FIXTURES / "copilot.jsonl") == "copilot"
    # pretty-printed JSON under a .jsonl name: recognised by content, not by name
    assert detect_format(FIXTURES / "gemini_session.jsonl") == "gemini"
    assert detect_format(FIXTURES / "README.md") is None


def test_metadata_beside_sessions_is_not_claimed(tmp_path):
    meta = tmp_path / "metadata.json"
    meta.write_text(
        json.dumps({"session_id": "abc", "agent": "Claude Code", "token_usage": {"input": 3}})
    )
    assert detect_format(meta) is None


@pytest.mark.parametrize("name", ["claude_code.jsonl", "claude_code_tool_reference.jsonl"])
def test_claude_code_matches_independent_block_count(name):
    units, report = read(FIXTURES / name)
    assert report.problems == []
    assert by_role_kind(units) == raw_claude_counts(FIXTURES / name)


def test_claude_code_fixture_units():
    units, report = read(FIXTURES / "claude_code.jsonl")
    assert by_role_kind(units) == {
        ("assistant", "thinking"): 10,
        ("assistant", "text"): 4,
        ("assistant", "tool_call"): 10,
        ("tool", "tool_result"): 9,
        ("user", "text"): 6,
    }
    assert {u.session_id for u in units} == {"86cc3044-7515-43f1-9c25-1444738c64c9"}
    assert [u.index for u in units] == list(range(len(units)))
    assert all(u.id == f"{u.session_id}:{u.index}" for u in units)
    assert unpaired_results(units) == []
    # non-message records are counted by type, not read
    assert report.skipped["claude_code: progress"] == 9
    assert report.skipped["claude_code: file-history-snapshot"] == 4
    assert report.skipped["claude_code: system/stop_hook_summary"] == 1


def test_claude_code_groups_one_message_and_pairs_its_results():
    units, _ = read(FIXTURES / "claude_code.jsonl")
    first_turn = [(u.role, u.kind) for u in units[:7]]
    assert first_turn == [
        ("user", "text"),
        ("assistant", "thinking"),
        ("assistant", "text"),
        ("assistant", "tool_call"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
        ("tool", "tool_result"),
    ]
    calls, results = units[3:5], units[5:7]
    # parallel calls: results come back in completion order, paired by call_id
    assert {r.call_id: r.tool_name for r in results} == {c.call_id: c.tool_name for c in calls}
    assert all(c.tool_name for c in calls)
    for call in calls:  # compact JSON input
        assert call.text == json.dumps(
            json.loads(call.text), separators=(",", ":"), ensure_ascii=False
        )
    assert all(u.timestamp and u.timestamp.startswith("2026-01-") for u in units)


def test_claude_code_glued_and_repeated_lines():
    units, report = read(FIXTURES / "claude_code.jsonl")
    # line 24 of the fixture holds an assistant block and a snapshot glued together; line 25
    # writes the same assistant line again (same uuid): one unit, one repeat skipped
    glued = [u for u in units if u.text.startswith("No duplication. There are two related")]
    assert len(glued) == 1
    assert report.skipped["claude_code: line repeated (same uuid)"] == 1


def test_claude_code_keeps_command_wrappers_and_errors():
    units, _ = read(FIXTURES / "claude_code.jsonl")
    user_texts = [u.text for u in units if u.role == "user"]
    assert any(t.startswith("<command-name>/exit</command-name>") for t in user_texts)
    assert any(t.startswith("<local-command-stdout>Bye!") for t in user_texts)
    errors = [u for u in units if u.is_error]
    assert len(errors) == 1 and errors[0].kind == "tool_result" and errors[0].tool_name


def test_claude_code_tool_result_blocks_are_rendered():
    units, _ = read(FIXTURES / "claude_code_tool_reference.jsonl")
    call, result = units
    assert result.call_id == call.call_id and result.tool_name == call.tool_name == "ToolSearch"
    assert result.text == "[tool WebFetch]"


def _claude_lines() -> list[dict]:
    return [json.loads(x) for x in (FIXTURES / "claude_code.jsonl").read_text().splitlines()[:9]]


def test_claude_code_compaction_is_kept(tmp_path):
    lines = _claude_lines()
    user = next(x for x in lines if x["type"] == "user")
    boundary = {k: v for k, v in user.items() if k not in ("message",)}
    boundary |= {
        "type": "system",
        "subtype": "compact_boundary",
        "content": "Conversation compacted",
        "uuid": "b-1",
    }
    summary = json.loads(json.dumps(user)) | {"uuid": "s-1", "isCompactSummary": True}
    summary["message"]["content"] = "This session is being continued from a previous conversation."
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [*lines, boundary, summary]) + "\n")
    units, report = read(path)
    assert report.problems == []
    assert (units[-2].role, units[-2].text, units[-2].extra.get("compact_boundary")) == (
        "system",
        "Conversation compacted",
        True,
    )
    assert units[-1].role == "user" and units[-1].extra.get("compact_summary") is True


def test_claude_code_subagent_lines_get_their_own_session(tmp_path):
    lines = _claude_lines()
    side = [json.loads(json.dumps(x)) | {"isSidechain": True, "agentId": "a1b2"} for x in lines]
    for x in side:
        if "uuid" in x:
            x["uuid"] += "-side"
    path = tmp_path / "agent-a1b2.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines + side) + "\n")
    units, _ = read(path)
    sessions = Counter(u.session_id for u in units)
    sid = "86cc3044-7515-43f1-9c25-1444738c64c9"
    assert sessions == {sid: 7, f"{sid}/agent-a1b2": 7}
    assert len({u.id for u in units}) == len(units)


def test_claude_code_image_in_tool_result(tmp_path):
    lines = _claude_lines()
    result_line = next(
        x for x in lines if x["type"] == "user" and isinstance(x["message"]["content"], list)
    )
    block = result_line["message"]["content"][0]
    block["content"] = [
        {"type": "text", "text": "screenshot:"},
        {"type": "image", "source": {"data": "AAAA"}},
    ]
    path = tmp_path / "img.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    units, _ = read(path)
    assert any(u.kind == "tool_result" and u.text == "screenshot:\n[image]" for u in units)


def test_codex_fixture():
    units, report = read(FIXTURES / "codex.jsonl")
    assert report.problems == []
    assert by_role_kind(units) == {
        ("user", "text"): 1,
        ("assistant", "text"): 3,
        ("assistant", "tool_call"): 9,
        ("tool", "tool_result"): 7,
    }
    assert {u.session_id for u in units} == {"019ed9f4-6510-7fc0-8643-6d434f193bd0"}
    assert unpaired_results(units) == []
    # the user turn appears once though the rollout has it as response_item and event_msg
    assert report.skipped["codex: event_msg/user_message"] == 1
    calls = {u.call_id: u for u in units if u.kind == "tool_call"}
    results = [u for u in units if u.kind == "tool_result"]
    assert all(r.tool_name == calls[r.call_id].tool_name for r in results)
    tools = Counter(u.tool_name for u in units if u.kind == "tool_call")
    assert tools == {"exec_command": 5, "web_search": 2, "apply_patch": 1, "tool_search": 1}
    patch = next(u for u in units if u.tool_name == "apply_patch" and u.kind == "tool_call")
    assert patch.text.startswith("*** Begin Patch")
    shell = next(u for u in units if u.tool_name == "exec_command")
    assert json.loads(shell.text)["cmd"]
    assert shell.text == json.dumps(
        json.loads(shell.text), separators=(",", ":"), ensure_ascii=False
    )
    exec_results = [r for r in results if r.tool_name == "exec_command"]
    assert all(r.is_error is False for r in exec_results)  # "Process exited with code 0"


def test_codex_compacted_is_kept(tmp_path):
    lines = (FIXTURES / "codex.jsonl").read_text().splitlines()[:8]
    compacted = {
        "timestamp": "2026-06-18T09:00:00.000Z",
        "type": "compacted",
        "payload": {"message": "Summary so far"},
    }
    path = tmp_path / "rollout.jsonl"
    path.write_text("\n".join([*lines, json.dumps(compacted)]) + "\n")
    units, _ = read(path)
    last = units[-1]
    assert (last.role, last.kind, last.text) == ("user", "text", "Summary so far")
    assert last.extra["compact_summary"] and last.extra["compact_boundary"]


def test_copilot_fixture():
    units, report = read(FIXTURES / "copilot.jsonl")
    assert report.problems == []
    assert by_role_kind(units) == {
        ("user", "text"): 1,
        ("assistant", "thinking"): 3,
        ("assistant", "tool_call"): 7,
        ("tool", "tool_result"): 6,
    }
    assert {u.session_id for u in units} == {"10fb4666-56f0-4352-90fc-715caf95b418"}
    assert unpaired_results(units) == []
    assert report.skipped["copilot: hook.start"] == 12
    failed = [u for u in units if u.is_error]
    assert len(failed) == 1 and failed[0].text.startswith("shellId: 30 was already stopped")
    assert failed[0].tool_name == "read_bash"


def test_gemini_fixture():
    units, report = read(FIXTURES / "gemini_session.jsonl")
    assert report.problems == []
    assert by_role_kind(units) == {
        ("user", "text"): 2,
        ("assistant", "thinking"): 6,
        ("assistant", "text"): 2,
        ("assistant", "tool_call"): 2,
        ("tool", "tool_result"): 2,
    }
    assert {u.session_id for u in units} == {"faff42ab-6ea5-4f78-b8c4-f7dd6272af08"}
    assert unpaired_results(units) == []
    call, result = [u for u in units if u.tool_name == "read_file"]
    assert call.call_id == result.call_id and json.loads(call.text) == {
        "file_path": "test-gemini.txt"
    }
    assert result.text == "hello from gemini" and result.is_error is False


def test_gemini_synthesizes_call_ids(tmp_path):
    doc = json.loads((FIXTURES / "gemini_session.jsonl").read_text())
    for msg in doc["messages"]:
        for call in msg.get("toolCalls", []):
            del call["id"]
    path = tmp_path / "session.json"
    path.write_text(json.dumps(doc))
    units, _ = read(path)
    ids = [u.call_id for u in units if u.kind == "tool_call"]
    assert len(set(ids)) == 2 and all(ids)
    assert unpaired_results(units) == []


def test_ids_are_stable_across_runs():
    first = [u.to_dict() for u in read_paths([FIXTURES])]
    second = [u.to_dict() for u in read_paths([FIXTURES])]
    assert first == second
    assert len({(u["id"], u["source"]) for u in first}) == len(first)


# Figures established by reading the traces (shared/traces @ the commits in SOURCES.md).
TRACE_FIGURES = {
    "entireio-cli": {
        "sessions": 56,
        "formats": {"claude_code": 53, "gemini": 3},
        "units": {
            ("user", "text"): 172,
            ("assistant", "text"): 640,
            ("assistant", "thinking"): 774,
            ("assistant", "tool_call"): 1258,
            ("tool", "tool_result"): 1258,
        },
    },
    "oh-my-posh": {
        "sessions": 15,
        "formats": {"claude_code": 15},
        "units": {
            ("user", "text"): 76,
            ("assistant", "text"): 187,
            ("assistant", "thinking"): 512,
            ("assistant", "tool_call"): 764,
            ("tool", "tool_result"): 762,
        },
    },
    "packmind-context-evaluator": {
        "sessions": 25,
        "formats": {"claude_code": 25},
        "units": {
            ("user", "text"): 69,
            ("assistant", "text"): 269,
            ("assistant", "thinking"): 60,
            ("assistant", "tool_call"): 538,
            ("tool", "tool_result"): 537,
        },
    },
    "agentv": {
        "sessions": 23,
        "formats": {"codex": 10, "copilot": 11, "claude_code": 2},
        "units": {
            ("system", "text"): 66,
            ("user", "text"): 115,
            ("assistant", "text"): 498,
            ("assistant", "thinking"): 26,
            ("assistant", "tool_call"): 1055,
            ("tool", "tool_result"): 1037,
        },
    },
}


@pytest.fixture(scope="module")
def traces():
    if not TRACES.is_dir():
        pytest.skip("../shared/traces not present")
    report = ReadReport()
    units = list(read_paths([TRACES], report))
    return units, report


def test_traces_read_without_problems(traces):
    _, report = traces
    assert report.problems == []


@pytest.mark.parametrize("source", sorted(TRACE_FIGURES))
def test_trace_figures(traces, source):
    units, _ = traces
    mine = [u for u in units if Path(u.extra["source"]).relative_to(TRACES).parts[0] == source]
    want = TRACE_FIGURES[source]
    assert by_role_kind(mine) == want["units"]
    assert len({u.session_id for u in mine}) == want["sessions"]
    assert Counter(u.extra["format"] for u in mine if u.index == 0) == want["formats"]
    assert unpaired_results(mine) == []
    for u in mine:
        assert u.role in ("system", "user", "assistant", "tool") and isinstance(u.text, str)
        assert (u.kind in ("tool_call", "tool_result")) == (
            u.call_id is not None or u.tool_name == "web_search"
        )
        assert u.kind not in ("tool_call", "tool_result") or u.tool_name


def test_traces_claude_code_match_independent_count(traces):
    units, _ = traces
    per_file: dict[str, Counter] = defaultdict(Counter)
    for u in units:
        if u.extra["format"] == "claude_code":
            per_file[u.extra["source"]][u.role, u.kind] += 1
    assert len(per_file) == 95
    for source, counts in per_file.items():
        assert counts == raw_claude_counts(Path(source)), source
