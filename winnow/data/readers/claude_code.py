"""Claude Code session JSONL (`~/.claude/projects/<project>/<session>.jsonl`, subagent files too).

Claude Code writes one line per content block. Assistant lines of one API message share
`message.id` and may be interleaved with the user lines carrying their tool results; we regroup
them so a message's blocks come out together, followed by the results. Lines are otherwise kept
in file order, which is chronological and, in every trace we have, already a topological order
of the `parentUuid` tree (re-sorting would need the whole file in memory). A line written twice
(same `uuid`, a resume race) is read once. Non-message records (progress, snapshots, hooks,
...) are counted in the report, not read.

What the user types while the agent works is queued (`queue-operation` records). A queued
message that is dequeued comes back as an ordinary user line; one that is `remove`d was
handed to the agent mid-turn (with its next tool result) and is written nowhere else, so it
becomes a user unit there, after the results of the message in progress. Queued task and
agent notifications are not user text.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from winnow.data.readers.base import (
    BadRecord,
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

NAME = "claude_code"
NOTIFICATION = f"{NAME}: queued notification"  # a task's or agent's, not user text
# Record types only Claude Code writes; any one of them on a complete head line identifies it.
_MARKER_TYPES = {"file-history-snapshot", "queue-operation", "last-prompt", "custom-title"}
# Repeated lines sit a few lines apart; remembering the latest uuids keeps memory flat.
_SEEN_MAX = 100_000


@dataclass
class _Spec:
    """A unit waiting for its index: units are numbered when emitted, after regrouping."""

    session: str
    role: str
    kind: str
    text: str
    kw: dict[str, Any]


@dataclass
class _Pending:
    message_id: str | None
    blocks: list[_Spec] = field(default_factory=list)
    results: list[_Spec] = field(default_factory=list)  # tool results that arrived mid-message
    queued: list[_Spec] = field(default_factory=list)  # user input handed over with the results


def render_result(content: Any) -> str:
    """A tool result's content: a string, or blocks whose text is kept and images noted."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        return to_text(content)
    parts = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append(block.get("text") or "")
        elif kind in ("image", "document"):
            parts.append(f"[{kind}]")
        elif kind == "tool_reference":
            parts.append(f"[tool {block.get('tool_name')}]")
        else:
            parts.append(to_text(block))
    return "\n".join(parts)


