"""Codex CLI rollout JSONL (`~/.codex/sessions/.../rollout-*.jsonl`): `{timestamp, type, payload}`.

The conversation is the `response_item` records. `event_msg` records repeat the same messages
for the UI (user_message, agent_message) or carry telemetry, so they are counted, not read;
`session_meta` gives the session id. A `compacted` record (the summary that replaces the
history after compaction) is kept as one user unit.
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
    head_objects,
    iter_json_lines,
    json_value,
    record_guard,
    to_text,
)
from winnow.data.schema import Unit

NAME = "codex"
_RECORD_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
_ROLES = {"user": "user", "assistant": "assistant", "developer": "system", "system": "system"}
_EXIT = re.compile(r"(?:Process exited with code|Exit code:)\s*(-?\d+)")


def _compact_json(text: str) -> str:
    """Function-call arguments arrive as a JSON string; normalise them to compact JSON."""
    try:
        return to_text(json_value(text))
    except (ValueError, TypeError):
        return text


def _output(output: Any) -> tuple[str, bool | None]:
    """A function_call_output's text and error flag, from what the rollout states."""
    if isinstance(output, dict):  # {"content": ..., "success": bool}
        success = output.get("success")
        text = output.get("content")
        return (text if isinstance(text, str) else to_text(output)), (
            (not success) if isinstance(success, bool) else None
        )
    if isinstance(output, list):  # content items
        return "\n".join(_item_text(x) for x in output), None
    text = output if isinstance(output, str) else to_text(output)
    if text.startswith(
        '{"output"'
    ):  # older rollouts: {"output": ..., "metadata": {"exit_code": n}}
        try:
            d = json_value(text)
            code = d.get("metadata", {}).get("exit_code")
            return to_text(d.get("output")), (code != 0) if isinstance(code, int) else None
        except (ValueError, AttributeError):
            pass
    m = _EXIT.search(text[:500])
    return text, (int(m.group(1)) != 0) if m else None


def _item_text(item: Any) -> str:
    if isinstance(item, str):
        return item
    if not isinstance(item, dict):
        return to_text(item)
    if isinstance(item.get("text"), str):
        return item["text"]
    if item.get("type") in ("input_image", "image"):
        return "[image]"
    return to_text(item)


class CodexReader:
    name = NAME

    def sniff(self, head: str) -> bool:
        for obj in head_objects(head, limit=5):
            return "payload" in obj and obj.get("type") in _RECORD_TYPES
        return False

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        builder: SessionBuilder | None = None
        tool_names: dict[str, str] = {}
        for lineno, obj in iter_json_lines(path, report):
            specs: list[tuple] = []
            with record_guard(report, path, lineno):
                kind = expect(obj, "type", str)
                payload = expect(obj, "payload", dict)
                if kind == "session_meta" and builder is None:
                    sid = payload.get("id") or payload.get("session_id")
                    builder = SessionBuilder(sid if isinstance(sid, str) else path.stem)
                if kind == "response_item":
                    specs = self._item(payload, tool_names, report)
                elif kind == "compacted":
                    text = expect(payload, "message", str, "payload")
                    specs = [
                        (
                            "user",
                            "text",
                            text,
                            {"extra": {"compact_summary": True, "compact_boundary": True}},
                        )
                    ]
                else:
                    sub = payload.get("type")
                    report.skip(
                        f"{NAME}: {kind}/{sub}" if kind == "event_msg" else f"{NAME}: {kind}"
                    )
            if not specs:
                continue
            if builder is None:
                builder = SessionBuilder(path.stem)
            ts = v if isinstance(v := obj.get("timestamp"), str) else None
            for role, unit_kind, text, kw in specs:
                yield builder.unit(role, unit_kind, text, timestamp=ts, **kw)

    def _item(self, p: dict, tool_names: dict[str, str], report: ReadReport) -> list[tuple]:
        kind = expect(p, "type", str, "payload")
        if kind == "message":
            role = _ROLES.get(expect(p, "role", str, "payload"), "user")
            content = expect(p, "content", (list, str), "payload")
            if isinstance(content, str):
                return [(role, "text", content, {})]
            return [(role, "text", _item_text(b), {}) for b in content]
        if kind == "reasoning":
            # Raw reasoning when the rollout has it, else the summary; encrypted content is opaque.
            parts = [_item_text(x) for x in (p.get("content") or p.get("summary") or [])]
            if not any(parts):
                report.skip(f"{NAME}: reasoning without text (encrypted)")
                return []
            return [("assistant", "thinking", "\n\n".join(x for x in parts if x), {})]
        if kind.endswith(
            "_output"
        ):  # function_call_output, custom_tool_call_output, tool_search_output
            call_id = expect(p, "call_id", str, "payload")
            text, is_error = _output(p.get("output") if "output" in p else p.get("tools"))
            tool = tool_names.get(call_id)
            return [
                (
                    "tool",
                    "tool_result",
                    text,
                    {"tool_name": tool, "call_id": call_id, "is_error": is_error},
                )
            ]
        if kind.endswith("_call"):
            # function_call, custom_tool_call, local_shell_call, tool_search_call, web_search_call
            name = v if isinstance(v := p.get("name"), str) else kind.removesuffix("_call")
            call_id = v if isinstance(v := p.get("call_id"), str) else None
            if isinstance(p.get("arguments"), str):
                text = _compact_json(p["arguments"])
            elif isinstance(p.get("input"), str):
                text = p["input"]  # custom tools take free text (e.g. an apply_patch body)
            else:
                text = to_text(p.get("arguments", p.get("action")))
            if call_id:
                tool_names[call_id] = name
            return [("assistant", "tool_call", text, {"tool_name": name, "call_id": call_id})]
        report.skip(f"{NAME}: response_item/{kind}")
        return []


READER = CodexReader()
