"""OpenHands event streams and evaluation `output.jsonl`.

Events look like `{id, timestamp, source, action | observation, args | extras, content, cause,
tool_call_metadata}`. They come as a JSON list (one session), JSON Lines of events (one
session), one event per file under `<session>/events/` (one session per folder), or an
evaluation / resolver `output.jsonl` where every line is an instance with its own `history`
(one session per line; older runs store the events flattened, without `source` or `cause`).

Mapping: tool actions (`run`, `edit`, `read`, `browse`, ...) become tool calls, their `thought`
the assistant text before them; observations become tool results, linked through `cause`, the
tool call id, or (flattened events) the action just before; `message` is user or assistant
text, `system` the system prompt, `think` a thinking block, `finish` assistant text.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePath
from typing import Any

from winnow.data.readers.base import (
    ReadReport,
    SessionBuilder,
    guarded,
    iter_json_lines,
    json_value,
    load_json,
    read_head,
    string,
    to_text,
)
from winnow.data.schema import Unit

_EVENT = re.compile(r'"(action|observation)"\s*:\s*"[a-z_]+"')
_SOURCE = re.compile(r'"source"\s*:\s*"(agent|user|environment)"')
_HISTORY = re.compile(r'"history"\s*:\s*\[\s*\{')

# Actions and observations that carry no conversation content.
_SILENT_ACTIONS = {"recall", "change_agent_state", "null", "condensation", "condensation_request"}
_SILENT_OBSERVATIONS = {"agent_state_changed", "null", "recall", "condense"}
_ERRORS = {"error", "user_rejected"}
# Bookkeeping fields of action args that are not the tool's input.
_NOT_INPUT = {
    "thought",
    "impl_source",
    "translated_ipython_code",
    "is_confirmed",
    "confirmation_state",
    "security_risk",
    "action_risk",
    "keep_prompt",
    "hidden",
    "blocking",
    "is_input",
    "is_static",
    "kernel_init_code",
    "action",
}


class OpenHandsReader:
    """Reads OpenHands event streams (list, JSONL, per-event files) and evaluation output.jsonl."""

    name = "openhands"

    def sniff(self, head: str) -> bool:
        start = head.lstrip()[:1]
        if start not in ("[", "{") or not _EVENT.search(head):
            return False
        return bool(_SOURCE.search(head) or _HISTORY.search(head))

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        path = path if isinstance(path, PurePath) else Path(path)  # a Document stays one
        first_line = read_head(path).lstrip().split("\n", 1)[0].strip()
        if first_line.startswith("[") or first_line == "{":  # one (pretty-printed) document
            data = load_json(path, report)
            if isinstance(data, list):
                yield from _session(path.stem, data, path, report)
                return
            if not isinstance(data, dict):
                if data is not None:
                    what = type(data).__name__
                    report.problem(path, 1, f"expected events, got {what}, file skipped")
                return
            records: Iterable[tuple[int | None, Any]] = [(None, data)]
        else:
            records = iter_json_lines(path, report)
        events: list[dict] = []
        seen: set[str] = set()
        for lineno, obj in records:
            if not isinstance(obj, dict):
                what = type(obj).__name__
                report.problem(path, lineno, f"expected an object, got {what}, line skipped")
            elif isinstance(obj.get("history"), list):
                sid = _instance_id(obj, f"{path.stem}-{lineno}")
                sid = sid if sid not in seen else f"{sid}-{lineno}"
                seen.add(sid)
                yield from _session(sid, obj["history"], path, report, lineno)
            else:
                events.append(obj)
        if len(events) == 1 and path.stem.isdigit():
            yield from self._event_file(path, events[0], report)
        elif events:
            yield from _session(path.stem, events, path, report)

    def _event_file(self, path: Path, event: dict, report: ReadReport) -> Iterator[Unit]:
        """One event per file (`sessions/<id>/events/<n>.json`): the first file reads them all."""
        siblings = sorted(
            (p for p in path.parent.glob("*.json") if p.stem.isdigit()), key=lambda p: int(p.stem)
        )
        if siblings and siblings[0] != path:
            report.skip("openhands event file (read with its session's first event)")
            return
        events = []
        for p in siblings:
            obj = event if p == path else load_json(p, report)
            if isinstance(obj, dict):
                events.append(obj)
            elif obj is not None:
                report.problem(
                    p, 1, f"expected an event object, got {type(obj).__name__}, file skipped"
                )
        sid = path.parent.parent.name if path.parent.name == "events" else path.parent.name
        yield from _session(sid, events, path, report)


def _instance_id(record: dict, default: str) -> str:
    if isinstance(record.get("instance_id"), str | int):
        return str(record["instance_id"])
    issue = record.get("issue")
    if isinstance(issue, dict) and issue.get("number") is not None:
        return f"{issue.get('owner', '')}/{issue.get('repo', '')}#{issue['number']}"
    return default


def _session(
    session_id: str, events: Iterable[Any], path: Path, report: ReadReport, line: int | None = None
) -> Iterator[Unit]:
    session = _Events(SessionBuilder(session_id), report)
    for n, e in enumerate(events):
        if not isinstance(e, dict):
            where = f"history[{n}]" if line is not None else f"event {n}"
            report.problem(
                path, line, f"{where} is {type(e).__name__}, expected an object, skipped"
            )
            continue
        yield from guarded(report, path, line, session.s, session.event(e))


class _Events:
    """One session's events to units: links observations to the calls they answer."""

    def __init__(self, s: SessionBuilder, report: ReadReport):
        self.s, self.report = s, report
        self.calls: dict[Any, tuple[str, str]] = {}  # event id or tool call id -> (call_id, name)
        self.pending: list[tuple[str, str]] = []  # calls still waiting for their observation
        self.echoes: set[Any] = set()  # `think` events whose "thought logged" echo is dropped
        self.thoughts: set[tuple[Any, str]] = set()  # (model response, thought) already emitted

    def event(self, e: dict) -> Iterator[Unit]:
        ts = v if isinstance(v := e.get("timestamp"), str) else None
        action, obs = e.get("action"), e.get("observation")
        meta = v if isinstance(v := e.get("tool_call_metadata"), dict) else {}
        if isinstance(action, str):
            # Older runs flatten `args` into the event itself.
            args = e["args"] if isinstance(e.get("args"), dict) else e
            yield from self.action(e, action, args, meta, ts)
        elif isinstance(obs, str):
            yield from self.observation(e, obs, meta, ts)
        else:
            self.report.skip("openhands event without action or observation")

    def action(
        self, e: dict, action: str, args: dict, meta: dict, ts: str | None
    ) -> Iterator[Unit]:
        s = self.s
        thought = v if isinstance(v := args.get("thought"), str) else ""
        if action in _SILENT_ACTIONS:
            self.report.skip(f"openhands {action} action")
        elif action == "message":
            role = "assistant" if e.get("source") == "agent" else "user"
            yield s.unit(
                role, "text", to_text(args.get("content") or e.get("message")), timestamp=ts
            )
        elif action == "system":
            yield s.unit(
                "system", "text", to_text(args.get("content") or e.get("message")), timestamp=ts
            )
        elif action == "think":
            self.echoes.update(k for k in (e.get("id"), meta.get("tool_call_id")) if k is not None)
            yield s.unit("assistant", "thinking", thought, timestamp=ts)
        elif action == "finish":
            text = args.get("final_thought") or thought or e.get("message") or args.get("outputs")
            yield s.unit("assistant", "text", to_text(text), timestamp=ts)
        else:
            response = (meta.get("model_response") or {}).get("id")
            if thought.strip() and (response, thought) not in self.thoughts:
                self.thoughts.add((response, thought))
                yield s.unit("assistant", "text", thought.strip(), timestamp=ts)
            name = string(meta.get("function_name")) or action
            call_id = string(meta.get("tool_call_id")) or f"{s.session_id}:call:{s.index}"
            self.calls[call_id] = self.calls[e.get("id", call_id)] = (call_id, name)
            self.pending.append((call_id, name))
            yield s.unit(
                "assistant",
                "tool_call",
                _tool_input(args, meta),
                tool_name=name,
                call_id=call_id,
                timestamp=ts,
            )

    def observation(self, e: dict, obs: str, meta: dict, ts: str | None) -> Iterator[Unit]:
        cause, tool_call_id = e.get("cause"), meta.get("tool_call_id")
        if cause in self.echoes or tool_call_id in self.echoes:
            self.report.skip("openhands think echo")
            return
        if obs in _SILENT_OBSERVATIONS:
            self.report.skip(f"openhands {obs} observation")
            return
        link = self.calls.get(cause) or self.calls.get(tool_call_id)
        if link is None and "source" not in e and self.pending:
            link = self.pending[0]  # flattened events: an observation answers the action before it
        text = to_text(e.get("content") if e.get("content") is not None else e.get("message"))
        if link is None or link not in self.pending:
            if obs in _ERRORS:
                # A call OpenHands rejected before running it (e.g. bad arguments) has no action;
                # the error goes back to the model as user text.
                yield self.s.unit("user", "text", text, is_error=True, timestamp=ts)
            else:
                self.report.skip("openhands observation without its action")
            return
        self.pending.remove(link)
        # The file editor reports some failures only in its text ("ERROR:\nNo replacement ...").
        error = obs in _ERRORS or _exit_code(e) not in (None, 0) or text.startswith("ERROR:")
        yield self.s.unit(
            "tool",
            "tool_result",
            text,
            tool_name=link[1],
            call_id=link[0],
            is_error=error,
            timestamp=ts,
        )


