"""Aider chat history (`.aider.chat.history.md`).

One file holds many sessions, each opened by `# aider chat started at <time>`. Lines starting
`#### ` are the user, lines starting `> ` are aider's own output, everything else is the
assistant. SEARCH/REPLACE blocks in the assistant's text are edits: each becomes an `edit` tool
call, answered by aider's `Applied edit to <path>` (or `Skipping edits to <path>`, or the
"SEARCH/REPLACE block failed to match" report, as an error). Aider's other output (banners,
token counts, commits, command output) is system text: no tool call asked for it, so making it
a tool result would leave a result without its call.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from winnow.data.readers.base import ReadReport, SessionBuilder, read_text, to_text
from winnow.data.schema import Unit

_HEADER = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_APPLIED = re.compile(r"^(Applied edit to|Skipping edits to) (.+)$")
_FAILED = re.compile(r"^# \d+ SEARCH/REPLACE blocks? failed to match!")
# The failure report is printed with `> ` on its first line only; these lines close it.
_FAILED_END = "The SEARCH section must exactly match"
_OTHERS_OK = "# The other "
_OTHERS_END = "Just reply with fixed versions"


@dataclass
class _Edit:
    path: str
    search: str
    replace: str
    call_id: str = ""


@dataclass
class _Session:
    id: str
    timestamp: str | None
    lines: list[tuple[str, str]] = field(default_factory=list)  # (kind, text)


class AiderReader:
    """Reads Aider `.aider.chat.history.md` files: one session per `# aider chat started at`."""

    name = "aider"

    def sniff(self, head: str) -> bool:
        return any(_HEADER.match(line) for line in head.splitlines()[:200])

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        text = read_text(path, report)  # a file or an in-memory document
        for session in _sessions(text.splitlines()):
            yield from _units(session)


def _sessions(lines: list[str]) -> Iterator[_Session]:
    seen: dict[str, int] = {}
    current = _Session("aider:untimed", None)
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _HEADER.match(line)
        if m:
            if current.lines:
                yield current
            ts = f"{m.group(1)}T{m.group(2)}"
            sid = f"aider:{ts}"
            seen[sid] = seen.get(sid, 0) + 1
            current = _Session(sid if seen[sid] == 1 else f"{sid}#{seen[sid]}", ts)
        elif line.startswith("####"):
            current.lines.append(("user", line[5:].rstrip() if line.startswith("#### ") else ""))
        elif line.startswith("> ") or line.rstrip() == ">":  # not `>>>>>>> REPLACE`
            body = line[2:].rstrip()
            current.lines.append(("output", body))
            if _FAILED.match(body):
                i = _continuation(lines, i + 1, current)
                continue
        elif not line.strip():
            current.lines.append(("blank", ""))
        else:
            current.lines.append(("assistant", line))
        i += 1
    if current.lines:
        yield current


def _continuation(lines: list[str], i: int, session: _Session) -> int:
    """Join the unprefixed rest of a "failed to match" report to its first line; return the next line."""
    end = None
    for j in range(i, len(lines)):
        if lines[j].startswith(("####", "> ")) or _HEADER.match(lines[j]):
            break
        if lines[j].startswith(_FAILED_END):
            end = k = j
            while k + 1 < len(lines) and not lines[k + 1].strip():
                k += 1
            if k + 1 < len(lines) and lines[k + 1].startswith(_OTHERS_OK):
                while k < len(lines) - 1 and not lines[k].startswith(_OTHERS_END):
                    k += 1
                end = k
            break
    if end is None:
        return i
    kind, first = session.lines[-1]
    session.lines[-1] = (kind, "\n".join([first, *(line.rstrip() for line in lines[i : end + 1])]))
    return end + 1


def _blocks(lines: list[tuple[str, str]]) -> Iterator[tuple[str, list[str]]]:
    """Runs of one kind. Blank lines stay inside assistant text, are dropped inside aider's
    output (one stretch of output is one unit) and end a user message."""
    kind, run = None, []
    for k, text in lines:
        if k == "blank":
            if kind == "assistant":
                run.append(text)
            elif kind == "user":
                yield "user", run
                kind, run = None, []
        elif k == kind:
            run.append(text)
        else:
            if kind is not None:
                yield kind, run
            kind, run = k, [text]
    if kind is not None:
        yield kind, run


def _units(session: _Session) -> Iterator[Unit]:
    s = SessionBuilder(session.id)
    ts = session.timestamp
    open_edits: list[_Edit] = []  # edits of the last assistant message not yet answered
    for kind, run in _blocks(session.lines):
        text = "\n".join(run).strip("\n")
        if not text.strip():
            continue
        if kind == "user":
            open_edits = []
            yield s.unit("user", "text", text, timestamp=ts)
        elif kind == "assistant":
            open_edits = []
            for part in _split_edits(run):
                if isinstance(part, str):
                    yield s.unit("assistant", "text", part, timestamp=ts)
                    continue
                part.call_id = f"{s.session_id}:call:{s.index}"
                open_edits.append(part)
                call = {"path": part.path, "search": part.search, "replace": part.replace}
                yield s.unit(
                    "assistant",
                    "tool_call",
                    to_text(call),
                    tool_name="edit",
                    call_id=part.call_id,
                    timestamp=ts,
                )
        else:
            rest, results = _answer_edits(run, open_edits)
            for edit, result, error in results:
                yield s.unit(
                    "tool",
                    "tool_result",
                    result,
                    tool_name="edit",
                    call_id=edit.call_id,
                    is_error=error,
                    timestamp=ts,
                )
            rest_text = "\n".join(rest).strip("\n")
            if rest_text.strip():
                yield s.unit("system", "text", rest_text, timestamp=ts)


def _split_edits(run: list[str]) -> Iterator[str | _Edit]:
    """Assistant text with its SEARCH/REPLACE blocks cut out as edits, in order."""
    start, i, prev_path = 0, 0, ""
    while i < len(run):
        if run[i].strip() != "<<<<<<< SEARCH":
            i += 1
            continue
        mid = next((j for j in range(i + 1, len(run)) if run[j].strip() == "======="), None)
        end = None
        if mid is not None:
            end = next(
                (
                    j
                    for j in range(mid + 1, len(run))
                    if run[j].strip().startswith(">>>>>>> REPLACE")
                ),
                None,
            )
        if mid is None or end is None:
            break  # an unfinished block stays text
        # The path is the last plain line before SEARCH, possibly with a fence between.
        first, p = i, i - 1
        while p >= start and _FENCE.match(run[p]):
            first, p = p, p - 1
        path = prev_path
        if p >= start and run[p].strip():
            path, first = run[p].strip().strip("`*"), p
            if p - 1 >= start and _FENCE.match(run[p - 1]):
                first = p - 1
        last = end + 1 if end + 1 < len(run) and _FENCE.match(run[end + 1]) else end
        text = "\n".join(run[start:first]).strip("\n")
        if text.strip():
            yield text
        yield _Edit(path, "\n".join(run[i + 1 : mid]), "\n".join(run[mid + 1 : end]))
        prev_path, start, i = path, last + 1, last + 1
    text = "\n".join(run[start:]).strip("\n")
    if text.strip():
        yield text


def _norm(path: str) -> str:
    return path.strip().replace("\\", "/").removeprefix("./")


def _answer_edits(
    run: list[str], edits: list[_Edit]
) -> tuple[list[str], list[tuple[_Edit, str, bool]]]:
    """Pick out the lines of aider's output that answer the open edits."""
    rest, results = [], []
    i = 0
    while i < len(run):
        line = run[i]
        m = _APPLIED.match(line)
        if m and edits:
            edit = next((e for e in edits if _norm(e.path) == _norm(m.group(2))), None)
            if edit is not None:
                # "Applied edit to x" answers every open edit of x.
                for e in [e for e in edits if _norm(e.path) == _norm(edit.path)]:
                    edits.remove(e)
                    results.append((e, line, m.group(1) == "Skipping edits to"))
                i += 1
                continue
        if _FAILED.match(line) and edits:
            edit = next(
                (e for e in edits if e.search.strip() and e.search.strip() in line), edits[0]
            )
            edits.remove(edit)
            results.append((edit, line, True))
            others = next((x for x in line.splitlines() if x.startswith(_OTHERS_OK)), None)
            if others:  # "# The other 2 SEARCH/REPLACE blocks were applied successfully."
                results.extend((e, others, False) for e in edits)
                edits.clear()
            i += 1
            continue
        rest.append(line)
        i += 1
    return rest, results


READER = AiderReader()
