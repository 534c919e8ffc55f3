"""Anthropic Messages API requests.

`{model?, system: string | [text blocks], messages: [{role, content: string | [blocks]}]}`,
as one JSON document, a list of requests, or JSON Lines of requests (one session each; batch
lines `{"custom_id", "params": {...}}` too). Blocks: text, thinking, tool_use (a tool call)
and tool_result (its result, through `tool_use_id`, with `is_error`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from winnow.data.readers.base import (
    BadRecord,
    ReadReport,
    SessionBuilder,
    guarded,
    string,
    to_text,
)
from winnow.data.readers.openai_chat import conversations
from winnow.data.schema import Unit

_MESSAGES = re.compile(r'"(messages|params)"\s*:\s*[\[{]')
_ANTHROPIC = re.compile(
    r'"type"\s*:\s*"(tool_use|tool_result|thinking|redacted_thinking|server_tool_use)"'
    r'|"tool_use_id"\s*:|"system"\s*:\s*[\["]'
)


class AnthropicMessagesReader:
    """Reads Anthropic Messages requests."""

    name = "anthropic_messages"

    def sniff(self, head: str) -> bool:
        return head.lstrip()[:1] in ("{", "[") and bool(
            _MESSAGES.search(head) and _ANTHROPIC.search(head)
        )

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        for session_id, request, messages, line in conversations(path, report):
            s = SessionBuilder(session_id)
            system = request.get("system")
            for text in _system_texts(system):
                yield s.unit("system", "text", text)
            yield from _messages(s, messages, path, line, report)


def _system_texts(system: Any) -> list[str]:
    if isinstance(system, str):
        return [system] if system else []
    if isinstance(system, list):
        return [
            to_text(b.get("text"))
            for b in system
            if isinstance(b, dict) and b.get("type") == "text"
        ]
    return []


def _messages(
    s: SessionBuilder, messages: list, path: Path, line: int | None, report: ReadReport
) -> Iterator[Unit]:
    names: dict[str, str] = {}  # tool_use id -> tool name
    for n, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant", "system"):
            report.problem(path, line, f"message {n} has no known role ({role!r}), skipped")
            continue
        yield from guarded(report, path, line, s, _message(s, n, m, names, report))


def _message(s: SessionBuilder, n: int, m: dict, names: dict, report: ReadReport) -> Iterator[Unit]:
    role, content = m["role"], m.get("content")
    if isinstance(content, str):
        yield s.unit(role, "text", content)
        return
    if not isinstance(content, list):
        raise BadRecord(f"message {n} content is {type(content).__name__}, expected string or list")
    for i, b in enumerate(content):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            yield s.unit(role, "text", to_text(b.get("text")))
        elif kind == "thinking":
            yield s.unit(role, "thinking", to_text(b.get("thinking")))
        elif kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
            call_id = string(b.get("id"), f"{s.session_id}:call:{s.index}")
            name = names[call_id] = string(b.get("name"), kind)
            args = to_text(b.get("input") or {})
            yield s.unit("assistant", "tool_call", args, tool_name=name, call_id=call_id)
        elif (
            isinstance(kind, str)
            and kind.endswith("tool_result")
            and isinstance(b.get("tool_use_id"), str)
        ):
            call_id, error = b["tool_use_id"], b.get("is_error")
            yield s.unit(
                "tool",
                "tool_result",
                _result_text(b.get("content"), report),
                tool_name=names.get(call_id),
                call_id=call_id,
                is_error=error if isinstance(error, bool) else False,  # the API's default
            )
        elif kind is None:
            raise BadRecord(f"message {n} block {i} has no `type`")
        else:
            report.skip(f"anthropic {kind} block")


def _result_text(content: Any, report: ReadReport) -> str:
    if isinstance(content, str) or content is None:
        return content or ""
    if not isinstance(content, list):
        return to_text(content)
    texts = []
    for b in content:
        if isinstance(b, dict) and b.get("type") == "text":
            texts.append(to_text(b.get("text")))
        else:
            report.skip(
                f"anthropic tool_result {b.get('type') if isinstance(b, dict) else 'non-block'} part"
            )
    return "\n".join(texts)


READER = AnthropicMessagesReader()
