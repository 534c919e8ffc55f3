"""Transcript readers: every supported format in, normalized `Unit`s out.

from winnow.data.readers import parse, read_paths, ReadReport
report = ReadReport()
for unit in read_paths(["~/.claude/projects"], report):     # files and folders
    ...
units = list(parse({"model": ..., "messages": [...]}))       # a request body held in memory
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast

from winnow.data.readers import (
    aider,
    anthropic_messages,
    claude_code,
    codex,
    copilot,
    gemini,
    normalized,
    openai_chat,
    openhands,
    specstory,
    swe_agent,
)
from winnow.data.readers.base import (
    Document,
    Reader,
    ReadReport,
    SessionBuilder,
    iter_files,
    read_head,
)
from winnow.data.schema import Unit

# Sniffing order: the most specific formats first.
READERS: list[Reader] = [
    r.READER
    for r in (
        normalized,
        claude_code,
        codex,
        copilot,
        gemini,
        swe_agent,
        openhands,
        specstory,
        aider,
        anthropic_messages,
        openai_chat,
    )
    if getattr(r, "READER", None) is not None
]
FORMATS = {r.name: r for r in READERS}


def detect_format(path: str | Path) -> str | None:
    """The format of a file, recognised from its content (its first complete records,
    however long); None when no reader claims it."""
    return _sniff(read_head(path if isinstance(path, Document) else Path(path)))


def _sniff(head: str) -> str | None:
    if not head.strip():
        return None
    for reader in READERS:
        if reader.sniff(head):
            return reader.name
    return None


PROVIDERS = (anthropic_messages.NAME, openai_chat.NAME)


def parse(
    document: Any,
    format: str | None = None,
    report: ReadReport | None = None,
    *,
    session_id: str = "request",
) -> Iterator[Unit]:
    """Yield the units of a document held in memory; problems go to `report`, never raise.

    `document` is an OpenAI chat or Anthropic Messages request body (a dict, or a batch line
    holding one), a list of such bodies, a list of messages, the records of any other format
    (a list of dicts, or one dict for the whole-document formats) or a file's text (str or
    bytes). `format` names a reader (`winnow.data.readers.FORMATS`); None recognises it from
    the content, as for files. Provider bodies are read as they are, never copied: each unit
    keeps its block (`extra["raw"]`) and the request's other fields (`extra["request"]`), so
    `winnow.serving.render` writes an unchanged unit back as the same block. Sessions without
    a name of their own are called `session_id`.
    """
    report = report if report is not None else ReadReport()
    if format is not None and format not in FORMATS:
        report.problem(session_id, None, f"unknown format name {format!r}, skipped")
        return
    name = format or _provider_of(document)
    if name in PROVIDERS and isinstance(document, (dict, list)):
        units = _parse_provider(document, name, report, session_id)
    else:
        data = _as_bytes(document)
        # a Document reads like the files the readers take
        doc = cast(Path, Document.of(session_id, data))
        name = name or _sniff(read_head(doc))
        if name is None:
            report.problem(session_id, None, "unknown format (not a transcript this version reads)")
            return
        units = FORMATS[name].read(doc, report)
    report.formats[name] += 1
    try:
        for unit in units:
            unit.extra.setdefault("format", name)
            report.count(unit)
            yield unit
    except OSError as e:  # a reader that wanted a file beside the document
        report.problem(session_id, None, f"cannot read ({e.strerror or e}), rest skipped")


def _provider_of(document: Any) -> str | None:
    """Which provider's request a dict or list is, when it is one."""
    records = document if isinstance(document, list) else [document]
    if not records or not all(isinstance(r, dict) for r in records):
        return None
    if all("role" in r for r in records):  # a bare list of messages
        wrapped = {"messages": records}
        return (
            anthropic_messages.NAME
            if anthropic_messages.is_anthropic(wrapped)
            else openai_chat.NAME
        )
    requests = [openai_chat.request_of(r) for r in records]
    if all(
        r is not None and any(isinstance(m, dict) and "role" in m for m in r["messages"])
        for r in requests
    ):
        if any(anthropic_messages.is_anthropic(r) for r in records):
            return anthropic_messages.NAME
        return openai_chat.NAME
    return None


