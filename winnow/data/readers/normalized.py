"""winnow's own normalized JSON Lines (docs/SCHEMA.md), as written by `winnow.data.writers`.

Records are read as they are: ids, indexes and extra fields (category, scores, source, ...)
are kept exactly. A record with a field of the wrong type is reported and skipped, except an
index written as a whole number in a string or float, which is read as that number.
`unit_from_record` is the same check for one record (the HTTP service uses it too).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from winnow.data.readers.base import BadRecord, ReadReport, head_objects, iter_json_lines
from winnow.data.schema import KINDS, ROLES, Unit

_REQUIRED = ("session_id", "role", "kind", "text")
# When the first record is longer than the sniffed head, its leading keys still show.
_FIRST_KEYS = re.compile(r'^\s*\{\s*"id"\s*:\s*"[^"]*"\s*,\s*"session_id"\s*:')
_OPTIONAL_STR = ("tool_name", "call_id", "timestamp")
MAX_INDEX = 2**63 - 1  # the Parquet column is int64
_DIGITS = re.compile(
    r"[0-9]{1,19}"
)  # ASCII only: str.isdigit() also takes "²", which int() refuses
_PROVIDERS = ("anthropic_messages", "openai_chat")


class NormalizedReader:
    """Reads normalized unit JSONL: one SCHEMA.md record a line."""

    name = "normalized"

    def sniff(self, head: str) -> bool:
        for obj in head_objects(head, limit=5):
            return all(k in obj for k in _REQUIRED) and ("id" in obj or "index" in obj)
        return bool(_FIRST_KEYS.match(head))

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        counts: dict[str, int] = {}
        requests: dict[str, Any] = {}  # session -> the request fields written on its first unit
        ids: dict[str, tuple[int, int]] = {}  # id -> (line, hash of the record)
        for lineno, obj in iter_json_lines(path, report):
            try:
                sid = obj.get("session_id") if isinstance(obj, dict) else None
                unit = unit_from_record(obj, counts.get(sid, 0) if isinstance(sid, str) else 0)
            except BadRecord as e:
                report.problem(path, lineno, f"{e}, record skipped")
                continue
            first = ids.setdefault(unit.id, (lineno, _digest(unit)))
            if first[0] != lineno:
                if first[1] == _digest(unit):
                    report.skip("normalized: line repeated (same id and content)")
                    continue
                report.problem(
                    path,
                    lineno,
                    f"id {unit.id!r} repeats line {first[0]} with other content, read as well",
                )
            counts[unit.session_id] = counts.get(unit.session_id, 0) + 1
            if isinstance(unit.extra.get("request"), dict):
                requests[unit.session_id] = unit.extra["request"]
            elif unit.session_id in requests and unit.extra.get("format") in _PROVIDERS:
                unit.extra["request"] = requests[unit.session_id]
            yield unit


def unit_from_record(obj: Any, position: int = 0) -> Unit:
    """The Unit of one SCHEMA.md record; `BadRecord` (one line) when a field has the wrong
    type. `position` is the index a record without one gets (its place in its session)."""
    if not isinstance(obj, dict):
        raise BadRecord(f"record is {_type(obj)}, expected an object")
    missing = [k for k in _REQUIRED if k not in obj]
    if missing:
        raise BadRecord(f"missing field {', '.join(f'`{k}`' for k in missing)}")
    for key in ("session_id", "text"):
        if not isinstance(obj[key], str):
            raise BadRecord(f"wrong field type: `{key}` is {_type(obj[key])}, expected string")
    if obj["role"] not in ROLES:
        raise BadRecord(f"unknown role {obj['role']!r} (expected one of {', '.join(ROLES)})")
    if obj["kind"] not in KINDS:
        raise BadRecord(f"unknown kind {obj['kind']!r} (expected one of {', '.join(KINDS)})")
    for key in _OPTIONAL_STR:
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise BadRecord(
                f"wrong field type: `{key}` is {_type(obj[key])}, expected string or null"
            )
    if obj.get("is_error") is not None and not isinstance(obj["is_error"], bool):
        raise BadRecord(
            f"wrong field type: `is_error` is {_type(obj['is_error'])}, expected boolean or null"
        )
    scores = obj.get("scores")
    if scores is not None and not (
        isinstance(scores, dict) and all(_finite_number(v) for v in scores.values())
    ):
        raise BadRecord(
            f"wrong field type: `scores` is {_type(scores)}, expected an object of finite numbers"
        )
    index = _index(obj.get("index"), position)
    uid = obj.get("id", f"{obj['session_id']}:{index}")
    if not isinstance(uid, str):
        raise BadRecord(f"wrong field type: `id` is {_type(uid)}, expected string")
    return Unit.from_dict(dict(obj, id=uid, index=index))


def _index(value: Any, position: int) -> int:
    """The record's index; a whole number in a string or float is unambiguous and accepted.
    Out of range (1e400, a 64-bit overflow, a superscript digit) is a bad record."""
    if value is None:
        return position
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INDEX:
        return value
    if isinstance(value, float) and value.is_integer() and 0 <= value <= MAX_INDEX:
        return int(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        n = int(value.strip())
        if n <= MAX_INDEX:
            return n
    raise BadRecord(
        f"wrong field type: `index` is {_type(value)} {_short(value)}, expected a whole number "
        f"from 0 to {MAX_INDEX}"
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _digest(u: Unit) -> int:
    return hash((u.session_id, u.index, u.role, u.kind, u.text, u.tool_name, u.call_id))


def _finite_number(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past float's range
        return False


def _type(value: Any) -> str:
    names = {
        dict: "object",
        list: "array",
        str: "string",
        int: "number",
        float: "number",
        bool: "boolean",
    }
    return "null" if value is None else names.get(type(value), type(value).__name__)


READER = NormalizedReader()
