"""Harness runtime: TTL-aware idle compaction, lazy truncation, economics, the context budget.

Names resolve lazily so that `import winnow.runtime` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "IdleCompactor": "winnow.runtime.idle",
    "IdleConfig": "winnow.runtime.idle",
    "VirtualClock": "winnow.runtime.idle",
    "SystemClock": "winnow.runtime.idle",
    "Session": "winnow.runtime.session",
    "Conversation": "winnow.runtime.llm",
    "LLMError": "winnow.runtime.llm",
    "complete": "winnow.runtime.llm",
    "AuditLog": "winnow.runtime.archive",
    "restore": "winnow.runtime.archive",
    "FileRegistry": "winnow.runtime.transcript",
    "CacheProfile": "winnow.runtime.economics",
    "PROFILES": "winnow.runtime.economics",
    "estimate": "winnow.runtime.economics",
    "ContextBudget": "winnow.runtime.budget",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'winnow.runtime' has no attribute {name!r}")
