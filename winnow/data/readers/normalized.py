"""winnow's own normalized JSON Lines (shared/SCHEMA.md), as written by `winnow.data.writers`.

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
MAX_INDEX = 2**31 - 1  # no session is longer; larger numbers overflow float features


class NormalizedReader:
    """Reads normalized unit JSONL: one SCHEMA.md record a line."""

    name = "normalized"

    def sniff(self, head: str) -> bool:
        for obj in head_objects(head, limit=5):
            return all(k in obj for k in _REQUIRED) and ("id" in obj or "index" in obj)
        return bool(_FIRST_KEYS.match(head))

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        counts: dict[str, int] = {}
        for lineno, obj in iter_json_lines(path, report):
            try:
                sid = obj.get("session_id") if isinstance(obj, dict) else None
                unit = unit_from_record(obj, counts.get(sid, 0) if isinstance(sid, str) else 0)
            except BadRecord as e:
                report.problem(path, lineno, f"{e}, record skipped")
                continue
            counts[unit.session_id] = counts.get(unit.session_id, 0) + 1
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
    """The record's index; a whole number in a string or float is unambiguous and accepted."""
    if value is None:
        return position
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INDEX:
        return value
    if isinstance(value, float) and value.is_integer() and 0 <= value <= MAX_INDEX:
        return int(value)
    digits = value.strip() if isinstance(value, str) else ""
    if digits.isascii() and digits.isdigit() and len(digits) <= 10 and int(digits) <= MAX_INDEX:
        return int(digits)
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    raise BadRecord(
        f"wrong field type: `index` is {_type(value)} {shown}, "
        f"expected a whole number 0..{MAX_INDEX}"
    )


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
