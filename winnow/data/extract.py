"""Transcripts in, one Parquet table of normalized units out (`winnow extract`).

    from winnow.data.extract import extract, load_units
    report = extract(["~/.claude/projects"], "messages.parquet")
    for unit in load_units("messages.parquet"):
        ...

Units are written in row groups as they are read, so memory stays flat however large the
input. Columns: the SCHEMA.md fields, `source` (file), `format`, and `extra` (any other fields
a reader set, as a JSON object string, null when none).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from winnow.data.readers import ReadReport, read_paths
from winnow.data.schema import SCHEMA_FIELDS, Unit
from winnow.data.writers import RequestsOnce

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("session_id", pa.string()),
        ("index", pa.int64()),
        ("role", pa.string()),
        ("kind", pa.string()),
        ("tool_name", pa.string()),
        ("call_id", pa.string()),
        ("text", pa.large_string()),
        ("is_error", pa.bool_()),
        ("timestamp", pa.string()),
        ("source", pa.string()),
        ("format", pa.string()),
        ("extra", pa.string()),
    ]
)
_COLUMNS = SCHEMA.names
_TOP = set(SCHEMA_FIELDS) | {"source", "format"}


@dataclass
class ExtractConfig:
    """How `extract` batches its writes: a row group closes at whichever limit comes first."""

    row_group_rows: int = 8192
    row_group_bytes: int = 64 * 1024 * 1024
    compression: str = "zstd"


def _row(unit: Unit, requests: RequestsOnce | None = None) -> dict:
    d = unit.to_dict()
    if requests is not None:  # a request's fields once a session, not on every row
        requests.thin(d)
    extra = {k: v for k, v in d.items() if k not in _TOP}
    row = {k: d.get(k) for k in _COLUMNS[:-1]}
    row["extra"] = json.dumps(extra, ensure_ascii=False, default=str) if extra else None
    return row


def extract(
    paths: Iterable[str | Path],
    output: str | Path,
    report: ReadReport | None = None,
    config: ExtractConfig | None = None,
    on_file: Callable[[Path], None] | None = None,
) -> ReadReport:
    """Read every transcript under `paths` and write its units to the Parquet file `output`.

    The file appears only when something was read (it is written beside and renamed at the
    end). Returns the read report: files, sessions, units, skipped records and problems.
    """
    report = report if report is not None else ReadReport()
    config = config or ExtractConfig()
    output = Path(output)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    rows: list[dict] = []
    size = 0
    requests = RequestsOnce()
    try:
        with pq.ParquetWriter(tmp, SCHEMA, compression=config.compression) as writer:
            for unit in read_paths(paths, report, on_file=on_file):
                rows.append(_row(unit, requests))
                size += len(unit.text)
                if len(rows) >= config.row_group_rows or size >= config.row_group_bytes:
                    writer.write_table(pa.Table.from_pylist(rows, schema=SCHEMA))
                    rows, size = [], 0
            if rows:
                writer.write_table(pa.Table.from_pylist(rows, schema=SCHEMA))
        if report.files:
            tmp.replace(output)
    finally:
        tmp.unlink(missing_ok=True)
    return report


def load_units(path: str | Path, batch_rows: int = 8192) -> Iterator[Unit]:
    """Stream the units of a Parquet file written by `extract`, `source`/`format`/extras restored."""
    pf = pq.ParquetFile(path)
    requests: dict[str, dict] = {}
    for batch in pf.iter_batches(batch_size=batch_rows):
        for row in batch.to_pylist():
            extra = row.pop("extra", None)
            if extra:
                row.update(json.loads(extra))
            if isinstance(row.get("request"), dict):
                requests[row["session_id"]] = row["request"]
            elif row.get("format") in ("anthropic_messages", "openai_chat"):
                if row["session_id"] in requests:
                    row["request"] = requests[row["session_id"]]
            yield Unit.from_dict(row)


__all__ = ["SCHEMA", "ExtractConfig", "extract", "load_units"]
