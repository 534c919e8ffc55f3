"""Archive before mutating, audit every mutation: a run can be checked and replayed.

log = AuditLog("runs/", "s1")
path = log.archive(conversation, reason="compact")   # the raw transcript, one message a line
log.record("compact", trigger="idle_ttl", tokens_before=..., tokens_after=...)
restore(path)                                        # the Conversation as it was
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from winnow.runtime.llm import Conversation

__all__ = ["AuditLog", "read_audit", "restore"]


class AuditLog:
    """Writes `<dir>/<session>.<n>.<reason>.jsonl` archives and appends to `<dir>/<session>.audit.jsonl`."""

    def __init__(
        self, directory: str | Path, session_id: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.dir = Path(directory)
        self.session_id = session_id
        self.clock = clock
        self.path = self.dir / f"{session_id}.audit.jsonl"
        self._n = len(list(self.dir.glob(f"{session_id}.*.*.jsonl"))) if self.dir.is_dir() else 0

    def archive(self, conversation: Conversation, reason: str) -> Path:
        """Write the conversation as it is now: a header line, then one message a line."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._n += 1
        path = self.dir / f"{self.session_id}.{self._n:03d}.{reason}.jsonl"
        head = {
            "type": "header",
            "session_id": self.session_id,
            "time": self.clock(),
            "api": conversation.api,
            "model": conversation.model,
            "system": conversation.system,
            "tools": conversation.tools,
            "params": conversation.params,
            "version": conversation.version,
        }
        with path.open("w", encoding="utf-8") as f:
            f.write(json.dumps(head, ensure_ascii=False) + "\n")
            for m in conversation.messages:
                f.write(json.dumps({"type": "message", "message": m}, ensure_ascii=False) + "\n")
        return path

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one audit entry (time and event first) and return it."""
        entry = {"time": self.clock(), "session_id": self.session_id, "event": event, **fields}
        self.dir.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
        return entry


def restore(path: str | Path) -> Conversation:
    """The conversation an archive holds."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    head = json.loads(lines[0])
    messages = [json.loads(line)["message"] for line in lines[1:] if line.strip()]
    return Conversation(
        head["api"],
        head["model"],
        messages,
        head.get("system"),
        head.get("tools"),
        head.get("params") or {},
    )


def read_audit(path: str | Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in Path(path).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
