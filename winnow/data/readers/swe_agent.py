"""SWE-agent `.traj` trajectories.

A `.traj` holds two views of one run: `history` (every message the model saw, observations
wrapped in prompt templates) and `trajectory` (one step per action: thought, action, raw
observation). We take the opening of `history` (system prompt, demonstrations, the task)
and then the `trajectory` steps, whose observations are the tools' own output and which
include the final `submit` observation that `history` lacks. Files without a trajectory
(function-calling demonstrations) are read from `history` alone.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from winnow.data.readers.base import (
    ReadReport,
    SessionBuilder,
    guarded,
    json_value,
    load_json,
    string,
    to_text,
)
from winnow.data.schema import Unit

_TRAJECTORY = re.compile(r'"trajectory"\s*:\s*\[')
_HISTORY = re.compile(r'"history"\s*:\s*\[')
_SWE_MESSAGE = re.compile(r'"agent"\s*:\s*"[^"]*"')
_ROLE = re.compile(r'"role"\s*:\s*"(system|user|assistant|tool)"')
_ROLES = ("system", "user", "assistant", "tool")
# OpenHands output.jsonl lines also carry a `history`, of events with a `source`.
_OPENHANDS = re.compile(r'"source"\s*:\s*"(agent|user|environment)"')


def _tool_name(action: str) -> str:
    words = action.split(None, 1)
    return words[0] if words else "bash"


def _tool_calls(value: Any) -> list[dict]:
    """`tool_calls` as a list; replayed trajectories store it as a Python repr string."""
    if isinstance(value, str):
        for parse in (json_value, ast.literal_eval):
            try:
                value = parse(value)
                break
            except (ValueError, SyntaxError, RecursionError, MemoryError):  # too deep too
                continue
    return [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []


def _arguments(call: dict) -> str:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json_value(args)
        except ValueError:
            return args
    return to_text(args if args is not None else {})


class SweAgentReader:
    """Reads SWE-agent `.traj` JSON files: one session per file."""

    name = "swe_agent"

    def sniff(self, head: str) -> bool:
        if not head.lstrip().startswith("{") or _OPENHANDS.search(head):
            return False
        if _TRAJECTORY.search(head):
            return True
        return bool(_HISTORY.search(head) and _ROLE.search(head) and _SWE_MESSAGE.search(head))

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        data = load_json(path, report)
        if data is None:
            return
        if not isinstance(data, dict):
            report.problem(
                path,
                1,
                f"expected a JSON object with `trajectory`/`history`, got {type(data).__name__}, file skipped",
            )
            return
        history, trajectory = data.get("history"), data.get("trajectory")
        history = history if isinstance(history, list) else []
        trajectory = trajectory if isinstance(trajectory, list) else []
        if not history and not trajectory:
            report.problem(path, None, "no `trajectory` or `history` list, file skipped")
            return
        s = SessionBuilder(Path(path).stem)
        if trajectory:
            opening = []
            for m in history:
                if isinstance(m, dict) and m.get("role") == "assistant":
                    break
                opening.append(m)
            yield from self._history(path, opening, s, report)
            report.skip(
                "swe-agent history step (read from trajectory)", len(history) - len(opening)
            )
            yield from self._trajectory(path, trajectory, s, report)
        else:
            yield from self._history(path, history, s, report)

    def _trajectory(
        self, path: Path, steps: list, s: SessionBuilder, report: ReadReport
    ) -> Iterator[Unit]:
        for n, step in enumerate(steps):
            if not isinstance(step, dict):
                where = f"trajectory[{n}] is {type(step).__name__}"
                report.problem(path, None, f"{where}, expected an object, step skipped")
                continue
            yield from guarded(report, path, None, s, self._step(n, step, s, report))

    def _step(self, n: int, step: dict, s: SessionBuilder, report: ReadReport) -> Iterator[Unit]:
        thought, action = step.get("thought"), step.get("action")
        if isinstance(thought, str) and thought.strip():
            yield s.unit("assistant", "text", thought.strip())
        if not isinstance(action, str) or not action.strip():
            report.skip("swe-agent step without action")
            return
        name, call_id = _tool_name(action), f"{s.session_id}:call:{n}"
        command = to_text({"command": action.strip()})
        yield s.unit("assistant", "tool_call", command, tool_name=name, call_id=call_id)
        observation = to_text(step.get("observation"))
        yield s.unit("tool", "tool_result", observation, tool_name=name, call_id=call_id)

    def _history(
        self, path: Path, messages: list, s: SessionBuilder, report: ReadReport
    ) -> Iterator[Unit]:
        pending: list[tuple[str, str]] = []  # (call_id, tool_name) awaiting an observation
        for n, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in _ROLES:
                report.problem(path, None, f"history[{n}] is not a message (no role), skipped")
                continue
            yield from guarded(report, path, None, s, self._message(n, m, s, pending))

    def _message(self, n: int, m: dict, s: SessionBuilder, pending: list) -> Iterator[Unit]:
        role, content = m["role"], to_text(m.get("content"))
        if role == "assistant":
            thought = m.get("thought")
            thought = thought if isinstance(thought, str) else content
            if thought.strip():
                yield s.unit("assistant", "text", thought.strip())
            pending.clear()
            calls = _tool_calls(m.get("tool_calls"))
            for i, c in enumerate(calls):
                call_id = string(c.get("id"), f"{s.session_id}:call:{n}.{i}")
                name = string((c.get("function") or {}).get("name"), "bash")
                pending.append((call_id, name))
                yield s.unit(
                    "assistant", "tool_call", _arguments(c), tool_name=name, call_id=call_id
                )
            action = m.get("action")
            if not calls and isinstance(action, str) and action.strip():
                call_id, name = f"{s.session_id}:call:{n}", _tool_name(action)
                pending.append((call_id, name))
                command = to_text({"command": action.strip()})
                yield s.unit("assistant", "tool_call", command, tool_name=name, call_id=call_id)
        elif pending and role in ("user", "tool"):
            # An observation answers the previous action; function-calling runs name the ids.
            wanted = _ids(m.get("tool_call_ids"))
            match = next((p for p in pending if p[0] in wanted), pending[0])
            pending.remove(match)
            yield s.unit("tool", "tool_result", content, tool_name=match[1], call_id=match[0])
        else:
            extra = {"is_demo": True} if m.get("is_demo") else {}
            yield s.unit("user" if role == "tool" else role, "text", content, extra=extra)


def _ids(value: Any) -> set[str]:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return {value}
    return {v for v in value if isinstance(v, str)} if isinstance(value, list) else set()


READER = SweAgentReader()
