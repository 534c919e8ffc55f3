"""Harness runtime: TTL-aware idle compaction, lazy truncation, economics, the context budget.

Names resolve lazily so that `import winnow.runtime` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ imports on first use
    from winnow.runtime.archive import AuditLog, restore
    from winnow.runtime.budget import ContextBudget
    from winnow.runtime.economics import PROFILES, CacheProfile, estimate
    from winnow.runtime.idle import IdleCompactor, IdleConfig, SystemClock, VirtualClock
    from winnow.runtime.llm import Conversation, LLMError, complete
    from winnow.runtime.session import Session
    from winnow.runtime.transcript import FileRegistry


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

__all__ = [  # the names of _EXPORTS, spelled out for linters and type checkers
    "AuditLog",
    "CacheProfile",
    "ContextBudget",
    "Conversation",
    "FileRegistry",
    "IdleCompactor",
    "IdleConfig",
    "LLMError",
    "PROFILES",
    "Session",
    "SystemClock",
    "VirtualClock",
    "complete",
    "estimate",
    "restore",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'winnow.runtime' has no attribute {name!r}")
