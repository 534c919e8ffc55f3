"""Anthropic Messages API requests.

`{model, max_tokens, system?: string | [text blocks], messages: [{role, content: string |
[blocks]}], ...}`, as one JSON document, a list of requests, or JSON Lines of requests (one
session each; batch lines `{"custom_id", "params": {...}}` too). `parse_request` reads one
request held in memory; the file reader loads the file and parses each request.

Every block becomes one unit that keeps the block itself (contract C1): `extra["raw"]` (by
reference), where it sits (`msg`, `block`; `system` for the top-level system prompt), the
block type when the unit kind does not say it (`block_type`), and the message's own fields
when it has more than `role` and `content` (`shell`). The request's other fields (model,
max_tokens, thinking, tools, metadata, ...) are shared by every unit of the conversation as
`extra["request"]`. `winnow.serving.render.to_anthropic` writes a unit left unchanged back as
that very block. Blocks winnow cannot read (images, documents, unknown future types) are
units too, with a short text (`[image]`) and their documented token cost in
`extra["media_tokens"]`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from winnow.data.readers import media
from winnow.data.readers.base import (
    BadRecord,
    ReadReport,
    SessionBuilder,
    guarded,
    head_objects,
    string,
    to_text,
)
from winnow.data.readers.openai_chat import conversations, request_of
from winnow.data.schema import Unit

NAME = "anthropic_messages"
_MESSAGES = re.compile(r'"(messages|params)"\s*:\s*[\[{]')
# Block types (and fields) only an Anthropic request has.
ANTHROPIC_TYPES = frozenset(
    {
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "mcp_tool_use",
        "mcp_tool_result",
        "image",
        "document",
        "search_result",
        "container_upload",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
    }
)
_ANTHROPIC = re.compile(
    r'"type"\s*:\s*"(' + "|".join(sorted(ANTHROPIC_TYPES)) + r')"'
    r'|"tool_use_id"\s*:|"system"\s*:\s*[\["]|"cache_control"\s*:'
)
_BASIC = {
    "text": "text",
    "thinking": "thinking",
    "tool_use": "tool_call",
    "tool_result": "tool_result",
}
CALLS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


class AnthropicMessagesReader:
    """Reads Anthropic Messages requests."""

    name = NAME

    def sniff(self, head: str) -> bool:
        if head.lstrip()[:1] not in ("{", "["):
            return False
        records = list(head_objects(head, limit=3))  # complete first records: look at them
        if records:
            if all("role" in r for r in records):  # JSON Lines of messages
                return is_anthropic({"messages": records})
            return is_anthropic(records[0])
        return bool(_MESSAGES.search(head) and _ANTHROPIC.search(head))

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        for session_id, request, messages, line in conversations(path, report):
            yield from parse_request(
                request, SessionBuilder(session_id), report, path, line, messages
            )


def is_anthropic(record: Any) -> bool:
    """True when a request (or a batch line holding one) can only be an Anthropic request: a
    top-level `system`, or a block or field only the Messages API has."""
    if not isinstance(record, dict):
        return False
    request = request_of(record)
    if request is None:
        return False
    if "system" in request or "thinking" in request or "anthropic_version" in request:
        return True
    for m in request["messages"]:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            for b in content:
                if isinstance(b, dict) and (
                    b.get("type") in ANTHROPIC_TYPES or "cache_control" in b
                ):
                    return True
    return False


def request_shell(request: dict, produced: set[str]) -> dict[str, Any]:
    """The request's top-level fields in their order; those the units stand for (`produced`)
    are None, to be filled back in by the renderer."""
    return {k: (None if k in produced else v) for k, v in request.items()}


def parse_request(
    request: dict,
    s: SessionBuilder,
    report: ReadReport,
    path: str | Path = "request",
    line: int | None = None,
    messages: list | None = None,
) -> Iterator[Unit]:
    """The units of one request held in memory; problems go to `report` as `path:line` lines."""
    messages = request.get("messages") if messages is None else messages
    if not isinstance(messages, list):
        report.problem(path, line, "`messages` is not a list, request skipped")
        return
    system = request.get("system")
    produced = {"messages"} | ({"system"} if _has_system(system) else set())
    shared = {
        "format": NAME,
        "request": request_shell(request, produced) if request else None,
    }
    model = request.get("model") if isinstance(request.get("model"), str) else None
    reader = _Reader(s, report, path, line, model, shared)
    if "system" in produced:
        yield from reader.system(system)
    names: dict[str, str] = {}
    for n, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant", "system"):
            report.problem(path, line, f"message {n} has no known role ({role!r}), skipped")
            continue
        thinking = _thinking_of(m) if role == "assistant" else []
        for u in guarded(report, path, line, s, reader.message(n, m, names)):
            if thinking and u.kind == "tool_call":
                u.extra["turn_thinking"] = thinking
            yield u


def _thinking_of(m: dict) -> list[dict]:
    """The thinking blocks of an assistant message. Should it end up the turn a tool loop
    answers, the API wants them back unchanged: its tool calls carry them
    (`extra["turn_thinking"]`), and the renderer puts them back whatever the compressor did."""
    content = m.get("content")
    return [
        b
        for b in (content if isinstance(content, list) else ())
        if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking")
    ]


def _has_system(system: Any) -> bool:
    return (isinstance(system, str) and system != "") or (isinstance(system, list) and system != [])


class _Reader:
    def __init__(
        self,
        s: SessionBuilder,
        report: ReadReport,
        path: str | Path,
        line: int | None,
        model: str | None,
        shared: dict[str, Any],
    ):
        self.s, self.report, self.path, self.line = s, report, path, line
        self.model, self.shared = model, {k: v for k, v in shared.items() if v is not None}

    def unit(self, role: str, kind: str, text: str, extra: dict[str, Any], **kw: Any) -> Unit:
        return self.s.unit(role, kind, text, extra={**self.shared, **extra}, **kw)

    def system(self, system: Any) -> Iterator[Unit]:
        if isinstance(system, str):
            yield self.unit("system", "text", system, {"raw": system, "system": True})
            return
        for j, b in enumerate(system):
            text, kind, extra = self.block_text(b)
            yield self.unit("system", kind, text, {"raw": b, "system": True, "block": j, **extra})

    def message(self, n: int, m: dict, names: dict[str, str]) -> Iterator[Unit]:
        role, content = m["role"], m.get("content")
        where: dict[str, Any] = {"msg": n}
        if list(m) != ["role", "content"]:
            where["shell"] = {k: (None if k == "content" else v) for k, v in m.items()}
        if isinstance(content, str) or (isinstance(content, list) and not content):
            # one unit stands for the whole content, even when empty, so the message stays
            yield self.unit(
                role, "text", to_text(content), {"raw": content, "block": None, **where}
            )
            return
        if not isinstance(content, list):
            raise BadRecord(
                f"message {n} content is {type(content).__name__}, expected string or list"
            )
        for j, b in enumerate(content):
            yield self.block(role, b, {"raw": b, "block": j, **where}, names)

    def block(self, role: str, b: Any, extra: dict[str, Any], names: dict[str, str]) -> Unit:
        kind = b.get("type") if isinstance(b, dict) else None
        if kind not in _BASIC and isinstance(kind, str):
            extra["block_type"] = kind
        if kind in CALLS:
            call_id = string(b.get("id"), f"{self.s.session_id}:call:{self.s.index}")
            name = names[call_id] = string(b.get("name"), str(kind))
            return self.unit(
                role,
                "tool_call",
                to_text(b.get("input") or {}),
                extra,
                tool_name=name,
                call_id=call_id,
            )
        if (
            isinstance(kind, str)
            and kind.endswith("tool_result")
            and isinstance(b.get("tool_use_id"), str)
        ):
            call_id, error = b["tool_use_id"], b.get("is_error")
            text, tokens = self.result_text(b.get("content"))
            if tokens:
                extra["media_tokens"] = tokens
            return self.unit(
                "tool",
                "tool_result",
                text,
                extra,
                tool_name=names.get(call_id),
                call_id=call_id,
                is_error=error if isinstance(error, bool) else False,  # the API's default
            )
        if kind is None:
            self.report.problem(
                self.path, self.line, "a content block has no `type`; kept as it is"
            )
        text, unit_kind, more = self.block_text(b)
        return self.unit(role, unit_kind, text, {**extra, **more})

    def block_text(self, b: Any) -> tuple[str, str, dict[str, Any]]:
        """(text, unit kind, extra) of a block that is not a tool call or result."""
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            return to_text(b.get("text")), "text", {}
        if kind == "thinking":
            return to_text(b.get("thinking")), "thinking", {}
        if kind == "redacted_thinking":
            return "[redacted thinking]", "thinking", {}
        if kind == "image":
            return "[image]", "text", {"media_tokens": self.image_tokens(b.get("source"))}
        if kind == "document":
            return self.document(b)
        if kind == "search_result":
            return _search_result_text(b), "text", {}
        if kind == "container_upload":
            return f"[file {to_text(b.get('file_id'))}]", "text", {}
        label = kind if isinstance(kind, str) else "block"
        return f"[{label}]", "text", {"media_tokens": media.unknown_block_tokens(b)}

    def image_tokens(self, source: Any) -> int:
        size = None
        if isinstance(source, dict) and source.get("type") == "base64":
            size = media.image_size(source.get("data"))
        width, height = size or (None, None)
        return media.anthropic_image_tokens(width, height, self.model)

    def document(self, b: dict) -> tuple[str, str, dict[str, Any]]:
        source: dict[str, Any] = b["source"] if isinstance(b.get("source"), dict) else {}
        title = f"[document: {b['title']}]" if isinstance(b.get("title"), str) else "[document]"
        if source.get("type") == "text":  # plain text: readable, counted as text
            return f"{title}\n{to_text(source.get('data'))}", "text", {}
        if source.get("type") == "content":
            content = source.get("content")
            texts = (
                [to_text(c.get("text")) for c in content if isinstance(c, dict)]
                if isinstance(content, list)
                else [to_text(content)]
            )
            return "\n".join([title, *texts]), "text", {}
        pages = media.pdf_pages(source.get("data")) if source.get("type") == "base64" else None
        return title, "text", {"media_tokens": (pages or 1) * media.PDF_PAGE_TOKENS}

    def result_text(self, content: Any) -> tuple[str, int]:
        """A tool result's text (images and documents noted as `[image]`) and media tokens."""
        if isinstance(content, str) or content is None:
            return content or "", 0
        if isinstance(content, dict):  # a server tool's result object
            return _server_result_text(content), 0
        if not isinstance(content, list):
            return to_text(content), 0
        texts, tokens = [], 0
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                texts.append(to_text(part.get("text")))
            elif kind in ("image", "document", "search_result"):
                text, _kind, extra = self.block_text(part)
                texts.append(text)
                tokens += extra.get("media_tokens", 0)
            elif isinstance(part, dict):
                texts.append(_server_result_text(part))
            else:
                texts.append(to_text(part))
        return "\n".join(texts), tokens


