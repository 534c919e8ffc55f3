"""Bad input never raises: one clear `file:line: ...` problem, and every good record around it kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from winnow.cli import main
from winnow.data.readers import ReadReport, read_file, read_paths

FIXTURES = Path(__file__).parent / "fixtures" / "readers_a"
JSONL = {"claude_code": "claude_code.jsonl", "codex": "codex.jsonl", "copilot": "copilot.jsonl"}


def units_of(path: Path) -> tuple[list[tuple], ReadReport]:
    report = ReadReport()
    units = [(u.role, u.kind, u.text, u.call_id) for u in read_file(path, report)]
    return units, report


def lines_of(name: str) -> list[str]:
    return (FIXTURES / name).read_text(encoding="utf-8").splitlines()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def one_problem(report: ReadReport, path: Path, line: int | None, *words: str) -> str:
    assert len(report.problems) == 1, report.problems
    problem = report.problems[0]
    where = f"{path}:{line}: " if line is not None else f"{path}"
    assert problem.startswith(where), problem
    assert "\n" not in problem and all(w in problem for w in words), problem
    return problem


def middle_message_line(lines: list[str]) -> int:
    """0-based index of a message record in the second half of the file."""
    kinds = {"user", "assistant", "response_item", "user.message", "assistant.message"}
    return next(k for k in range(len(lines) // 2, len(lines)) if _type(lines[k]) in kinds)


def _type(line: str):
    return json.JSONDecoder().raw_decode(line)[0].get("type")


@pytest.mark.parametrize("fmt", sorted(JSONL))
def test_invalid_json_line_in_the_middle(tmp_path, fmt):
    lines = lines_of(JSONL[fmt])
    k = len(lines) // 2
    bad = write(
        tmp_path / "bad.jsonl", [*lines[:k], '{"type": "user", "message": {oops', *lines[k:]]
    )
    units, report = units_of(bad)
    one_problem(report, bad, k + 1, "invalid JSON", "line skipped")
    assert units == units_of(FIXTURES / JSONL[fmt])[0]


@pytest.mark.parametrize("fmt", sorted(JSONL))
def test_truncated_last_line(tmp_path, fmt):
    lines = lines_of(JSONL[fmt])
    bad = tmp_path / "cut.jsonl"
    bad.write_text(
        "\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2], encoding="utf-8"
    )
    units, report = units_of(bad)
    one_problem(report, bad, len(lines), "truncated JSON")
    assert units == units_of(write(tmp_path / "good.jsonl", lines[:-1]))[0]


@pytest.mark.parametrize("fmt", sorted(JSONL))
def test_invalid_utf8_keeps_the_record(tmp_path, fmt):
    raw = (FIXTURES / JSONL[fmt]).read_bytes().split(b"\n")
    k = middle_message_line([x.decode() for x in raw])
    marker = raw[k].index(b'"type"')  # inside the record, outside any string value's escapes
    raw[k] = raw[k][:marker] + b'"junk":"\xff\xfe",' + raw[k][marker:]
    bad = tmp_path / "utf8.jsonl"
    bad.write_bytes(b"\n".join(raw))
    units, report = units_of(bad)
    one_problem(report, bad, k + 1, "invalid UTF-8")
    assert units == units_of(FIXTURES / JSONL[fmt])[0]


def _mutate(lines: list[str], k: int, change) -> list[str]:
    record = json.loads(lines[k])
    change(record)
    return [*lines[:k], json.dumps(record), *lines[k + 1 :]]


def _first(lines: list[str], test) -> int:
    return next(i for i, x in enumerate(lines) if test(json.loads(x)))


WRONG_TYPES = {
    "claude message is a string": (
        "claude_code",
        lambda r: r.get("type") == "user",
        lambda r: r.update(message="hello"),
        "`message` is string, expected object",
    ),
    "claude content is a number": (
        "claude_code",
        lambda r: r.get("type") == "assistant",
        lambda r: r["message"].update(content=42),
        "`message.content` is number",
    ),
    "claude block is a string": (
        "claude_code",
        lambda r: r.get("type") == "assistant",
        lambda r: r["message"].update(content=["oops"]),
        "`message.content[0]` is string",
    ),
    "claude tool_use without id": (
        "claude_code",
        lambda r: r.get("type") == "assistant" and r["message"]["content"][0]["type"] == "tool_use",
        lambda r: r["message"]["content"][0].pop("id"),
        "`message.content[0].id` is missing",
    ),
    "codex payload is a string": (
        "codex",
        lambda r: r.get("type") == "response_item",
        lambda r: r.update(payload="x"),
        "`payload` is string",
    ),
    "codex content is a number": (
        "codex",
        lambda r: r["payload"].get("type") == "message",
        lambda r: r["payload"].update(content=7),
        "`payload.content` is number",
    ),
    "copilot data is a list": (
        "copilot",
        lambda r: r.get("type") == "assistant.message",
        lambda r: r.update(data=[1]),
        "`data` is array",
    ),
    "copilot tool request is a string": (
        "copilot",
        lambda r: r.get("type") == "assistant.message" and r["data"]["toolRequests"],
        lambda r: r["data"].update(toolRequests=["bash"]),
        "`data.toolRequests[0]` is string",
    ),
    "copilot record is a list": (
        "copilot",
        lambda r: r.get("type") == "user.message",
        lambda r: None,
        "",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_wrong_field_types(tmp_path, case):
    fmt, where, change, words = WRONG_TYPES[case]
    lines = lines_of(JSONL[fmt])
    k = _first(lines, where)
    if case == "copilot record is a list":
        bad_lines = [*lines[:k], "[1, 2, 3]", *lines[k + 1 :]]
    else:
        bad_lines = _mutate(lines, k, change)
    bad = write(tmp_path / "bad.jsonl", bad_lines)
    units, report = units_of(bad)
    one_problem(report, bad, k + 1, "record skipped", words)
    # exactly the bad record is lost: the same as reading the file without that line
    assert units == units_of(write(tmp_path / "without.jsonl", [*lines[:k], *lines[k + 1 :]]))[0]


def test_gemini_bad_message_names_it_and_keeps_the_rest(tmp_path):
    doc = json.loads((FIXTURES / "gemini_session.jsonl").read_text())
    good = len(list(read_file(FIXTURES / "gemini_session.jsonl")))
    doc["messages"][1]["toolCalls"] = [{"args": {}}]  # a tool call with no name
    doc["messages"][2] = "hello"
    bad = tmp_path / "session.json"
    bad.write_text(json.dumps(doc, indent=2))
    report = ReadReport()
    units = list(read_file(bad, report))
    assert report.problems == [
        f"{bad}: messages[1]: wrong field type: `messages[1].toolCalls[0].name` is missing, expected string, "
        "record skipped",
        f"{bad}: messages[2]: wrong field type: `messages[2]` is string, expected object, record skipped",
    ]
    assert len(units) == good - 3  # message 1 (a thought, a text) and message 2 (a user line)


B = Path(__file__).parent / "fixtures" / "readers_b"


@pytest.mark.parametrize(
    "source",
    [
        FIXTURES / "gemini_session.jsonl",  # Gemini CLI: one JSON document, rewritten each turn
        B / "swe-agent__test-repo-i1.traj",  # SWE-agent
        B / "wrong_initial_state.json",  # OpenHands: a JSON list of events
        B / "openai_request.json",  # a request body saved as JSON
    ],
    ids=lambda p: p.name,
)
def test_a_cut_json_document_keeps_its_complete_records(tmp_path, source):
    """A whole-file JSON document cut short (a crash mid-write): one line naming the file and
    the line of the cut, and the records before the cut are read as the whole file reads them."""
    text = source.read_text()
    full = [(u.role, u.kind, u.text) for u in read_file(source)]
    bad = tmp_path / source.name
    for share in (0.5, 0.8):
        cut = text[: int(len(text) * share)]
        bad.write_text(cut)
        report = ReadReport()
        units = [(u.role, u.kind, u.text) for u in read_file(bad, report)]
        one_problem(report, bad, cut.count("\n") + 1, "truncated JSON", "read up to line")
        assert units and len(units) <= len(full)
        rest = iter(full)  # whole records, in order, as the whole file reads them
        assert all(u in rest for u in units)


def test_empty_and_unknown_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    unknown = tmp_path / "notes.txt"
    unknown.write_text("just some notes\n")
    for path, words in ((empty, "empty file"), (unknown, "unknown format")):
        report = ReadReport()
        assert list(read_file(path, report)) == []
        one_problem(report, path, None, words)


def test_good_files_beside_bad_ones_are_read(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    write(tmp_path / "b.jsonl", ['{"type": "user", oops', *lines_of("claude_code.jsonl")])
    report = ReadReport()
    units = list(
        read_paths(
            [tmp_path / "empty.jsonl", tmp_path / "b.jsonl", FIXTURES / "codex.jsonl"], report
        )
    )
    assert len(report.problems) == 2 and report.files == 2
    assert {u.extra["format"] for u in units} == {"claude_code", "codex"}


def test_cli_prints_problems_without_traceback(tmp_path, capsys):
    bad = write(
        tmp_path / "bad.jsonl",
        _mutate(lines_of("claude_code.jsonl"), 2, lambda r: r.update(message="x")),
    )
    (tmp_path / "empty.jsonl").write_text("")
    out = tmp_path / "m.parquet"
    assert main(["extract", str(bad), str(tmp_path / "empty.jsonl"), "-o", str(out)]) == 0
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert f"{bad}:3: wrong field type: `message` is string" in text
    assert f"{tmp_path / 'empty.jsonl'}: empty file" in text
    assert "Traceback" not in text and out.exists()
    assert (
        main(["extract", str(tmp_path / "empty.jsonl"), "-o", str(tmp_path / "none.parquet")]) == 1
    )
    assert not (tmp_path / "none.parquet").exists()


_MEASURE = """
import resource, sys
from winnow.data.readers import ReadReport, read_file
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report, n = ReadReport(), 0
for unit in read_file(sys.argv[1], report):
    n += 1
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(n, len(report.problems), (after - before) * 1024)
"""


@pytest.mark.slow
def test_big_file_reads_with_flat_memory(tmp_path):
    """~200 MB of valid Claude Code JSONL: peak RSS grows by a small fraction of the file size."""
    lines = [x for x in lines_of("claude_code.jsonl") if len(x) < 20_000]
    per_copy = len(list(read_file(write(tmp_path / "one.jsonl", lines))))
    uuids = [json.JSONDecoder().raw_decode(x)[0].get("uuid") for x in lines]
    big = tmp_path / "big.jsonl"
    size, copies = 0, 0
    with open(big, "w", encoding="utf-8") as fh:
        while size < 200 * 1024 * 1024:
            # fresh uuids per copy, so no line reads as a repeat of another
            chunk = (
                "\n".join(
                    x.replace(u, f"{u}-{copies}") if u else x
                    for x, u in zip(lines, uuids, strict=True)
                )
                + "\n"
            )
            fh.write(chunk)
            size += len(chunk)
            copies += 1
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(big)], capture_output=True, text=True, cwd=root
    )
    units, problems, growth = map(int, run.stdout.split())
    assert (units, problems) == (per_copy * copies, 0)
    assert growth < size / 8, (
        f"peak RSS grew {growth / 2**20:.0f} MiB reading {size / 2**20:.0f} MiB"
    )
