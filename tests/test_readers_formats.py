"""Readers for SWE-agent, OpenHands, Aider, OpenAI chat, Anthropic Messages and normalized JSONL."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from winnow.data.readers import ReadReport, detect_format, read_file, read_paths
from winnow.data.writers import write_jsonl

FIXTURES = Path(__file__).parent / "fixtures" / "readers_b"
TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def read(path: Path) -> tuple[list, ReadReport]:
    report = ReadReport()
    return list(read_file(path, report)), report


def shape(units) -> list[tuple]:
    return [(u.role, u.kind, u.tool_name) for u in units]


def check_pairs(units) -> None:
    """Every tool result answers an earlier call of its session, with the same tool name."""
    calls: dict[str, dict] = defaultdict(dict)
    for u in units:
        if u.kind == "tool_call":
            assert u.role == "assistant" and u.call_id and u.tool_name, u
            assert u.call_id not in calls[u.session_id], f"duplicate call id {u.call_id}"
            calls[u.session_id][u.call_id] = u
        elif u.kind == "tool_result":
            assert u.role == "tool", u
            call = calls[u.session_id].get(u.call_id)
            assert call is not None, f"result {u.id} answers no call"
            assert call.tool_name == u.tool_name
    ids = Counter(u.id for u in units)
    assert max(ids.values()) == 1
    for sid in {u.session_id for u in units}:
        assert [u.index for u in units if u.session_id == sid] == list(
            range(sum(1 for u in units if u.session_id == sid))
        )


# --- SWE-agent -------------------------------------------------------------------------------


def test_swe_agent_trajectory_steps_become_paired_calls():
    units, report = read(FIXTURES / "swe-agent__test-repo-i1.traj")
    assert not report.problems and dict(report.formats) == {"swe_agent": 1}
    assert {u.session_id for u in units} == {"swe-agent__test-repo-i1"}
    # System prompt, the demonstration, the task; then thought, action, observation per step.
    assert shape(units[:3]) == [
        ("system", "text", None),
        ("user", "text", None),
        ("user", "text", None),
    ]
    assert units[1].extra.get("is_demo") is True and "is_demo" not in units[2].extra
    assert "SyntaxError" in units[2].text
    calls = [u for u in units if u.kind == "tool_call"]
    assert [c.tool_name for c in calls] == ["find_file", "open", "edit", "python", "submit"]
    assert calls[0].call_id == "swe-agent__test-repo-i1:call:0"
    assert json.loads(calls[2].text) == {
        "command": "edit 4:4\ndef division(a: float, b: float) -> float:\nend_of_edit"
    }
    assert calls[2].text == json.dumps(json.loads(calls[2].text), separators=(",", ":"))
    results = [u for u in units if u.kind == "tool_result"]
    # The raw observation, without history's "(Open file: ...)" prompt wrapper.
    assert results[0].text.startswith('Found 1 matches for "missing_colon.py"')
    assert "(Open file:" not in results[0].text
    assert [u.kind for u in units[3:6]] == ["text", "tool_call", "tool_result"]
    check_pairs(units)


def test_swe_agent_function_calling_history_keeps_source_call_ids():
    units, report = read(FIXTURES / "function_calling_simple.traj")
    assert not report.problems
    calls = [u for u in units if u.kind == "tool_call"]
    assert calls[0].call_id == "call_PbWErNIge3YTrli3fiVvmIid"
    assert calls[0].tool_name == "find_file"
    assert json.loads(calls[0].text) == {"file_name": "missing_colon.py"}
    assert len(calls) == 5 and sum(u.kind == "tool_result" for u in units) == 5
    check_pairs(units)


# --- OpenHands -------------------------------------------------------------------------------


def test_openhands_event_list():
    units, report = read(FIXTURES / "wrong_initial_state.json")
    assert not report.problems and dict(report.formats) == {"openhands": 1}
    assert units[0].role == "user" and units[0].text == "Please rename game_2048.py to 2048.py"
    assert units[0].timestamp == "2025-01-27T23:16:50.239610"
    calls = [u for u in units if u.kind == "tool_call"]
    assert [c.tool_name for c in calls] == [
        "str_replace_editor",
        "execute_bash",
        "str_replace_editor",
    ]
    assert calls[0].call_id == "toolu_01USom24cuiyvAembLhEryrn"
    # The tool input is what the model sent, not OpenHands' internal args.
    assert json.loads(calls[0].text) == {"command": "view", "path": "/workspace"}
    # The agent's words before a call are assistant text; `finish` closes with assistant text.
    assert units[1].role == "assistant" and units[1].kind == "text"
    assert units[-1].role == "assistant" and units[-1].kind == "text"
    check_pairs(units)


def test_openhands_output_jsonl_one_session_per_instance():
    units, report = read(FIXTURES / "output.jsonl")
    assert not report.problems
    assert [s for s in dict.fromkeys(u.session_id for u in units)] == [
        "ponylang__ponyc-4595",
        "ponylang__ponyc-4593",
    ]
    first = [u for u in units if u.session_id == "ponylang__ponyc-4595"]
    assert first[0].role == "system" and first[0].text.startswith("You are OpenHands agent")
    assert first[1].role == "user" and "<uploaded_files>" in first[1].text
    assert [u.kind for u in first].count("thinking") == 1
    # Non-zero exit codes are errors, zero is not.
    bash = [u for u in first if u.kind == "tool_result" and u.tool_name == "execute_bash"]
    assert bash[0].is_error is False
    assert any(u.is_error and "command not found" in u.text for u in bash)
    # A rejected call OpenHands never ran comes back to the model as user text.
    second = [u for u in units if u.session_id == "ponylang__ponyc-4593"]
    rejected = [u for u in second if u.role == "user" and u.is_error]
    assert len(rejected) == 1 and rejected[0].text.startswith("Parameter 'command'")
    assert report.skipped["openhands recall action"] == 2
    check_pairs(units)


def test_openhands_flattened_resolver_output_pairs_by_order():
    units, report = read(FIXTURES / "resolver_output.jsonl")
    assert not report.problems
    assert {u.session_id for u in units} == {"neubig/pr-viewer#5"}
    assert shape(units[:4]) == [
        ("user", "text", None),
        ("assistant", "text", None),
        ("assistant", "tool_call", "run"),
        ("tool", "tool_result", "run"),
    ]
    assert json.loads(units[2].text) == {"command": "touch LICENSE"}
    assert {u.tool_name for u in units if u.kind == "tool_call"} == {"run", "run_ipython"}
    check_pairs(units)


@pytest.mark.parametrize("indent", [None, 2])
def test_openhands_per_event_files_read_once_as_a_session(tmp_path, indent):
    events = json.loads((FIXTURES / "wrong_initial_state.json").read_text())
    folder = tmp_path / "sessions" / "abc123" / "events"
    folder.mkdir(parents=True)
    for n, e in enumerate(events):
        (folder / f"{n}.json").write_text(json.dumps(e, indent=indent))
    report = ReadReport()
    units = list(read_paths([tmp_path], report))
    expected, _ = read(FIXTURES / "wrong_initial_state.json")
    assert {u.session_id for u in units} == {"abc123"}
    assert shape(units) == shape(expected)
    assert report.skipped["openhands event file (read with its session's first event)"] == 7


# --- Aider -----------------------------------------------------------------------------------


def test_aider_sessions_users_and_output():
    units, report = read(FIXTURES / "aider.chat.history.md")
    assert not report.problems and dict(report.formats) == {"aider": 1}
    sessions = list(dict.fromkeys(u.session_id for u in units))
    assert sessions == [
        "aider:2025-06-02T12:55:22",
        "aider:2025-06-02T13:02:14",
        "aider:2025-06-02T13:08:08",
        "aider:2025-06-02T13:08:34",
    ]
    first = [u for u in units if u.session_id == sessions[0]]
    assert all(u.timestamp == "2025-06-02T12:55:22" for u in first)
    assert first[0].role == "system" and first[0].text.startswith(
        "C:\\Users\\user\\.local\\bin\\aider"
    )
    assert (first[1].role, first[1].text) == ("user", "What's this?")
    assert first[2].role == "assistant" and first[2].kind == "text"
    assert first[3].role == "system" and first[3].text.startswith("Tokens: 9.7k sent")
    # A multi-line user message is one unit, its `#### ` prefixes and hard breaks removed.
    assert any(
        u.text
        == "Comment on my CONVENTIONS.md\nI'm looking for suggestions, feedbacks. Everything."
        for u in units
    )


def test_aider_edits_pair_with_applied_and_skipped():
    units, _ = read(FIXTURES / "aider.chat.history.md")
    edits = [u for u in units if u.kind == "tool_call"]
    assert all(u.tool_name == "edit" for u in edits)
    first = json.loads(edits[0].text)
    assert first["path"] == "packages/module/es/src/CONVENTIONS.md"
    assert first["search"].startswith("When writing code in TypeScript, try to:")
    assert "<<<<<<<" not in edits[0].text and ">>>>>>>" not in edits[0].text
    results = {u.call_id: u for u in units if u.kind == "tool_result"}
    assert (
        results[edits[0].call_id].text
        == "Applied edit to packages\\module\\es\\src\\CONVENTIONS.md"
    )
    assert results[edits[0].call_id].is_error is False
    skipped = [u for u in results.values() if u.text == "Skipping edits to CONVENTIONS.md"]
    assert len(skipped) == 2 and all(u.is_error for u in skipped)
    # The prose around the blocks stays assistant text, without the fences.
    text = [u for u in units if u.role == "assistant" and u.kind == "text"]
    assert any(
        u.text.endswith("Here are the *SEARCH/REPLACE* blocks to apply these suggestions:")
        for u in text
    )
    assert len(edits) == 8 and len(results) == 8
    check_pairs(units)


FAILED_EDIT = """
# aider chat started at 2025-06-02 14:29:21