def _search_result_text(b: dict) -> str:
    parts = [to_text(b.get("title")), to_text(b.get("source"))]
    content = b.get("content")
    if isinstance(content, list):
        parts += [to_text(c.get("text")) for c in content if isinstance(c, dict)]
    return "\n".join(p for p in parts if p)


def _server_result_text(obj: dict) -> str:
    """The readable part of a server tool's result (web search hits, code output, an error);
    encrypted page content is left out of the text (it stays in the raw block)."""
    kind = str(obj.get("type", ""))
    if kind.endswith("_error") or "error_code" in obj:
        return f"[{kind or 'error'}: {to_text(obj.get('error_code'))}]"
    if kind == "web_search_result":
        return f"{to_text(obj.get('title'))} {to_text(obj.get('url'))}".strip()
    if kind == "tool_reference":
        return f"[tool {to_text(obj.get('tool_name'))}]"
    texts = [
        to_text(obj[k])
        for k in ("stdout", "stderr", "text", "content")
        if isinstance(obj.get(k), str)
    ]
    if texts:
        return "\n".join(t for t in texts if t)
    inner = obj.get("content")
    if isinstance(inner, list):
        return "\n".join(
            _server_result_text(c) if isinstance(c, dict) else to_text(c) for c in inner
        )
    slim = {k: v for k, v in obj.items() if k not in ("encrypted_content", "data")}
    return json.dumps(slim, ensure_ascii=False, separators=(",", ":"), default=str)


READER = AnthropicMessagesReader()
