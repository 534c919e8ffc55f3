"""Provider messages as units, turn boundaries, tool-result surgery, and the file registry.

Each unit carries `extra = {"msg": i, "block": j}`: where it lives in the message list, so a
label the classifier gives the unit can be acted on in the messages themselves.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from winnow.data.schema import Unit

__all__ = ["FileRegistry", "replace_tool_result", "to_units", "turn_starts"]


def to_units(api: str, messages: list[dict[str, Any]], session_id: str = "session") -> list[Unit]:
    """One unit per text / thinking block, tool call and tool result (docs/SCHEMA.md), read
    by `winnow.data.parse`: each keeps `extra["msg"]` / `["block"]`, where it sits in
    `messages` (for an Anthropic message, `block` is the index in its content list, None for a
    string content), and its block itself (`extra["raw"]`). `api` is "anthropic" or "openai"."""
    from winnow.data.readers import parse

    fmt = "openai_chat" if api == "openai" else "anthropic_messages"
    return list(parse(messages, fmt, session_id=session_id))


def turn_starts(api: str, messages: list[dict[str, Any]]) -> list[int]:
    """Indices of the messages that open a turn: user messages with words, not only tool results."""
    starts = []
    for i, m in enumerate(messages):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if api == "openai" or isinstance(content, str):
            starts.append(i)
        elif any(isinstance(b, dict) and b.get("type") != "tool_result" for b in content or ()):
            starts.append(i)
    return starts


def replace_tool_result(api: str, message: dict[str, Any], block: int, text: str) -> dict[str, Any]:
    """A copy of `message` whose tool result (at `block`) says `text`; ids stay, so pairs stay valid."""
    if api == "openai":
        return {**message, "content": text}
    content = list(message["content"])
    content[block] = {**content[block], "content": text}
    return {**message, "content": content}


# Tool names of the common harnesses, by what they do to a file.
_READS = {"read", "read_file", "view", "notebookread", "open_file"}
_EDITS = {
    "edit",
    "multiedit",
    "write",
    "notebookedit",
    "write_file",
    "edit_file",
    "str_replace",
    "apply_patch",
    "create",
}


@dataclass
class FileRegistry:
    """The files a session has read and edited, kept outside the messages.

    A harness that insists on read-before-edit must still know, after a compaction removed
    the Read results, which files the agent has seen: this registry survives compaction and
    is re-listed in the summary.
    """

    reads: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)
    edits: dict[str, int] = field(default_factory=dict)

    def observe(self, units: Iterable[Unit]) -> None:
        for u in units:
            if u.kind != "tool_call" or not u.tool_name:
                continue
            try:
                args = json.loads(u.text)
            except (ValueError, RecursionError):  # not JSON, or nested too deeply to parse
                continue
            if not isinstance(args, dict):
                continue
            path = args.get("file_path") or args.get("path") or args.get("notebook_path")
            if not isinstance(path, str):
                continue
            name = u.tool_name.lower()
            command = str(args.get("command", "")).lower()
            if name in _READS or command == "view":
                self.reads.setdefault(path, []).append(_line_range(args))
            elif name in _EDITS or command in _EDITS:
                self.edits[path] = self.edits.get(path, 0) + 1

    def was_read(self, path: str) -> bool:
        return path in self.reads

    def render(self) -> str:
        """One line a file: the line ranges read and the number of edits."""
        lines = []
        for path in sorted(set(self.reads) | set(self.edits)):
            ranges = [_fmt_range(r) for r in self.reads.get(path, [])]
            what = []
            if ranges:
                what.append("read " + ", ".join(dict.fromkeys(ranges)))
            if path in self.edits:
                what.append(f"edited {self.edits[path]}x")
            lines.append(f"- {path}: {'; '.join(what)}")
        return "\n".join(lines)


def _line_range(args: dict[str, Any]) -> tuple[int, int | None]:
    if isinstance(args.get("view_range"), list) and len(args["view_range"]) == 2:
        a, b = args["view_range"]
        return int(a), (None if int(b) < 0 else int(b))
    offset = int(args.get("offset") or 1)
    limit = args.get("limit")
    return offset, (offset + int(limit) - 1 if limit else None)


def _fmt_range(r: tuple[int, int | None]) -> str:
    a, b = r
    if a <= 1 and b is None:
        return "whole file"
    return f"lines {a}-{b}" if b is not None else f"lines {a}-end"
