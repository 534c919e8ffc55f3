"""The proxy's audit: one JSON line per request, what upstream answered, and the report.

    tap = ResponseTap("anthropic", streamed=True)
    for chunk in upstream_chunks: tap.feed(chunk)     # a copy: the client gets the bytes as they are
    tap.usage, tap.stop_reason, tap.message           # the upstream's own figures and answer

    audit = ProxyAudit("runs/")                        # appends to runs/proxy.audit.jsonl
    audit.write({...})
    rows = report("runs/")                             # per conversation: tokens saved, cache reads

A line holds figures only (conversation id, tokens, units changed by category, prefix hash,
the upstream's usage): never a message, a header or a credential.
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from winnow.runtime.llm import stream_fold

__all__ = ["ConversationReport", "ProxyAudit", "ResponseTap", "read_audit", "report"]

AUDIT_FILE = "proxy.audit.jsonl"
_MAX_LINE = 1 << 20  # an SSE line longer than this is not parsed (the bytes still pass)


class ResponseTap:
    """Reads a copy of an upstream response for its usage, stop reason and message.

    It folds the events as `winnow.runtime.llm.complete` does. It never raises: what it cannot
    read it leaves out (`ok` turns False).
    """

    def __init__(self, api: str, streamed: bool, encoding: str = "") -> None:
        self.api = api
        self.streamed = streamed
        self.ok = encoding in ("", "identity", "gzip", "deflate")
        self._inflate = (
            zlib.decompressobj(zlib.MAX_WBITS | 32) if encoding in ("gzip", "deflate") else None
        )
        self._buf = bytearray()
        self._fold = stream_fold(api)
        # the stream's proper end was seen: Anthropic's message_stop, OpenAI's [DONE] (the
        # bytes relayed carry it, unlike an SDK's events)
        self.complete = False

    @property
    def usage(self) -> dict[str, Any]:
        return self._fold.usage

    @property
    def stop_reason(self) -> str | None:
        return self._fold.stop_reason

    def feed(self, chunk: bytes) -> None:
        if not self.ok:
            return
        try:
            data = self._inflate.decompress(chunk) if self._inflate else chunk
            self._buf += data
            if self.streamed:
                while True:
                    nl = self._buf.find(b"\n")
                    if nl < 0:
                        if len(self._buf) > _MAX_LINE:
                            self.ok = False
                        return
                    line = bytes(self._buf[:nl]).strip()
                    del self._buf[: nl + 1]
                    if line.startswith(b"data:"):
                        self._event(line[5:].strip())
        except Exception:  # noqa: BLE001 - the audit must never break the relay
            self.ok = False

    def close(self) -> None:
        """The response ended: a plain JSON body is read now."""
        if not self.ok or self.streamed:
            return
        try:
            body = json.loads(bytes(self._buf))
            if isinstance(body, dict):
                self._fold.load(body)
                self.complete = True
        except Exception:  # noqa: BLE001 - the audit must never break the relay
            self.ok = False
        self._buf.clear()

    @property
    def message(self) -> dict[str, Any] | None:
        """The assistant message as the client will send it back (None if incomplete)."""
        return self._fold.message if self.complete else None

    def _event(self, data: bytes) -> None:
        if data == b"[DONE]":
            self.complete = True
            return
        ev = json.loads(data)
        if isinstance(ev, dict):
            self._fold.feed(ev)
            if self.api == "anthropic" and self._fold.ended:
                self.complete = True


class ProxyAudit:
    """Appends one JSON line per request to `<dir>/proxy.audit.jsonl` (thread-safe)."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / AUDIT_FILE
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        # ensure_ascii: one record a line whatever the text (no U+2028 in the output)
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(line)


def read_audit(path: str | Path, problems: list[str] | None = None) -> Iterable[dict[str, Any]]:
    """The records of an audit file or of every `*.audit.jsonl` in a folder; a bad line is one
    `file:line: reason` in `problems` and the rest is read."""
    path = Path(path)
    files = sorted(path.glob("*.audit.jsonl")) if path.is_dir() else [path]
    for f in files:
        # utf-8-sig: a byte order mark (an editor's) is not part of the first record
        with f.open(encoding="utf-8-sig", errors="replace", newline="\n") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except (json.JSONDecodeError, RecursionError) as e:
                    if problems is not None:
                        why = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
                        problems.append(f"{f}:{n}: not JSON ({why})")
                    continue
                if isinstance(rec, dict) and rec.get("type") == "request":
                    yield rec


@dataclass
class ConversationReport:
    """Totals of one conversation, from its audit lines."""

    conversation: str
    requests: int = 0
    rewritten: int = 0
    compressions: int = 0
    tokens_in: int = 0  # what the client sent, summed over requests (winnow's count)
    tokens_out: int = 0  # what went upstream
    input_tokens: int = 0  # the upstream's usage: uncached input...
    cache_read: int = 0  # ...read from its cache...
    cache_write: int = 0  # ...and written to it
    errors: int = 0

    @property
    def saved(self) -> float:
        return 1 - self.tokens_out / self.tokens_in if self.tokens_in else 0.0

    @property
    def cache_read_share(self) -> float:
        total = self.input_tokens + self.cache_read + self.cache_write
        return self.cache_read / total if total else 0.0


def usage_figures(usage: dict[str, Any]) -> tuple[int, int, int]:
    """(uncached input, cache reads, cache writes) from either API's usage."""

    def num(x: Any) -> int:
        return int(x) if isinstance(x, (int, float)) and x == x and abs(x) < 1e15 else 0

    if "prompt_tokens" in usage:
        cached = num((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))
        return num(usage.get("prompt_tokens")) - cached, cached, 0
    return (
        num(usage.get("input_tokens")),
        num(usage.get("cache_read_input_tokens")),
        num(usage.get("cache_creation_input_tokens")),
    )


def report(records: Iterable[dict[str, Any]]) -> list[ConversationReport]:
    """Per conversation, in order of first appearance."""
    out: dict[str, ConversationReport] = {}
    for rec in records:
        conv = str(rec.get("conversation") or "-")
        r = out.setdefault(conv, ConversationReport(conv))
        r.requests += 1
        action = rec.get("action")
        r.rewritten += action in ("reuse", "append", "compact", "idle")
        r.compressions += action in ("append", "compact")
        r.tokens_in += int(rec.get("tokens_in") or 0)
        r.tokens_out += int(rec.get("tokens_out") or 0)
        fresh, read, write = usage_figures(rec.get("usage") or {})
        r.input_tokens += fresh
        r.cache_read += read
        r.cache_write += write
        r.errors += bool(rec.get("error")) or int(rec.get("status") or 0) >= 400
    return list(out.values())
