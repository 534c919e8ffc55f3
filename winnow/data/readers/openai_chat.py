"""OpenAI chat-completions messages.

A file holds a request (`{"model", "messages": [...]}`), a list of messages, JSON Lines of
requests (one session a line; batch-API lines `{"custom_id", "body": {...}}` too) or JSON
Lines of messages (one session). Roles system/developer/user/assistant/tool (and the legacy
`function`); an assistant's `tool_calls[{id, function{name, arguments}}]` become tool calls,
answered by `tool` messages through `tool_call_id`.

`conversations()` (the file shapes) is shared with the Anthropic Messages reader.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from winnow.data.readers.base import (
    BadRecord,
    ReadReport,
    SessionBuilder,
    guarded,
    iter_json_lines,
    load_json,
    read_head,
    string,
    to_text,
)
from winnow.data.schema import Unit

_ROLE = re.compile(r'"role"\s*:\s*"(system|developer|user|assistant|tool|function)"')
_CONTENT = re.compile(r'"(content|tool_calls)"\s*:')
_TEXT_PARTS = {"text", "input_text", "output_text"}
_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def _request(record: dict) -> dict | None:
    """The request inside a record: itself, a batch line's `body` or `params`, a log's `request`."""
    for r in (record, record.get("body"), record.get("params"), record.get("request")):
        if isinstance(r, dict) and isinstance(r.get("messages"), list):
            return r
    return None


def _session_name(record: dict, default: str) -> str:
    for key in ("custom_id", "session_id", "conversation_id", "id"):
        if isinstance(record.get(key), str) and record[key]:
            return record[key]
    return default


Conversation = tuple[str, dict, list, int | None]  # (session id, request, messages, line)


def conversations(path: Path, report: ReadReport) -> Iterator[Conversation]:
    """Each conversation in a file of any shape.

    A log of successive requests of one conversation repeats every earlier message in each
    request: a request that starts with all of the previous one's messages continues its
    conversation, so only the longest is read (once, under the first request's name).
    """
    last: Conversation | None = None
    for conv in _requests(Path(path), report):
        if (
            last is not None
            and 0 < len(last[2]) <= len(conv[2])
            and conv[2][: len(last[2])] == last[2]
        ):
            report.skip("request repeating an earlier request's messages")
            last = (last[0], conv[1], conv[2], conv[3])
            continue
        if last is not None:
            yield last
        last = conv
    if last is not None:
        yield last


def _requests(path: Path, report: ReadReport) -> Iterator[Conversation]:
    head = read_head(path).lstrip()
    first_line = head.split("\n", 1)[0].strip()
    if head.startswith("[") or first_line == "{":
        data = load_json(path, report)
        records = data if isinstance(data, list) else [data] if data is not None else []
        if records and all(isinstance(r, dict) and "role" in r for r in records):
            yield path.stem, {}, records, None  # a bare list of messages
            return
        for n, r in enumerate(records):
            request = _request(r) if isinstance(r, dict) else None
            if request is None:
                report.problem(path, None, f"item {n} is not a request with `messages`, skipped")
                continue
            name = path.stem if len(records) == 1 else f"{path.stem}-{n}"
            yield _session_name(r, name), request, request["messages"], None
        return
    messages: list = []
    seen: set[str] = set()
    for lineno, r in enumerate_records(path, report):
        request = _request(r)
        if request is not None:
            sid = _session_name(r, f"{path.stem}-{lineno}")
            sid = sid if sid not in seen else f"{sid}-{lineno}"
            seen.add(sid)
            yield sid, request, request["messages"], lineno
        elif "role" in r:
            messages.append(r)
        else:
            report.skip("json line without messages")
    if messages:
        yield path.stem, {}, messages, None


def enumerate_records(path: Path, report: ReadReport) -> Iterator[tuple[int, dict]]:
    for lineno, obj in iter_json_lines(path, report):
        if isinstance(obj, dict):
            yield lineno, obj
        else:
            report.problem(
                path, lineno, f"expected an object, got {type(obj).__name__}, line skipped"
            )


def arguments_json(arguments: Any) -> str:
    """Tool arguments as compact JSON; a string that is not JSON is kept as it is."""
    if isinstance(arguments, str):
        try:
            return to_text(json.loads(arguments))
        except ValueError:
            return arguments
    return to_text(arguments if arguments is not None else {})


class _Calls:
    """The tool calls of one conversation, for naming and linking their results."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # call id -> tool name
        self.legacy: list[str] = []  # legacy `function_call`s awaiting a `function` reply


class OpenAIChatReader:
    """Reads OpenAI chat-completions requests and message lists."""

    name = "openai_chat"

    def sniff(self, head: str) -> bool:
        return head.lstrip()[:1] in ("{", "[") and bool(
            _ROLE.search(head) and _CONTENT.search(head)
        )

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        for session_id, _, messages, line in conversations(path, report):
            yield from self._messages(SessionBuilder(session_id), messages, path, line, report)

    def _messages(
        self, s: SessionBuilder, messages: list, path: Path, line: int | None, report: ReadReport
    ) -> Iterator[Unit]:
        calls = _Calls()
        for n, m in enumerate(messages):
            role = m.get("role") if isinstance(m, dict) else None
            if role not in _ROLES:
                report.problem(path, line, f"message {n} has no known role ({role!r}), skipped")
                continue
            yield from guarded(report, path, line, s, self._message(s, n, m, calls, report))

    def _message(
        self, s: SessionBuilder, n: int, m: dict, calls: _Calls, report: ReadReport
    ) -> Iterator[Unit]:
        role, content = m["role"], m.get("content")
        if role in ("system", "developer", "user"):
            for text in self._texts(content, report):
                yield s.unit("user" if role == "user" else "system", "text", text)
        elif role == "assistant":
            reasoning = m.get("reasoning_content") or m.get("reasoning")
            if isinstance(reasoning, str) and reasoning.strip():
                yield s.unit("assistant", "thinking", reasoning)
            for text in self._texts(content, report):
                yield s.unit("assistant", "text", text)
            if isinstance(m.get("refusal"), str) and m["refusal"]:
                yield s.unit("assistant", "text", m["refusal"])
            tool_calls = m.get("tool_calls") if isinstance(m.get("tool_calls"), list) else []
            if isinstance(m.get("function_call"), dict):
                tool_calls = [*tool_calls, {"function": m["function_call"], "legacy": True}]
            for c in tool_calls:
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict):
                    raise BadRecord(f"message {n} has a tool call without `function`")
                name = string(fn.get("name"), "function")
                call_id = string(c.get("id"), f"{s.session_id}:call:{s.index}")
                calls.names[call_id] = name
                if c.get("legacy"):
                    calls.legacy.append(call_id)
                args = arguments_json(fn.get("arguments"))
                yield s.unit("assistant", "tool_call", args, tool_name=name, call_id=call_id)
        else:
            call_id = m.get("tool_call_id") if role == "tool" else (calls.legacy or [None]).pop(0)
            if not isinstance(call_id, str):
                raise BadRecord(f"message {n} (`{role}`) answers no tool call")
            name = calls.names.get(call_id) or string(m.get("name"))
            text = "\n".join(self._texts(content, report, keep_empty=True))
            yield s.unit("tool", "tool_result", text, tool_name=name, call_id=call_id)

    @staticmethod
    def _texts(content: Any, report: ReadReport, keep_empty: bool = False) -> list[str]:
        if isinstance(content, str):
            return [content] if content or keep_empty else []
        if content is None:
            return [""] if keep_empty else []
        if not isinstance(content, list):
            return [to_text(content)]
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
                texts.append(to_text(part.get("text")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                report.skip(f"openai {kind} part")
        return texts or ([""] if keep_empty else [])


READER = OpenAIChatReader()
