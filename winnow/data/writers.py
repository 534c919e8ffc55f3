"""Write units as winnow's normalized JSON Lines (docs/SCHEMA.md).

    from winnow.data.writers import write_jsonl
    write_jsonl(units, "units.jsonl")

The output reads back through `winnow.data.readers` (format `normalized`) with every schema
field and extra field unchanged, and writing what was read gives the same bytes again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from winnow.data.schema import Unit, as_unit


def dumps(unit: Unit | dict[str, Any]) -> str:
    """One unit as its JSON Lines record (no newline): schema fields first, then extras."""
    record = as_unit(unit).to_dict()
    line = json.dumps(record, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (from broken sources) cannot be UTF-8; escaped, they still round-trip.
        line = json.dumps(record, ensure_ascii=True)
    return line


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
    for unit in units:
        fh.write(dumps(unit))
        fh.write("\n")
        n += 1
    return n


__all__ = ["dumps", "write_jsonl"]
