"""Gemini CLI saved session (`~/.gemini/tmp/<project>/chats/session-*.json`).

One JSON document `{sessionId, messages: [...]}`, pretty-printed (sometimes saved under a
`.jsonl` name). A `gemini` message carries its thoughts, its text and its tool calls, each
tool call holding its own result, so one call becomes a tool_call and a tool_result unit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from winnow.data.readers.base import (
    ReadReport,
    SessionBuilder,
    expect,
    load_json,
    record_guard,
    to_text,
)
from winnow.data.schema import Unit

NAME = "gemini"
_MESSAGES = re.compile(r'"messages"\s*:\s*\[')
_GEMINI_TYPE = re.compile(r'"type"\s*:\s*"(user|gemini)"')


def _parts_text(content: Any) -> str:
    """Message content: a string or a list of parts ({text} or other)."""
    if isinstance(content, str) or content is None:
        return content or ""
    if isinstance(content, list):
        return "\n".join(
            p["text"] if isinstance(p, dict) and isinstance(p.get("text"), str) else to_text(p)
            for p in content
        )
    return to_text(content)


def _result(call: dict) -> tuple[str, bool | None]:
    """A tool call's result text and error flag (from its status or an `error` response)."""
    texts, errored = [], False
    for part in call.get("result") or []:
        response = (
            part.get("functionResponse", {}).get("response") if isinstance(part, dict) else None
        )
        if isinstance(response, dict) and ("output" in response or "error" in response):
            errored |= "error" in response
            texts.append(to_text(response.get("error", response.get("output"))))
        else:
            texts.append(to_text(response if response is not None else part))
    if not texts and call.get("resultDisplay"):
        texts.append(to_text(call["resultDisplay"]))
    status = call.get("status")
    if isinstance(status, str):
        errored |= status in ("error", "cancelled")
        return "\n".join(texts), errored
    return "\n".join(texts), True if errored else None


class GeminiReader:
    name = NAME

    def sniff(self, head: str) -> bool:
        head = head.lstrip()
        return (
            head.startswith("{")
            and '"sessionId"' in head
            and bool(_MESSAGES.search(head))
            and ('"projectHash"' in head or bool(_GEMINI_TYPE.search(head)))
        )

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        doc = load_json(path, report)
        if doc is None:
            return
        messages = None
        with record_guard(report, path, None):
            messages = expect(doc, "messages", list)
        if messages is None:
            return
        sid = doc.get("sessionId")
        builder = SessionBuilder(sid if isinstance(sid, str) else path.stem)
        n_calls = 0
        for i, msg in enumerate(messages):
            specs: list[tuple] = []
            # Pretty-printed JSON has no useful line per message; the message index names it.
            with record_guard(report, f"{path}: messages[{i}]", None):
                specs = self._message(
                    msg, f"messages[{i}]", f"{builder.session_id}:call", n_calls, report
                )
            n_calls += sum(1 for s in specs if s[1] == "tool_call")
            ts = (
                msg.get("timestamp")
                if isinstance(msg, dict) and isinstance(msg.get("timestamp"), str)
                else None
            )
            for role, unit_kind, text, kw in specs:
                yield builder.unit(role, unit_kind, text, timestamp=ts, **kw)

    def _message(
        self, msg: Any, where: str, call_prefix: str, n_calls: int, report: ReadReport
    ) -> list[tuple]:
        kind = expect(msg, "type", str, where)
        if kind == "user":
            return [("user", "text", _parts_text(msg.get("content")), {})]
        if (
            kind != "gemini"
        ):  # info / warning / error notes the CLI shows; the model never sees them
            report.skip(f"{NAME}: {kind}")
            return []
        specs: list[tuple] = []
        for t in msg.get("thoughts") or []:
            text = "\n".join(
                x for x in (t.get("subject"), t.get("description")) if isinstance(x, str)
            )
            specs.append(("assistant", "thinking", text, {}))
        if text := _parts_text(msg.get("content")):
            specs.append(("assistant", "text", text, {}))
        for j, call in enumerate(msg.get("toolCalls") or []):
            name = expect(call, "name", str, f"{where}.toolCalls[{j}]")
            call_id = v if isinstance(v := call.get("id"), str) else f"{call_prefix}{n_calls + j}"
            result, is_error = _result(call)
            args = {"tool_name": name, "call_id": call_id}
            specs.append(("assistant", "tool_call", to_text(call.get("args")), args))
            specs.append(("tool", "tool_result", result, {**args, "is_error": is_error}))
        return specs


READER = GeminiReader()
