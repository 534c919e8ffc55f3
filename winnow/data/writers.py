"""Write units as winnow's normalized JSON Lines (docs/SCHEMA.md).

    from winnow.data.writers import write_jsonl
    write_jsonl(units, "units.jsonl")

The output reads back through `winnow.data.readers` (format `normalized`) with every schema
field and extra field unchanged, and writing what was read gives the same bytes again. The
fields of the request a conversation was read from (`extra["request"]`, shared by all its
units) are written once, on the first unit of the session that carries them; the reader gives
them back to the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from winnow.data.schema import Unit, as_unit


def dumps(unit: Unit | dict[str, Any], requests: RequestsOnce | None = None) -> str:
    """One unit as its JSON Lines record (no newline): schema fields first, then extras."""
    record = as_unit(unit).to_dict()
    if requests is not None:
        requests.thin(record)
    line = json.dumps(record, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (from broken sources) cannot be UTF-8; escaped, they still round-trip.
        line = json.dumps(record, ensure_ascii=True)
    return line


class RequestsOnce:
    """Drops `request` from a record when its session's request was already written."""

    def __init__(self) -> None:
        self.written: dict[str, Any] = {}

    def thin(self, record: dict[str, Any]) -> dict[str, Any]:
        request = record.get("request")
        if request is None:
            return record
        sid = record.get("session_id")
        previous = self.written.get(sid)  # type: ignore[arg-type]
        if previous is request or previous == request:
            del record["request"]
        else:
            self.written[sid] = request  # type: ignore[index]
        return record


def write_jsonl(units: Iterable[Unit | dict[str, Any]], out: str | Path | IO[str]) -> int:
    """Write units (or SCHEMA.md dicts) one a line to a path or text stream; return the count."""
    if hasattr(out, "write"):
        return _write(units, out)  # type: ignore[arg-type]
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        return _write(units, fh)


def _write(units: Iterable[Unit | dict[str, Any]], fh: IO[str]) -> int:
    n = 0
    requests = RequestsOnce()
    for unit in units:
        fh.write(dumps(unit, requests))
        fh.write("\n")
        n += 1
    return n


__all__ = ["RequestsOnce", "dumps", "write_jsonl"]