class ClaudeCodeReader:
    name = NAME

    def sniff(self, head: str) -> bool:
        for obj in head_objects(head):
            if "sessionId" in obj and ("parentUuid" in obj or "uuid" in obj):
                return True
            kind = obj.get("type")
            if kind in _MARKER_TYPES or (kind == "summary" and "leafUuid" in obj):
                return True
        return False

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        sessions: dict[str, SessionBuilder] = {}
        tool_names: dict[str, str] = {}
        seen: dict[str, int] = {}  # uuid -> content digest; insertion-ordered, oldest evicted first
        pending: _Pending | None = None
        queued: deque[_Spec | str] = deque()  # user text, or a notification's text

        def emit(specs: list[_Spec]) -> Iterator[Unit]:
            for s in specs:
                builder = sessions.get(s.session)
                if builder is None:
                    builder = sessions[s.session] = SessionBuilder(s.session)
                yield builder.unit(s.role, s.kind, s.text, **s.kw)

        def flush() -> Iterator[Unit]:
            nonlocal pending
            if pending is not None:
                done, pending = pending, None
                yield from emit(done.blocks + done.results + done.queued)

        for lineno, obj in iter_json_lines(path, report):
            action: tuple[str, str | None, list[_Spec]] | None = None
            with record_guard(report, path, lineno):
                if isinstance(obj, dict) and obj.get("type") == "queue-operation":
                    action = _queue_operation(obj, path, queued, report)
                else:
                    action = self._record(obj, path, tool_names, seen, report, lineno)
            if action is None:
                continue
            verb, message_id, specs = action
            if verb == "queued":
                if pending is not None:  # handed over with the next tool results
                    pending.queued.extend(specs)
                else:
                    yield from emit(specs)
                continue
            if verb == "assistant":
                if pending is None or pending.message_id != message_id or message_id is None:
                    yield from flush()
                    pending = _Pending(message_id)
                pending.blocks.extend(specs)
            elif verb == "results" and pending is not None:
                pending.results.extend(specs)
            else:
                yield from flush()
                yield from emit(specs)
        yield from flush()
        # typed while the agent worked and never dequeued: still what the user said
        yield from emit([q for q in queued if isinstance(q, _Spec)])

    def _record(
        self,
        obj: Any,
        path: Path,
        tool_names: dict[str, str],
        seen: dict[str, int],
        report: ReadReport,
        lineno: int | None = None,
    ) -> tuple[str, str | None, list[_Spec]] | None:
        """Classify one line: ("assistant", message_id, specs), ("results", None, specs),
        ("other", None, specs) or None when it holds no message."""
        if not isinstance(obj, dict):
            raise BadRecord(f"wrong field type: record is {type(obj).__name__}, expected object")
        kind = obj.get("type")
        if kind not in ("user", "assistant", "system"):
            report.skip(f"{NAME}: {kind}")
            return None
        if kind == "system" and obj.get("subtype") != "compact_boundary":
            report.skip(f"{NAME}: system/{obj.get('subtype')}")
            return None
        uuid = obj.get("uuid")
        if isinstance(uuid, str):
            # what the line says: a resumed session rewrites lines with new metadata fields
            message = obj.get("message")
            said = message.get("content") if isinstance(message, dict) else obj.get("content")
            digest = hash(json.dumps([kind, said], sort_keys=True, default=str))
            if uuid in seen:
                if seen[uuid] == digest:
                    report.skip(f"{NAME}: line repeated (same uuid)")
                    return None
                report.problem(
                    path, lineno, f"uuid {uuid} repeats with other content, read as well"
                )
            seen[uuid] = digest
            if len(seen) > _SEEN_MAX:
                del seen[next(iter(seen))]

        session = v if isinstance(v := obj.get("sessionId"), str) else path.stem
        if obj.get("isSidechain"):  # a subagent's turns share the parent's sessionId
            agent = obj.get("agentId")
            session = (
                f"{session}/agent-{agent}" if isinstance(agent, str) else f"{session}/sidechain"
            )
        ts = v if isinstance(v := obj.get("timestamp"), str) else None

        def spec(role: str, unit_kind: str, text: str, **kw: Any) -> _Spec:
            return _Spec(session, role, unit_kind, text, {"timestamp": ts, **kw})

        if kind == "system":
            text = v if isinstance(v := obj.get("content"), str) else "Conversation compacted"
            return "other", None, [spec("system", "text", text, extra={"compact_boundary": True})]

        message = expect(obj, "message", dict)
        content = expect(message, "content", (list, str), "message")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        extra = {}
        if obj.get("isCompactSummary"):
            extra["compact_summary"] = True
        if obj.get("isMeta"):
            extra["meta"] = True

        specs: list[_Spec] = []
        only_results = True
        for i, block in enumerate(content):
            where = f"message.content[{i}]"
            btype = expect(block, "type", str, where)
            if btype == "text":
                specs.append(
                    spec(kind, "text", expect(block, "text", str, where), extra=dict(extra))
                )
            elif btype == "thinking":
                specs.append(spec(kind, "thinking", expect(block, "thinking", str, where)))
            elif btype == "redacted_thinking":
                specs.append(spec(kind, "thinking", "[redacted thinking]"))
            elif btype in ("tool_use", "server_tool_use"):
                call_id = expect(block, "id", str, where)
                name = expect(block, "name", str, where)
                tool_names[call_id] = name
                specs.append(
                    spec(
                        kind,
                        "tool_call",
                        to_text(block.get("input")),
                        tool_name=name,
                        call_id=call_id,
                    )
                )
            elif btype == "tool_result" or btype.endswith("_tool_result"):
                call_id = expect(block, "tool_use_id", str, where)
                is_error = block.get("is_error")
                specs.append(
                    spec(
                        "tool",
                        "tool_result",
                        render_result(block.get("content")),
                        tool_name=tool_names.get(call_id),
                        call_id=call_id,
                        is_error=is_error if isinstance(is_error, bool) else None,
                    )
                )
                continue
            elif btype in ("image", "document"):
                specs.append(spec(kind, "text", f"[{btype}]", extra=dict(extra)))
            else:
                report.skip(f"{NAME}: {kind} block {btype}")
                continue
            only_results = False

        if kind == "assistant":
            mid = message.get("id")
            return "assistant", mid if isinstance(mid, str) else None, specs
        return ("results" if only_results and specs else "other"), None, specs


def _queue_operation(
    obj: dict, path: Path, queued: deque[_Spec | str], report: ReadReport
) -> tuple[str, None, list[_Spec]] | None:
    """Track the input queue; a removed (handed-over) user message becomes a user unit.

    The records of a typed message are read (its text becomes a unit here or comes back as
    its own user line), so only a notification's records count as skipped."""
    op = obj.get("operation")
    if op == "enqueue":
        content = obj.get("content")
        if not isinstance(content, str) or _is_notification(content):
            report.skip(NOTIFICATION)
            queued.append(content if isinstance(content, str) else "")  # a remove may name it
            return None
        session = v if isinstance(v := obj.get("sessionId"), str) else path.stem
        ts = v if isinstance(v := obj.get("timestamp"), str) else None
        queued.append(
            _Spec(session, "user", "text", content, {"timestamp": ts, "extra": {"queued": True}})
        )
        return None
    if op not in ("dequeue", "remove") or not queued:
        report.skip(f"{NAME}: queue-operation {op}")
        return None
    content = obj.get("content")
    if isinstance(content, str):  # names the message it removes
        for i, q in enumerate(queued):
            if (q.text if isinstance(q, _Spec) else q) == content:
                item = queued[i]
                del queued[i]
                break
        else:
            report.skip(f"{NAME}: queue-operation {op}")
            return None
    else:
        item = queued.popleft()
    if not isinstance(item, _Spec):
        report.skip(NOTIFICATION)
        return None
    if op == "dequeue":
        return None  # delivered as an ordinary user line, read there
    return "queued", None, [item]


def _is_notification(text: str) -> bool:
    head = text.lstrip()[:40]
    if head.startswith(("<agent-notification>", "<task-notification>")):
        return True
    if head.startswith("{"):
        try:
            return isinstance(json_value(text), dict)
        except ValueError:
            return False
    return False


READER = ClaudeCodeReader()
