"""Transcript readers: every supported format in, normalized `Unit`s out.

from winnow.data.readers import read_paths, ReadReport
report = ReadReport()
for unit in read_paths(["~/.claude/projects"], report):
    ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

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
from winnow.data.readers.base import Reader, ReadReport, iter_files, read_head
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
    """The format of a file, recognised from its content; None when no reader claims it."""
    head = read_head(Path(path))
    if not head.strip():
        return None
    for reader in READERS:
        if reader.sniff(head):
            return reader.name
    return None


def read_file(
    path: str | Path, report: ReadReport | None = None, format: str | None = None
) -> Iterator[Unit]:
    """Yield the units of one transcript file; problems go to `report`, never raise."""
    path = Path(path)
    report = report if report is not None else ReadReport()
    if not path.exists():
        report.problem(path, None, "no such file, skipped")
        return
    if path.stat().st_size == 0:
        report.problem(path, None, "empty file, skipped")
        return
    name = format or detect_format(path)
    if name is None:
        report.problem(path, None, "unknown format (not a transcript this version reads), skipped")
        return
    if name not in FORMATS:
        report.problem(path, None, f"unknown format name {name!r}, skipped")
        return
    report.files += 1
    report.formats[name] += 1
    for unit in FORMATS[name].read(path, report):
        unit.extra.setdefault("source", str(path))
        unit.extra.setdefault("format", name)
        report.count(unit)
        yield unit


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
            for f in iter_files([p]):
                if on_file:
                    on_file(f)
                if f.stat().st_size and detect_format(f) is None:
                    report.skip_file(f, f"not a transcript ({f.suffix or f.name})")
                    continue
                yield from read_file(f, report)
        else:
            if on_file:
                on_file(p)
            yield from read_file(p, report)


__all__ = ["FORMATS", "READERS", "ReadReport", "detect_format", "read_file", "read_paths"]
