"""Readers against hostile and odd input (issue 11): a byte order mark, a first record longer
than the sniffed head, JSON nested 10^5 deep, out-of-range numbers, an unreadable file among
good ones, repeated ids. Each is one `file:line: reason` problem (or none, where the input is
fine) and every good record around it is kept; and the in-memory `parse` reads every format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from winnow.cli import main
from winnow.data import parse
from winnow.data.readers import ReadReport, base, detect_format, read_file, read_paths

A = Path(__file__).parent / "fixtures" / "readers_a"
B = Path(__file__).parent / "fixtures" / "readers_b"
DEEP = "[" * 100_000 + "]" * 100_000


def read(path: Path) -> tuple[list, ReadReport]:
    report = ReadReport()
    return list(read_file(path, report)), report


def shape(units: list) -> list[tuple]:
    return [(u.session_id, u.role, u.kind, u.text, u.call_id) for u in units]


@pytest.mark.parametrize(
    "name",
    [
        "claude_code.jsonl",
        "codex.jsonl",
        "copilot.jsonl",
        "gemini_session.jsonl",
        "../readers_b/anthropic_request.json",
        "../readers_b/openai_request.json",
        "../readers_b/aider.chat.history.md",
        "../readers_b/output.jsonl",
    ],
)
def test_a_byte_order_mark_loses_nothing(tmp_path, name) -> None:
    source = A / name
    with_bom = tmp_path / Path(name).name
    with_bom.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
    expected, _ = read(source)
    units, report = read(with_bom)
    assert report.problems == [] and detect_format(with_bom) == detect_format(source)
    assert shape(units) == shape(expected) and units


def test_a_first_line_longer_than_the_head_is_still_detected(tmp_path) -> None:
    request = json.loads((B / "anthropic_request.json").read_text())
    request["system"][0]["text"] += " Follow the house style." * 16000  # ~200 KB on line one
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps(request) + "\n" + json.dumps(request) + "\n")
    assert path.read_text().index("\n") > 3 * base.HEAD_BYTES
    assert detect_format(path) == "anthropic_messages"
    units, report = read(path)
    assert report.problems == [] and len(units) == 11  # the two lines repeat one conversation
    lines = (A / "claude_code.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["padding"] = "x" * 300_000  # a Claude Code record padded past the head
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert detect_format(path) == "claude_code"
    assert shape(read(path)[0]) == shape(read(A / "claude_code.jsonl")[0])


def test_json_nested_100000_deep_is_one_line_and_the_read_goes_on(tmp_path) -> None:
    lines = (A / "codex.jsonl").read_text().splitlines()
    path = tmp_path / "codex.jsonl"
    path.write_text("\n".join([lines[0], DEEP, *lines[1:]]) + "\n")
    units, report = read(path)
    assert report.problems == [f"{path}:2: JSON nested too deeply to read, line skipped"]
    assert shape(units) == shape(read(A / "codex.jsonl")[0])
    whole = tmp_path / "request.json"
    whole.write_text('{"model": "gpt-4o", "messages": [{"role": "user", "content": ' + DEEP + "}]}")
    units, report = read(whole)
    assert units == [] and len(report.problems) == 1 and "nested too deeply" in report.problems[0]
    deep: object = {}
    for _ in range(100_000):  # a tool input nested deeper than anything can print
        deep = {"a": deep}
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": deep}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
            },
        ]
    }
    report = ReadReport()
    units = list(parse(body, "anthropic_messages", report))
    assert [u.text for u in units] == ["hi", "ok"]
    assert len(report.problems) == 1 and "nested too deeply" in report.problems[0]


def test_out_of_range_numbers_are_one_line_each(tmp_path) -> None:
    good = {
        "id": "s:0",
        "session_id": "s",
        "index": 0,
        "role": "user",
        "kind": "text",
        "text": "hi",
    }
    records = [
        json.dumps(good),
        json.dumps({**good, "id": "s:1", "index": "²"}),
        json.dumps({**good, "id": "s:2"}).replace('"index": 0', '"index": 1e400'),
        json.dumps({**good, "id": "s:3", "index": 2**70}),
        json.dumps({**good, "id": "s:4", "index": 4}),
    ]
    path = tmp_path / "units.jsonl"
    path.write_text("\n".join(records) + "\n")
    units, report = read(path)
    assert [u.id for u in units] == ["s:0", "s:4"]
    assert [p.split(": ")[0] for p in report.problems] == [f"{path}:{n}" for n in (2, 3, 4)]
    assert all("`index`" in p and "\n" not in p for p in report.problems)
    assert main(["compress", str(path), "--limit", "100%", "-o", str(tmp_path / "o.jsonl")]) == 0


def test_an_unreadable_file_is_one_line_and_the_job_goes_on(tmp_path, monkeypatch, capsys) -> None:
    for name in ("claude_code.jsonl", "codex.jsonl", "copilot.jsonl"):
        (tmp_path / name).write_bytes((A / name).read_bytes())
    locked = tmp_path / "codex.jsonl"
    real = base.open_bytes

    def open_bytes(path):  # as a permission-denied file answers (root reads anything)
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(base, "open_bytes", open_bytes)
    report = ReadReport()
    units = list(read_paths([tmp_path], report))
    assert report.problems == [f"{locked}: cannot read (Permission denied), skipped"]
    assert {u.extra["format"] for u in units} == {"claude_code", "copilot"}
    assert main(["extract", str(tmp_path), "-o", str(tmp_path / "units.parquet")]) == 0
    out = capsys.readouterr().out
    assert (
        "1 problem(s)" in out and "Permission denied" in out and "from 2" in out.replace("\n", " ")
    )


def test_a_repeated_id_with_other_content_is_reported(tmp_path) -> None:
    good = {
        "id": "s:0",
        "session_id": "s",
        "index": 0,
        "role": "user",
        "kind": "text",
        "text": "hi",
    }
    path = tmp_path / "units.jsonl"
    rows = [good, good, {**good, "text": "hello"}, {**good, "id": "s:1", "index": 1}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    units, report = read(path)
    assert [u.text for u in units] == ["hi", "hello", "hi"]
    assert report.problems == [
        f"{path}:3: id 's:0' repeats line 1 with other content, read as well"
    ]
    assert report.skipped["normalized: line repeated (same id and content)"] == 1

    lines = (A / "claude_code.jsonl").read_text().splitlines()
    k = next(
        i for i, line in enumerate(lines) if '"type": "user"' in line or '"type":"user"' in line
    )
    record = json.loads(lines[k])
    changed = json.loads(lines[k])
    changed["message"]["content"] = "a different question, same uuid"
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join([*lines, json.dumps(record), json.dumps(changed)]) + "\n")
    units, report = read(path)
    n = len(lines)
    assert report.problems == [
        f"{path}:{n + 2}: uuid {record['uuid']} repeats with other content, read as well"
    ]
    assert units[-1].text == "a different question, same uuid"
    assert len(units) == len(read(A / "claude_code.jsonl")[0]) + 1


@pytest.mark.parametrize(
    "name",
    [
        "claude_code.jsonl",
        "codex.jsonl",
        "copilot.jsonl",
        "gemini_session.jsonl",
        "../readers_b/aider.chat.history.md",
        "../readers_b/swe-agent__test-repo-i1.traj",
        "../readers_b/output.jsonl",
        "../readers_c/specstory_cursor_chat.md",
    ],
)
def test_parse_reads_every_format_in_memory(name) -> None:
    path = A / name
    from_file, _ = read(path)
    text = path.read_text()
    docs: list = [text]
    if path.suffix == ".jsonl" and name != "gemini_session.jsonl":
        decoder = json.JSONDecoder()
        records = []
        for line in text.splitlines():  # glued records (a write race) included
            pos = 0
            while pos < len(line.strip()):
                obj, pos = decoder.raw_decode(line.strip(), pos)
                records.append(obj)
        docs.append(records)
    elif path.suffix in (".traj", ".jsonl"):
        docs.append(json.loads(text))
    for doc in docs:
        report = ReadReport()
        units = list(parse(doc, session_id=path.stem, report=report))
        assert report.problems == []
        assert [(u.role, u.kind, u.text, u.call_id) for u in units] == [
            (u.role, u.kind, u.text, u.call_id) for u in from_file
        ]


def test_json_lines_of_anthropic_messages_are_read_as_anthropic(tmp_path) -> None:
    body = json.loads((B / "anthropic_request.json").read_text())
    path = tmp_path / "messages.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in body["messages"]))
    assert detect_format(path) == "anthropic_messages"
    units, report = read(path)
    assert report.problems == []
    assert [u.kind for u in units] == [u.kind for u in parse(body) if u.role != "system"]


def _lock_folder(monkeypatch, locked: Path) -> None:
    """Make `locked` answer as a folder without read permission does (root reads anything)."""
    import os

    real = os.scandir

    def scandir(path=".") -> object:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


@pytest.mark.parametrize("command", ["extract", "score"])
def test_an_unreadable_folder_is_one_line_and_the_others_are_read(
    tmp_path, monkeypatch, capsys, command
) -> None:
    pytest.importorskip("pyarrow")
    for sub, name in (("open", "claude_code.jsonl"), ("locked", "codex.jsonl")):
        (tmp_path / "in" / sub).mkdir(parents=True)
        (tmp_path / "in" / sub / name).write_bytes((A / name).read_bytes())
    locked = tmp_path / "in" / "locked"
    _lock_folder(monkeypatch, locked)
    denied = tmp_path / "in" / "open" / "copilot.jsonl"  # and a file that cannot be read
    denied.write_bytes((A / "copilot.jsonl").read_bytes())
    real = base.open_bytes

    def open_bytes(path):
        if Path(path) == denied:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(base, "open_bytes", open_bytes)
    report = ReadReport()
    units = list(read_paths([tmp_path / "in"], report))
    assert {u.extra["format"] for u in units} == {"claude_code"}
    assert report.problems == [
        f"{locked}: cannot read this folder (Permission denied), skipped",
        f"{denied}: cannot read (Permission denied), skipped",
    ]
    assert main([command, str(tmp_path / "in"), "-o", str(tmp_path / "out.parquet")]) == 0
    out = capsys.readouterr()
    assert f"{locked}: cannot read this folder" in out.out + out.err
    if command == "extract":  # score reads files in worker processes, which read this one
        assert f"{denied}: cannot read" in out.out + out.err


def _jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_tool_arguments_nested_100000_deep_keep_their_call(tmp_path) -> None:
    """Arguments are a JSON string inside a good record: too deep to parse, they are kept as
    sent, and the call stays beside its result (no record lost, no problem, no traceback)."""
    ts = "2025-01-01T00:00:00Z"
    codex = _jsonl(
        tmp_path / "rollout-2025-01-01T00-00-00-s1.jsonl",
        [
            {"timestamp": ts, "type": "session_meta", "payload": {"id": "s1", "cwd": "/w"}},
            {
                "timestamp": ts,
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "fix the bug"}],
                },
            },
            {
                "timestamp": ts,
                "type": "response_item",
                "payload": {
                    "type": "function_call",
                    "name": "shell",
                    "arguments": DEEP,
                    "call_id": "c1",
                },
            },
            {
                "timestamp": ts,
                "type": "response_item",
                "payload": {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": '{"output"' + DEEP,
                },
            },
        ],
    )
    metadata = {
        "function_name": "execute_bash",
        "tool_call_id": "c1",
        "model_response": {
            "choices": [
                {"message": {"tool_calls": [{"id": "c1", "function": {"arguments": DEEP}}]}}
            ]
        },
    }
    openhands = tmp_path / "events.json"
    openhands.write_text(
        json.dumps(
            [
                {"id": 0, "source": "user", "action": "message", "args": {"content": "fix it"}},
                {
                    "id": 1,
                    "source": "agent",
                    "action": "run",
                    "args": {"command": "ls"},
                    "tool_call_metadata": metadata,
                },
                {
                    "id": 2,
                    "source": "agent",
                    "observation": "run",
                    "content": "a.py",
                    "cause": 1,
                    "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "c1"},
                },
            ]
        )
    )
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": DEEP}}
    swe = tmp_path / "run.traj"
    swe.write_text(
        json.dumps(
            {
                "history": [
                    {"role": "user", "content": "fix it", "agent": "main"},
                    {"role": "assistant", "content": "looking", "tool_calls": [call]},
                    {"role": "tool", "content": "a.py", "tool_call_ids": ["c1"]},
                    {"role": "assistant", "content": "done", "tool_calls": DEEP},
                ]
            }
        )
    )
    for path in (codex, openhands, swe):
        units, report = read(path)
        assert report.problems == [], path
        calls = [u for u in units if u.kind == "tool_call"]
        results = [u for u in units if u.kind == "tool_result"]
        assert [u.text for u in calls] == [DEEP], path
        assert [u.call_id for u in results] == [calls[0].call_id], path


def test_a_queued_message_nested_100000_deep_is_read(tmp_path) -> None:
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    path = _jsonl(
        tmp_path / "session.jsonl",
        [
            {
                "type": "user",
                "uuid": "u1",
                "sessionId": "s",
                "message": {"role": "user", "content": "go"},
            },
            {"type": "queue-operation", "operation": "enqueue", "sessionId": "s", "content": deep},
        ],
    )
    units, report = read(path)
    assert report.problems == [] and [u.text for u in units] == ["go", deep]
