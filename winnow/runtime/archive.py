"""Archive before mutating, audit every mutation: a run can be checked and replayed.

log = AuditLog("runs/", "s1")
path = log.archive(conversation, reason="compact")   # the raw transcript, one message a line
log.record("compact", trigger="idle_ttl", tokens_before=..., tokens_after=...)
restore(path)                                        # the Conversation as it was

Every record is one line whatever the text holds: JSON escapes `\\n`, `\\r` and the other
C0 controls, and `_line` also escapes the characters other tools take for line breaks
(U+0085, U+2028, U+2029) and lone surrogates (which UTF-8 cannot hold). Readers split on
`\\n` only. Archive names are never reused: each is created with `open(..., "x")` under a
number past every archive on disk and in the audit log.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from winnow.runtime.llm import Conversation

__all__ = ["AuditLog", "read_audit", "restore"]

# U+0085, U+2028, U+2029: str.splitlines() and many editors break lines there; surrogates:
# a lone one cannot be encoded as UTF-8. JSON leaves them raw when ensure_ascii is off.
_UNSAFE = re.compile("[\x85\u2028\u2029\ud800-\udfff]")


def _line(obj: Any) -> str:
    """One JSON Lines record, newline included."""
    text = json.dumps(obj, ensure_ascii=False, default=str)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"


def _records(path: Path, problems: list[str] | None = None) -> list[tuple[int, Any]]:
    """(line number, object) of each non-blank line. A bad line raises ValueError naming it,
    or, given `problems`, is named there (`FILE:LINE: why`) and skipped."""
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line)))
        except (ValueError, RecursionError) as e:
            why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
            problem = f"{path}:{n}: not a JSON record ({why})"
            if problems is None:
                raise ValueError(problem) from None
            problems.append(problem)
    return out


class AuditLog:
    """Writes `<dir>/<session>.<n>.<reason>.jsonl` archives and appends to `<dir>/<session>.audit.jsonl`."""

    def __init__(
        self, directory: str | Path, session_id: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.dir = Path(directory)
        self.session_id = session_id
        self.clock = clock
        self.path = self.dir / f"{session_id}.audit.jsonl"
        self._n: int | None = None  # the last number used, found on the first archive
        self._name = re.compile(re.escape(session_id) + r"\.(\d+)\.[^.]+\.jsonl")

    def _last_number(self) -> int:
        """The highest archive number of this session on disk or named in the audit log."""
        names = [p.name for p in self.dir.glob(f"{self.session_id}.*.*.jsonl")]
        if self.path.is_file():
            names += [
                Path(e["archive"]).name
                for _, e in _records_lenient(self.path)
                if isinstance(e, dict) and isinstance(e.get("archive"), str)
            ]
        numbers = [int(m.group(1)) for name in names if (m := self._name.fullmatch(name))]
        return max(numbers, default=0)

    def archive(self, conversation: Conversation, reason: str) -> Path:
        """Write the conversation as it is now, under a new name: a header line, then one
        message a line. Never overwrites: a name another writer took is skipped."""
        self.dir.mkdir(parents=True, exist_ok=True)
        n = self._last_number() if self._n is None else self._n
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
        data = _line(head) + "".join(
            _line({"type": "message", "message": m}) for m in conversation.messages
        )
        while True:
            n += 1
            path = self.dir / f"{self.session_id}.{n:03d}.{reason}.jsonl"
            try:
                f = path.open("x", encoding="utf-8", newline="\n")
            except FileExistsError:
                continue
            try:
                with f:
                    f.write(data)
            except BaseException:
                path.unlink(missing_ok=True)  # no half archive behind
                raise
            self._n = n
            return path

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one audit entry (time and event first) and return it."""
        entry = {"time": self.clock(), "session_id": self.session_id, "event": event, **fields}
        self.dir.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8", newline="\n") as f:
            f.write(_line(entry))
        return entry


def _records_lenient(path: Path) -> list[tuple[int, Any]]:
    try:
        return _records(path, problems=[])
    except (OSError, ValueError):
        return []


def restore(path: str | Path) -> Conversation:
    """The conversation an archive holds; ValueError (naming the line) when it is damaged."""
    path = Path(path)
    records = _records(path)
    if not records:
        raise ValueError(f"{path}: empty archive")
    (n, head), rest = records[0], records[1:]
    if not isinstance(head, dict) or head.get("type") != "header" or "api" not in head:
        raise ValueError(f"{path}:{n}: the first record is not an archive header")
    messages = []
    for n, rec in rest:
        if not isinstance(rec, dict) or not isinstance(rec.get("message"), dict):
            raise ValueError(f"{path}:{n}: not a message record")
        messages.append(rec["message"])
    return Conversation(
        head["api"],
        head.get("model", ""),
        messages,
        head.get("system"),
        head.get("tools"),
        head.get("params") or {},
    )


def read_audit(path: str | Path, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """The entries of an audit log. A damaged line (a harness killed mid-write leaves a cut
    last line) raises ValueError naming it, or, given `problems`, is named there and skipped."""
    return [e for _, e in _records(Path(path), problems)]