#### Add TSDoc to intersectionIterables  

Here are the blocks:

```typescript
src/a.ts
<<<<<<< SEARCH
export function a() {}
=======
/** A. */
export function a() {}
>>>>>>> REPLACE
```

```typescript
src/b.ts
<<<<<<< SEARCH
export function b() {}
=======
/** B. */
export function b() {}
>>>>>>> REPLACE
```

> Tokens: 23k sent, 1.6k received. Cost: $0.05 message, $0.16 session.  
> The LLM did not conform to the edit format.  
> https://aider.chat/docs/troubleshooting/edit-errors.html  
> # 1 SEARCH/REPLACE block failed to match!

## SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in src/b.ts
<<<<<<< SEARCH
export function b() {}
=======
/** B. */
export function b() {}
>>>>>>> REPLACE

The SEARCH section must exactly match an existing block of lines including all white space, comments, indentation, docstrings, etc

# The other 1 SEARCH/REPLACE block were applied successfully.
Don't re-send them.
Just reply with fixed versions of the block above that failed to match.  
> Commit adc107a docs: Add TSDoc for intersectionIterables  

You are right; here is the corrected block.
"""


def test_aider_failed_block_report_is_an_error_result(tmp_path):
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(FAILED_EDIT)
    units, report = read(path)
    assert not report.problems
    edits = [u for u in units if u.kind == "tool_call"]
    assert [json.loads(u.text)["path"] for u in edits] == ["src/a.ts", "src/b.ts"]
    results = {u.call_id: u for u in units if u.kind == "tool_result"}
    failed = results[edits[1].call_id]
    assert failed.is_error and failed.text.startswith("# 1 SEARCH/REPLACE block failed to match!")
    assert failed.text.rstrip().endswith(
        "Just reply with fixed versions of the block above that failed to match."
    )
    assert results[edits[0].call_id].is_error is False
    # The report's own SEARCH block is aider output, not a third edit.
    assert len(edits) == 2
    assert (
        units[-1].role == "assistant"
        and units[-1].text == "You are right; here is the corrected block."
    )
    check_pairs(units)


def test_aider_dot_file_is_found_in_folders(tmp_path):
    shutil.copy(FIXTURES / "aider.chat.history.md", tmp_path / ".aider.chat.history.md")
    (tmp_path / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    report = ReadReport()
    units = list(read_paths([tmp_path], report))
    assert report.files == 1 and len({u.session_id for u in units}) == 4


# --- OpenAI chat and Anthropic Messages ------------------------------------------------------


def test_openai_request():
    units, report = read(FIXTURES / "openai_request.json")
    assert not report.problems and dict(report.formats) == {"openai_chat": 1}
    assert shape(units) == [
        ("system", "text", None),
        ("user", "text", None),
        ("assistant", "text", None),
        ("assistant", "tool_call", "run_shell"),
        ("tool", "tool_result", "run_shell"),
        ("assistant", "tool_call", "read_file"),
        ("assistant", "tool_call", "run_shell"),
        ("tool", "tool_result", "read_file"),
        ("tool", "tool_result", "run_shell"),
        ("assistant", "text", None),
        ("assistant", "tool_call", "apply_patch"),
        ("tool", "tool_result", "apply_patch"),
        ("assistant", "text", None),
        ("user", "text", None),
    ]
    assert units[3].call_id == units[4].call_id == "call_7Qd2sWm1"
    assert (
        units[3].text == '{"command":"python -m pytest tests/test_dates.py::test_parse_iso -x -q"}'
    )
    assert units[8].text == "src/dates.py:5:    return datetime.fromisoformat(value)"
    assert {u.session_id for u in units} == {"openai_request"}
    check_pairs(units)


def test_openai_jsonl_shapes(tmp_path):
    request = json.loads((FIXTURES / "openai_request.json").read_text())
    lines = tmp_path / "requests.jsonl"
    lines.write_text(
        json.dumps(request)
        + "\n"
        + json.dumps({"custom_id": "req-2", "body": {"messages": request["messages"][:2]}})
        + "\n"
    )
    units, report = read(lines)
    assert not report.problems
    assert list(dict.fromkeys(u.session_id for u in units)) == ["requests-1", "req-2"]
    messages = tmp_path / "messages.jsonl"
    messages.write_text("\n".join(json.dumps(m) for m in request["messages"]) + "\n")
    listed = tmp_path / "messages.json"
    listed.write_text(json.dumps(request["messages"], indent=1))
    expected = shape(read(FIXTURES / "openai_request.json")[0])
    for path in (messages, listed):
        units, report = read(path)
        assert not report.problems and shape(units) == expected


def test_request_log_of_one_conversation_is_read_once(tmp_path):
    """A proxy log repeats the whole conversation in every request; only the longest is read."""
    messages = json.loads((FIXTURES / "openai_request.json").read_text())["messages"]
    other = [{"role": "user", "content": "What does `git rebase --onto` do?"}]
    log = tmp_path / "proxy.jsonl"
    turns = [messages[:2], messages[:5], messages[:9], messages, other]
    log.write_text("".join(json.dumps({"model": "gpt-4.1", "messages": m}) + "\n" for m in turns))
    units, report = read(log)
    assert list(dict.fromkeys(u.session_id for u in units)) == ["proxy-1", "proxy-5"]
    assert shape([u for u in units if u.session_id == "proxy-1"]) == shape(
        read(FIXTURES / "openai_request.json")[0]
    )
    assert report.skipped["request repeating an earlier request's messages"] == 3


def test_anthropic_request():
    units, report = read(FIXTURES / "anthropic_request.json")
    assert not report.problems and dict(report.formats) == {"anthropic_messages": 1}
    assert shape(units) == [
        ("system", "text", None),
        ("user", "text", None),
        ("assistant", "thinking", None),
        ("assistant", "text", None),
        ("assistant", "tool_call", "Read"),
        ("tool", "tool_result", "Read"),
        ("assistant", "tool_call", "Edit"),
        ("tool", "tool_result", "Edit"),
        ("assistant", "tool_call", "Bash"),
        ("tool", "tool_result", "Bash"),
        ("user", "text", None),
    ]
    assert json.loads(units[4].text) == {"file_path": "/repo/cli.py"}
    assert units[7].text == "The file /repo/cli.py has been updated."
    assert [u.is_error for u in units if u.kind == "tool_result"] == [False, False, True]
    check_pairs(units)


# --- normalized JSONL and the writer ---------------------------------------------------------


def test_normalized_round_trip(tmp_path):
    report = ReadReport()
    units = list(read_paths([FIXTURES], report))
    units[0].extra["category"] = "requirement"
    units[1].extra["scores"] = {"status": 0.75}
    out = tmp_path / "units.jsonl"
    assert write_jsonl(units, out) == len(units)
    assert detect_format(out) == "normalized"
    back, report = read(out)
    assert not report.problems
    assert [u.to_dict() for u in back] == [u.to_dict() for u in units]
    again = tmp_path / "again.jsonl"
    write_jsonl(back, again)
    assert again.read_bytes() == out.read_bytes()


def test_normalized_bad_records_are_reported_and_skipped(tmp_path):
    good = {
        "id": "s:0",
        "session_id": "s",
        "index": 0,
        "role": "user",
        "kind": "text",
        "text": "hi",
    }
    lines = [
        good,
        dict(good, id="s:1", index="1"),  # a whole number in a string: read as 1
        dict(good, id="s:2", index="two"),
        dict(good, id="s:3", text=3),
        dict(good, id="s:4", role="bot"),
        dict(good, id="s:5", index=5, is_error="no"),
    ]
    path = tmp_path / "units.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + '\n{"id": "s:6", "session_id"\n')
    units, report = read(path)
    assert [(u.id, u.index) for u in units] == [("s:0", 0), ("s:1", 1)]
    assert len(report.problems) == 5
    assert report.problems[0].startswith(f"{path}:3: ") and "`index`" in report.problems[0]
    assert report.problems[1].startswith(f"{path}:4: ") and "`text`" in report.problems[1]
    assert report.problems[2].startswith(f"{path}:5: ") and "role" in report.problems[2]
    assert report.problems[3].startswith(f"{path}:6: ") and "is_error" in report.problems[3]
    assert report.problems[4].startswith(f"{path}:7: ") and "JSON" in report.problems[4]


# --- detection and bad input -----------------------------------------------------------------


@pytest.mark.parametrize(
    "fixture, misleading, fmt",
    [
        ("swe-agent__test-repo-i1.traj", "output.jsonl", "swe_agent"),
        ("output.jsonl", "trajectory.traj", "openhands"),
        ("wrong_initial_state.json", "chat.md", "openhands"),
        ("aider.chat.history.md", "session.jsonl", "aider"),
        ("openai_request.json", "claude.json", "openai_chat"),
        ("anthropic_request.json", "openai.jsonl", "anthropic_messages"),
    ],
)
def test_format_is_detected_from_content(tmp_path, fixture, misleading, fmt):
    path = tmp_path / misleading
    shutil.copy(FIXTURES / fixture, path)
    assert detect_format(path) == fmt
    units, report = read(path)
    assert not report.problems
    assert shape(units) == shape(read(FIXTURES / fixture)[0])


def test_truncated_json_is_one_clear_line(tmp_path):
    for name in (
        "swe-agent__test-repo-i1.traj",
        "wrong_initial_state.json",
        "anthropic_request.json",
    ):
        path = tmp_path / name
        text = (FIXTURES / name).read_text()
        path.write_text(text[: len(text) // 2])
        units, report = read(path)  # the records whole before the cut are kept (test_bad_input)
        assert len(report.problems) == 1 and report.problems[0].startswith(f"{path}:")
        assert "truncated JSON" in report.problems[0]


def test_bad_lines_keep_the_good_records(tmp_path):
    good = (FIXTURES / "output.jsonl").read_text().splitlines()
    path = tmp_path / "output.jsonl"
    path.write_text(good[0] + "\n" + good[1][:5000] + "\n" + "[1, 2]\n")
    units, report = read(path)
    assert {u.session_id for u in units} == {"ponylang__ponyc-4595"}
    assert [p.split(": ")[0] for p in report.problems] == [f"{path}:2", f"{path}:3"]

    request = json.loads((FIXTURES / "anthropic_request.json").read_text())
    request["messages"].insert(2, {"role": "assistant", "content": 42})
    request["messages"].insert(3, {"role": "robot", "content": "hi"})
    path = tmp_path / "anthropic.json"
    path.write_text(json.dumps(request, indent=1))
    units, report = read(path)
    assert len(report.problems) == 2 and "content is int" in report.problems[0]
    assert shape(units) == shape(read(FIXTURES / "anthropic_request.json")[0])


# --- every real trace of these formats -------------------------------------------------------

EXPECTED = {
    # source folder: (files, sessions, tool calls, tool results)
    "swe-agent": (15, 15, 148, 148),
    "openhands": (6, 9, 133, 133),
    "aider": (4, 60, 42, 39),
}


@pytest.mark.traces
@pytest.mark.parametrize("source", sorted(EXPECTED))
def test_real_traces(source):
    folder = TRACES / source
    if not folder.is_dir():
        pytest.skip("../shared/traces is absent")
    report = ReadReport()
    units = list(read_paths([folder], report))
    assert report.problems == []
    files, sessions, calls, results = EXPECTED[source]
    assert report.files == files and len(report.sessions) == sessions
    assert report.units_by_kind["tool_call"] == calls
    assert report.units_by_kind["tool_result"] == results
    check_pairs(units)
    counts = Counter((u.role, u.kind) for u in units)
    print(f"\n{source}: {report.units} units, {dict(sorted(counts.items()))}")


ODD_VALUES = [None, 0, -1, 1.5, True, "", "x", [], [1, "a"], {}, {"a": 1}, [{"type": 3}]]


def _paths(obj, prefix=()):
    yield prefix
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for k, v in items:
        yield from _paths(v, (*prefix, k))


@pytest.mark.parametrize(
    "name",
    [
        "swe-agent__test-repo-i1.traj",
        "function_calling_simple.traj",
        "wrong_initial_state.json",
        "resolver_output.jsonl",
        "openai_request.json",
        "anthropic_request.json",
    ],
)
def test_fields_of_any_type_never_raise(tmp_path, name):
    """Any field replaced by a value of another type: problems are reported, units stay typed."""
    rng = random.Random(name)
    text = (FIXTURES / name).read_text()
    jsonl = name.endswith(".jsonl")
    original = json.loads(text.splitlines()[0] if jsonl else text)
    paths = list(_paths(original))[1:]
    for _ in range(40):
        doc = json.loads(json.dumps(original))
        for _ in range(rng.randint(1, 4)):
            *parents, last = rng.choice(paths)
            target = doc
            try:
                for k in parents:
                    target = target[k]
                target[last] = json.loads(json.dumps(rng.choice(ODD_VALUES)))
            except (KeyError, IndexError, TypeError):
                pass  # an earlier change removed this path
        path = tmp_path / name
        path.write_text(json.dumps(doc) + "\n" if jsonl else json.dumps(doc, indent=1))
        units, report = read(path)
        for u in units:
            assert isinstance(u.text, str) and u.role in ("system", "user", "assistant", "tool")
            assert u.call_id is None or isinstance(u.call_id, str)
            assert u.tool_name is None or isinstance(u.tool_name, str)
        assert all(p.startswith(str(path)) and "\n" not in p for p in report.problems)
