"""GitHub Copilot CLI session events JSONL (`~/.copilot/session-state/<id>/events.jsonl`).

Events are `{type, data, id, parentId, timestamp}`. An `assistant.message` carries its
reasoning, its text and the tool calls it requests (`toolRequests`); `tool.execution_complete`
carries each result, paired by `toolCallId`. Hooks, session bookkeeping, turn markers and
permission prompts are counted, not read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from winnow.data.readers.base import (
    ReadReport,
    SessionBuilder,
    expect,
    head_objects,
    iter_json_lines,
    record_guard,
    to_text,
)
from winnow.data.schema import Unit

NAME = "copilot"


def _result_text(data: dict) -> str:
    result = data.get("result")
    if isinstance(result, dict) and "content" in result:
        return to_text(result["content"])
    error = data.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    return to_text(result if result is not None else error)


class CopilotReader:
    name = NAME

    def sniff(self, head: str) -> bool:
        for obj in head_objects(head, limit=5):
            kind = obj.get("type")
            return isinstance(kind, str) and "." in kind and "data" in obj and "parentId" in obj
        return False

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        builder: SessionBuilder | None = None
        tool_names: dict[str, str | None] = {}
        for lineno, obj in iter_json_lines(path, report):
            specs: list[tuple[str, str, str, dict[str, Any]]] = []
            with record_guard(report, path, lineno):
                kind = expect(obj, "type", str)
                data = expect(obj, "data", dict)
                if (
                    kind == "session.start"
                    and builder is None
                    and isinstance(data.get("sessionId"), str)
                ):
                    builder = SessionBuilder(data["sessionId"])
                specs = self._event(kind, data, tool_names, report)
            if not specs:
                continue
            if builder is None:
                builder = SessionBuilder(path.stem if path.stem != "events" else path.parent.name)
            ts = v if isinstance(v := obj.get("timestamp"), str) else None
            for role, unit_kind, text, kw in specs:
                yield builder.unit(role, unit_kind, text, timestamp=ts, **kw)

    def _event(
        self, kind: str, data: dict, tool_names: dict[str, str | None], report: ReadReport
    ) -> list[tuple]:
        if kind == "user.message":
            return [("user", "text", expect(data, "content", str, "data"), {})]
        if kind in ("system.message", "system.notification"):
            return [("system", "text", expect(data, "content", str, "data"), {})]
        if kind == "assistant.message":
            specs: list[tuple] = []
            if isinstance(data.get("reasoningText"), str) and data["reasoningText"]:
                specs.append(("assistant", "thinking", data["reasoningText"], {}))
            content = expect(data, "content", (str, type(None)), "data")
            if content:
                specs.append(("assistant", "text", content, {}))
            for i, req in enumerate(data.get("toolRequests") or []):
                where = f"data.toolRequests[{i}]"
                call_id = expect(req, "toolCallId", str, where)
                name = expect(req, "name", str, where)
                tool_names[call_id] = name
                args = {"tool_name": name, "call_id": call_id}
                specs.append(("assistant", "tool_call", to_text(req.get("arguments")), args))
            return specs
        if kind == "tool.execution_start":
            call_id = expect(data, "toolCallId", str, "data")
            if call_id in tool_names:  # already read from the message's toolRequests
                report.skip(f"{NAME}: tool.execution_start")
                return []
            name = v if isinstance(v := data.get("toolName"), str) else None
            tool_names[call_id] = name
            args = {"tool_name": name, "call_id": call_id}
            return [("assistant", "tool_call", to_text(data.get("arguments")), args)]
        if kind == "tool.execution_complete":
            call_id = expect(data, "toolCallId", str, "data")
            success = data.get("success")
            is_error = (not success) if isinstance(success, bool) else None
            args = {"tool_name": tool_names.get(call_id), "call_id": call_id, "is_error": is_error}
            return [("tool", "tool_result", _result_text(data), args)]
        report.skip(f"{NAME}: {kind}")
        return []


READER = CopilotReader()
