"""Reader plumbing shared by every transcript format: detection, streaming, error reporting.

A reader is a small object with a `name`, a `sniff(head)` that recognises its format from the
first bytes of a file (content, never the file name) and a `read(path, report)` that yields
`Unit`s in conversation order. Problems never raise: they are recorded in the `ReadReport` as
one line naming file and line, and the good records around them are still read.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, Protocol, overload

from winnow.data.schema import Unit

HEAD_BYTES = 64 * 1024
# Detection reads on to the end of the first complete lines, however long, up to this much.
HEAD_MAX_BYTES = 64 * 1024 * 1024
BOM = "\ufeff"
# Python's json parser recurses once per nesting level; deeper input is reported, never raised.
TOO_DEEP = "JSON nested too deeply to read"


class Document(PurePosixPath):
    """An in-memory file: a name (its stem names sessions, as a file's does) and its bytes.

    `winnow.data.parse` hands one to a reader, which reads it through `open_bytes`,
    `read_bytes`, `read_text`, `read_head`, `iter_json_lines` and `load_json` as it would a file.
    """

    data: bytes = b""

    @classmethod
    def of(cls, name: str, data: bytes) -> Document:
        doc = cls(name)
        doc.data = data
        return doc


def open_bytes(path: str | Path) -> IO[bytes]:
    """A binary stream of a file or an in-memory `Document`."""
    if isinstance(path, Document):
        return io.BytesIO(path.data)
    return open(path, "rb")


def read_bytes(path: str | Path) -> bytes:
    """A file's bytes, a leading UTF-8 byte order mark removed (it is no part of the text)."""
    with open_bytes(path) as fh:
        raw = fh.read()
    return raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw


def read_text(path: str | Path, report: ReadReport) -> str:
    """A file's text (UTF-8, no byte order mark); invalid bytes are replaced, and reported in
    one line naming the first."""
    raw = read_bytes(path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        report.problem(path, line, "invalid UTF-8, decoded with replacement")
        return raw.decode("utf-8", errors="replace")


@dataclass
class ReadReport:
    """What a read saw: files, sessions, units by role/kind, skipped records by reason, problems."""

    files: int = 0
    sessions: set[str] = field(default_factory=set)
    units_by_kind: Counter = field(default_factory=Counter)
    units_by_role: Counter = field(default_factory=Counter)
    formats: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    max_problems: int = 1000
    skipped_files: dict[str, list[str]] = field(default_factory=dict)  # reason -> paths

    def skip(self, reason: str, n: int = 1) -> None:
        """Count a record that is not a message (progress, snapshot, hook, ...)."""
        self.skipped[reason] += n

    def skip_file(self, path: str | Path, reason: str) -> None:
        """Count a whole file left unread (not a transcript), keeping its name for the summary."""
        self.skipped[reason] += 1
        self.skipped_files.setdefault(reason, []).append(str(path))

    def unreadable_folder(self, e: OSError) -> None:
        """A folder a walk could not list (for `iter_files`'s `on_error`)."""
        self.problem(e.filename, None, f"cannot read this folder ({e.strerror or e}), skipped")

    def problem(self, path: str | Path, line: int | None, message: str) -> None:
        """Record bad input as one line `file:line: message`."""
        where = f"{path}:{line}" if line is not None else str(path)
        self.skipped[f"bad input: {re.split(r'[:(,]', message)[0].strip()}"] += 1
        if len(self.problems) < self.max_problems:
            self.problems.append(f"{where}: {message}")

    def count(self, unit: Unit) -> None:
        self.sessions.add(unit.session_id)
        self.units_by_kind[unit.kind] += 1
        self.units_by_role[unit.role] += 1

    @property
    def units(self) -> int:
        return sum(self.units_by_kind.values())


class Reader(Protocol):
    name: str

    def sniff(self, head: str) -> bool:
        """True when the first bytes of a file (decoded, may be cut mid-record) are this format."""
        ...

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        """Yield the file's units in conversation order."""
        ...


class SessionBuilder:
    """Numbers units of one session and gives them stable ids `<session_id>:<index>`."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        self.index = 0

    def unit(self, role: str, kind: str, text: str, **kw: Any) -> Unit:
        u = Unit(
            id=f"{self.session_id}:{self.index}",
            session_id=self.session_id,
            index=self.index,
            role=role,
            kind=kind,
            text=text if isinstance(text, str) else to_text(text),
            **kw,
        )
        self.index += 1
        return u


@overload
def string(value: Any, default: str) -> str: ...
@overload
def string(value: Any, default: None = None) -> str | None: ...
def string(value: Any, default: str | None = None) -> str | None:
    """`value` when it is a non-empty string (an id, a tool name), else `default`."""
    return value if isinstance(value, str) and value else default


def to_text(value: Any) -> str:
    """Render a non-string payload (tool input, structured result) as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_value(text: str | bytes) -> Any:
    """`json.loads`, with JSON nested deeper than Python's parser recurses raised as the
    ValueError any other unparseable text gets (for values inside a good record, such as tool
    arguments: the caller keeps the text as it is)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None


def iter_json_lines(path: Path, report: ReadReport) -> Iterator[tuple[int, Any]]:
    """Stream `(line_number, object)` from a JSON Lines file with flat memory.

    Invalid UTF-8 is decoded with replacement (and reported); a line that does not parse is
    reported and skipped; a line holding several JSON objects glued together yields each.
    """
    decoder = json.JSONDecoder()
    with open_bytes(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                report.problem(
                    path, lineno, f"invalid UTF-8 at byte {e.start}, decoded with replacement"
                )
                line = raw.decode("utf-8", errors="replace")
            line = line.strip().lstrip(BOM) if lineno == 1 else line.strip()
            if not line:
                continue
            pos = 0
            while pos < len(line):
                try:
                    obj, end = decoder.raw_decode(line, pos)
                except json.JSONDecodeError as e:
                    # a last line without its newline was cut mid-write
                    cut = e.pos >= len(line) - 1 or not raw.endswith(b"\n")
                    what = "truncated JSON" if cut else "invalid JSON"
                    report.problem(path, lineno, f"{what} ({_what(e)}), line skipped")
                    break
                except RecursionError:
                    report.problem(path, lineno, f"{TOO_DEEP}, line skipped")
                    break
                yield lineno, obj
                pos = end
                while pos < len(line) and line[pos] in " \t\r":
                    pos += 1


class BadRecord(ValueError):
    """A record whose fields have the wrong shape; the reader reports it and moves on."""


def expect(obj: Any, key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    """`obj[key]` when it has the expected type, else raise `BadRecord` with a readable reason."""
    if not isinstance(obj, dict):
        raise BadRecord(
            f"wrong field type: `{where or 'record'}` is {_json_type(obj)}, expected object"
        )
    value = obj.get(key)
    if not isinstance(value, kind):
        want = " or ".join(
            _JSON_TYPES.get(k, k.__name__) for k in (kind if isinstance(kind, tuple) else (kind,))
        )
        got = "missing" if key not in obj else _json_type(value)
        raise BadRecord(
            f"wrong field type: `{where + '.' if where else ''}{key}` is {got}, expected {want}"
        )
    return value


_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


@contextmanager
def record_guard(report: ReadReport, path: str | Path, line: int | None) -> Iterator[None]:
    """Turn a malformed record into one reported line instead of an exception.

    Build a record's units inside the guard and yield them outside it, so a record is either
    read whole or skipped whole.
    """
    try:
        yield
    except BadRecord as e:
        report.problem(path, line, f"{e}, record skipped")
    except RecursionError:
        report.problem(path, line, f"{TOO_DEEP}, record skipped")
    except (TypeError, AttributeError, KeyError, ValueError, IndexError, OverflowError) as e:
        report.problem(
            path, line, f"unexpected record shape ({type(e).__name__}: {e}), record skipped"
        )


def guarded(
    report: ReadReport, path: str | Path, line: int | None, session: SessionBuilder, units: Iterable
) -> list[Unit]:
    """One record's units, built whole; a malformed record is reported and numbers none."""
    start = session.index
    with record_guard(report, path, line):
        return list(units)
    session.index = start
    return []


def head_objects(head: str, limit: int = 50) -> Iterator[dict]:
    """The JSON objects on the complete lines of a file's head (for sniffing JSON Lines)."""
    decoder = json.JSONDecoder()
    # A line cut by the end of the head cannot parse as a whole object, so it is just skipped.
    for line in head.splitlines()[:limit]:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj, _ = decoder.raw_decode(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            yield obj


def load_json(path: Path, report: ReadReport) -> Any | None:
    """Load a whole-file JSON document, reporting (not raising) when it is broken."""
    text = read_text(path, report)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        whole = _complete_records(text)  # None unless the document was cut while a list was open
        if whole is not None:  # cut short (a crash mid-write): keep what is whole
            line = whole[0].count("\n") + 1
            report.problem(
                path,
                e.lineno,
                f"truncated JSON ({_what(e)}), read up to line {line}: the records complete "
                "before the cut",
            )
            return whole[1]
        report.problem(path, e.lineno, f"invalid JSON ({_what(e)}), file skipped")
    except RecursionError:
        report.problem(path, 1, f"{TOO_DEEP}, file skipped")
    return None


def _what(e: json.JSONDecodeError) -> str:
    # "Unterminated string starting at" + " at column 9" read "at at"
    return f"{e.msg.removesuffix(' at')} at column {e.colno}"


_SYNTAX = re.compile(r'[\\"{}\[\]]')


def _complete_records(text: str) -> tuple[str, Any] | None:
    """A cut JSON document's records that are whole: (the text kept, its value), cut after the
    last complete element of the outermost array still open (a session's messages, a
    trajectory's steps) and closed; None when that does not parse. One pass over the text."""
    stack: list[tuple[str, int]] = []  # (closing bracket, where it opened)
    last_close: dict[int, int] = {}  # depth after a close -> the position after it
    in_string, skip = False, -1
    for m in _SYNTAX.finditer(text):
        i, c = m.start(), m.group()
        if i < skip:
            continue
        if in_string:
            if c == "\\":
                skip = i + 2  # the escaped character, a quote maybe
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            stack.append(("}" if c == "{" else "]", i))
        elif stack:
            stack.pop()
            last_close[len(stack)] = i + 1
    depth = next((d for d, (close, _) in enumerate(stack) if close == "]"), None)
    if depth is None:
        return None
    opened = stack[depth][1]
    end = last_close.get(depth + 1, 0)
    end = end if end > opened else opened + 1  # no element complete: an empty list
    kept = text[:end] + "".join(close for close, _ in reversed(stack[: depth + 1]))
    try:
        return text[:end], json.loads(kept)
    except (json.JSONDecodeError, RecursionError):
        return None


def read_head(path: Path, lines: int = 2) -> str:
    """The start of a file for format detection: 64 KB, and on to the end of its first `lines`
    complete lines however long they are (up to 64 MB), so that a long first record can be
    parsed whole. A leading byte order mark is dropped."""
    with open_bytes(path) as fh:
        head = fh.read(HEAD_BYTES)
        while head.count(b"\n") < lines and len(head) < HEAD_MAX_BYTES:
            more = fh.read(max(HEAD_BYTES, len(head)))  # doubling: linear in the bytes read
            if not more:
                break
            head += more
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    return head.decode("utf-8", errors="replace")


# Aider keeps its transcript in a dot-file; other dot-files (.DS_Store, ...) are not transcripts.
HIDDEN_TRANSCRIPTS = frozenset({".aider.chat.history.md"})


def iter_files(
    paths: Iterable[str | Path], on_error: Callable[[OSError], None] | None = None
) -> Iterator[Path]:
    """Files under the given files and folders, recursively, in a stable order. A folder that
    cannot be listed goes to `on_error` (pathlib's rglob would pass over it without a word)."""
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = []
            for top, _dirs, names in os.walk(p, onerror=on_error):
                for name in names:
                    q = Path(top) / name
                    if (not name.startswith(".") or name in HIDDEN_TRANSCRIPTS) and q.is_file():
                        found.append(q)
            yield from sorted(found)
        else:
            yield p
