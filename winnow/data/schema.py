"""The normalized message unit (docs/SCHEMA.md) and the importance taxonomy (docs/TAXONOMY.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

ROLES = ("system", "user", "assistant", "tool")
KINDS = ("text", "thinking", "tool_call", "tool_result")

# Priority order of TAXONOMY.md: when two categories fit, the earlier one wins.
CATEGORIES = (
    "requirement",
    "constraint",
    "decision",
    "architecture",
    "error",
    "code",
    "tool_output",
    "explanation",
    "status",
    "acknowledgment",
    "boilerplate",
)
CATEGORY_INDEX = {c: i for i, c in enumerate(CATEGORIES)}

# Default compression strategy per category (TAXONOMY.md).
DEFAULT_STRATEGIES = {
    "requirement": "verbatim",
    "constraint": "verbatim",
    "decision": "verbatim",
    "architecture": "verbatim",
    "error": "summarize",
    "code": "preserve_structure",
    "tool_output": "summarize",
    "explanation": "summarize",
    "status": "drop_or_minimal",
    "acknowledgment": "drop",
    "boilerplate": "drop",
}
MUST_KEEP = frozenset({"requirement", "constraint", "decision", "architecture"})
DROPPABLE = frozenset({"status", "acknowledgment", "boilerplate"})

SCHEMA_FIELDS = (
    "id",
    "session_id",
    "index",
    "role",
    "kind",
    "tool_name",
    "call_id",
    "text",
    "is_error",
    "timestamp",
)


@dataclass(slots=True)
class Unit:
    """One normalized message unit: a text block, a thinking block, one tool call or one tool result."""

    id: str
    session_id: str
    index: int
    role: str
    kind: str
    text: str
    tool_name: str | None = None
    call_id: str | None = None
    is_error: bool | None = None
    timestamp: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The SCHEMA.md record, extra fields (category, scores, source, ...) merged in."""
        d = {k: getattr(self, k) for k in SCHEMA_FIELDS}
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Unit:
        """Build a unit from a SCHEMA.md record; unknown fields land in `extra`."""
        known = {f.name for f in fields(cls)} - {"extra"}
        kw: dict[str, Any] = {k: d.get(k) for k in known if k in d}
        kw.setdefault("tool_name", None)
        extra = {k: v for k, v in d.items() if k not in known}
        return cls(extra=extra, **kw)


def as_unit(x: Unit | Mapping[str, Any]) -> Unit:
    """Accept a Unit or a SCHEMA.md dict."""
    return x if isinstance(x, Unit) else Unit.from_dict(x)


__all__ = [
    "CATEGORIES",
    "CATEGORY_INDEX",
    "DEFAULT_STRATEGIES",
    "DROPPABLE",
    "KINDS",
    "MUST_KEEP",
    "ROLES",
    "SCHEMA_FIELDS",
    "Unit",
    "as_unit",
]