def _exit_code(e: dict) -> int | None:
    extras = e["extras"] if isinstance(e.get("extras"), dict) else e
    meta = v if isinstance(v := extras.get("metadata"), dict) else {}
    code = meta.get("exit_code", extras.get("exit_code"))
    return code if isinstance(code, int) else None


def _tool_input(args: dict, meta: dict) -> str:
    """The arguments the model sent, else the action's args without bookkeeping fields."""
    message = ((meta.get("model_response") or {}).get("choices") or [{}])[0].get("message") or {}
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, str):
        try:
            tool_calls = ast.literal_eval(tool_calls)
        except (ValueError, SyntaxError, RecursionError, MemoryError):  # too deep too
            tool_calls = None
    for call in tool_calls if isinstance(tool_calls, list) else []:
        if isinstance(call, dict) and call.get("id") == meta.get("tool_call_id"):
            arguments = (call.get("function") or {}).get("arguments")
            try:
                return (
                    to_text(json_value(arguments))
                    if isinstance(arguments, str)
                    else to_text(arguments)
                )
            except ValueError:  # not JSON: the string as sent
                return str(arguments)
    return to_text(
        {k: v for k, v in args.items() if k not in _NOT_INPUT and v not in (None, "", [], {})}
    )


READER = OpenHandsReader()