def _parse_provider(
    document: dict | list, name: str, report: ReadReport, session_id: str
) -> Iterator[Unit]:
    module = anthropic_messages if name == anthropic_messages.NAME else openai_chat
    records = document if isinstance(document, list) else [document]
    if isinstance(document, list) and not all(
        isinstance(r, dict) and openai_chat.request_of(r) is not None for r in records
    ):  # a list of messages (a bad one among them is reported by the reader)
        yield from module.parse_request(
            {}, SessionBuilder(session_id), report, session_id, None, records
        )
        return
    for n, record in enumerate(records):
        request = openai_chat.request_of(record) if isinstance(record, dict) else None
        where = session_id if len(records) == 1 else f"{session_id}[{n}]"
        if request is None:
            report.problem(where, None, "not a request with `messages`, skipped")
            continue
        default = session_id if len(records) == 1 else f"{session_id}-{n}"
        sid = openai_chat.session_name(record, default)
        yield from module.parse_request(request, SessionBuilder(sid), report, where)


def _as_bytes(document: Any) -> bytes:
    if isinstance(document, bytes):
        return document
    if isinstance(document, str):
        return document.encode("utf-8", "surrogatepass")
    if isinstance(document, list) and all(isinstance(r, dict) for r in document):
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in document).encode()
    return json.dumps(document, ensure_ascii=False).encode()


def read_file(
    path: str | Path, report: ReadReport | None = None, format: str | None = None
) -> Iterator[Unit]:
    """Yield the units of one transcript file; problems go to `report`, never raise."""
    path = Path(path)
    report = report if report is not None else ReadReport()
    try:
        if not path.exists():
            report.problem(path, None, "no such file, skipped")
            return
        if path.stat().st_size == 0:
            report.problem(path, None, "empty file, skipped")
            return
        name = format or detect_format(path)
    except OSError as e:  # permission denied, a broken mount: this file only
        report.problem(path, None, f"cannot read ({e.strerror or e}), skipped")
        return
    if name is None:
        report.problem(path, None, "unknown format (not a transcript this version reads), skipped")
        return
    if name not in FORMATS:
        report.problem(path, None, f"unknown format name {name!r}, skipped")
        return
    report.files += 1
    report.formats[name] += 1
    try:
        for unit in FORMATS[name].read(path, report):
            unit.extra.setdefault("source", str(path))
            unit.extra.setdefault("format", name)
            report.count(unit)
            yield unit
    except OSError as e:
        report.problem(path, None, f"cannot read ({e.strerror or e}), rest of the file skipped")


def claimed(path: Path, report: ReadReport) -> bool:
    """Whether to read a file met while walking a folder: a reader claims it (or it cannot be
    read, which `read_file` reports); else it is counted as skipped, not a transcript."""
    try:
        unknown = path.stat().st_size and detect_format(path) is None
    except OSError:
        return True
    if unknown:
        report.skip_file(path, f"not a transcript ({path.suffix or path.name})")
    return not unknown


def read_paths(
    paths: Iterable[str | Path],
    report: ReadReport | None = None,
    on_file: Callable[[Path], None] | None = None,
) -> Iterator[Unit]:
    """Yield the units of every transcript under the given files and folders.

    Files named explicitly must be transcripts (else a problem is reported); files met while
    walking a folder that no reader claims (licenses, metadata) are counted as skipped.
    `on_file` is called with each file as it is reached (for progress bars).
    """
    report = report if report is not None else ReadReport()
    for p in paths:
        p = Path(p).expanduser()
        if p.is_dir():
            for f in iter_files([p], report.unreadable_folder):
                if on_file:
                    on_file(f)
                if claimed(f, report):
                    yield from read_file(f, report)
        else:
            if on_file:
                on_file(p)
            yield from read_file(p, report)


__all__ = [
    "FORMATS",
    "READERS",
    "Document",
    "ReadReport",
    "claimed",
    "detect_format",
    "parse",
    "read_file",
    "read_paths",
]
