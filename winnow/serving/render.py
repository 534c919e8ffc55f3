"""Render units as provider requests: Anthropic Messages and OpenAI chat completions.

    body = to_anthropic(units, breakpoints=[(41, "1h"), (97, "5m")])   # {"system", "messages"}
    body = to_openai(units)                                              # {"messages"}

Rendering is deterministic and prefix-stable: the blocks of the units before a point where no
tool pair is open do not depend on what follows, and no unit id, session id or timestamp is
written (`scrub=True` also masks timestamps inside texts). What the
APIs require is repaired on the way: consecutive same-role units share one message, a tool
result sits in the message right after its call (results first), a call without a result gets
a placeholder result, a result without its call becomes text, thinking becomes text (a
replayed thinking block would need its signature), empty text is skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from winnow.data.schema import Unit

MAX_BREAKPOINTS = 4  # Anthropic accepts at most four cache_control blocks per request
TTLS = ("1h", "5m")  # longer-lived entries must come first
NO_RESULT = "[no result recorded]"
EMPTY_RESULT = "(no output)"

_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_TIMESTAMP = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?\b"
)


def min_cacheable_tokens(model: str) -> int:
    """The shortest prefix a model caches: 2048 tokens for Haiku, 1024 for Sonnet and Opus."""
    return 2048 if "haiku" in model.lower() else 1024


def scrub_volatile(text: str) -> str:
    """Replace timestamps, which change from run to run, with a fixed marker."""
    return _TIMESTAMP.sub("<time>", text)


@dataclass
class _Block:
    type: str  # text | tool_use | tool_result
    text: str = ""
    id: str = ""
    name: str = ""
    is_error: bool = False
    unit: int = -1  # position of the unit it came from
    ttl: str | None = None  # cache breakpoint on this block


@dataclass
class _Msg:
    role: str  # system | user | assistant
    blocks: list[_Block] = field(default_factory=list)


def to_anthropic(
    units: Sequence[Unit],
    breakpoints: Sequence[tuple[int, str]] = (),
    *,
    scrub: bool = False,
    tools: bool | Sequence[dict[str, Any]] = False,
) -> dict[str, Any]:
    """An Anthropic Messages request body (`system`, `messages`), with `cache_control` on the
    blocks of the units named by `breakpoints` ((unit position, ttl) pairs, ttl "1h" or "5m").

    The API wants `tools` defined when messages hold tool blocks: pass your agent's own (they
    sit first in the cached prefix, so keep them fixed), or True for permissive stubs of the
    tools the units name.
    """
    msgs = _messages(units, breakpoints, scrub)
    body: dict[str, Any] = {}
    if tools is True:
        tools = [
            {
                "name": n,
                "description": "replayed from a transcript",
                "input_schema": {"type": "object"},
            }
            for n in _tool_names(msgs)
        ]
    if tools:
        body["tools"] = list(tools)
    if msgs and msgs[0].role == "system":
        body["system"] = [_anthropic_block(b) for b in msgs.pop(0).blocks]
    if msgs and msgs[0].role != "user":
        msgs.insert(0, _Msg("user", [_Block("text", "(continued)")]))
    body["messages"] = [
        {"role": m.role, "content": [_anthropic_block(b) for b in m.blocks]} for m in msgs
    ]
    return body


def to_openai(
    units: Sequence[Unit], *, scrub: bool = False, tools: bool | Sequence[dict[str, Any]] = False
) -> dict[str, Any]:
    """An OpenAI chat-completions request body (`messages`, with `tool_calls` and `tool` turns);
    `tools` as for `to_anthropic`."""
    msgs = _messages(units, (), scrub)
    out: list[dict[str, Any]] = []
    body: dict[str, Any] = {"messages": out}
    if tools is True:
        tools = [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
            for n in _tool_names(msgs)
        ]
    if tools:
        body["tools"] = list(tools)
    for m in msgs:
        texts = "\n\n".join(b.text for b in m.blocks if b.type == "text")
        if m.role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": texts or None}
            calls = [b for b in m.blocks if b.type == "tool_use"]
            if calls:
                msg["tool_calls"] = [
                    {
                        "id": b.id,
                        "type": "function",
                        "function": {"name": b.name, "arguments": _arguments(b.text)},
                    }
                    for b in calls
                ]
            out.append(msg)
            continue
        for b in m.blocks:  # the results come first (see _repair), then the text
            if b.type == "tool_result":
                out.append({"role": "tool", "tool_call_id": b.id, "content": b.text})
        if texts:
            out.append({"role": m.role, "content": texts})
    return body


# --- the shared intermediate form ------------------------------------------------------------


def _messages(
    units: Sequence[Unit], breakpoints: Sequence[tuple[int, str]], scrub: bool
) -> list[_Msg]:
    ttl_at = _check_breakpoints(breakpoints)
    msgs: list[_Msg] = []
    leading_system = True
    for pos, u in enumerate(units):
        text = scrub_volatile(u.text) if scrub else u.text
        if u.role == "system" and leading_system:
            role = "system"
        else:
            leading_system = False
            role = "assistant" if u.role == "assistant" else "user"
            if u.role == "system":
                text = f"[system] {text}"
        block = _block(u, text, pos)
        if block is None:
            continue
        if msgs and msgs[-1].role == role:
            msgs[-1].blocks.append(block)
        else:
            msgs.append(_Msg(role, [block]))
    _repair(msgs)
    _place_breakpoints(msgs, ttl_at)
    return msgs


def _block(u: Unit, text: str, pos: int) -> _Block | None:
    if u.kind == "tool_call" and u.role == "assistant":
        return _Block("tool_use", text, _call_id(u, pos), _tool_name(u.tool_name), unit=pos)
    if u.kind == "tool_result":
        return _Block(
            "tool_result",
            text if text.strip() else EMPTY_RESULT,
            _call_id(u, pos),
            _tool_name(u.tool_name),
            bool(u.is_error),
            pos,
        )
    if not text.strip():
        return None  # the APIs reject empty text blocks
    return _Block("text", f"[thinking] {text}" if u.kind == "thinking" else text, unit=pos)


def _repair(msgs: list[_Msg]) -> None:
    """Each assistant message's calls answered first thing in the next user message."""
    i = 0
    while i < len(msgs):
        m = msgs[i]
        if m.role == "assistant":
            calls = [b for b in m.blocks if b.type == "tool_use"]
            if calls and (i + 1 == len(msgs) or msgs[i + 1].role != "user"):
                msgs.insert(i + 1, _Msg("user"))
            if calls:
                nxt = msgs[i + 1]
                results = {b.id: b for b in nxt.blocks if b.type == "tool_result"}
                answered = [
                    results.pop(c.id, None)
                    or _Block("tool_result", NO_RESULT, c.id, c.name, unit=c.unit)
                    for c in calls
                ]
                rest = [b for b in nxt.blocks if b.type != "tool_result" or b.id in results]
                nxt.blocks = answered + [
                    _as_text(b) if b.type == "tool_result" else b for b in rest
                ]
                i += 1
        elif m.role == "user":
            m.blocks = [_as_text(b) if b.type == "tool_result" else b for b in m.blocks]
        i += 1


def _as_text(b: _Block) -> _Block:
    """A result whose call is not right before it, as text (an orphan result is rejected)."""
    return _Block("text", f"[{b.name} result] {b.text}", unit=b.unit, ttl=b.ttl)


def _tool_names(msgs: list[_Msg]) -> list[str]:
    return sorted({b.name for m in msgs for b in m.blocks if b.type == "tool_use"})


def _check_breakpoints(breakpoints: Sequence[tuple[int, str]]) -> dict[int, str]:
    if len(breakpoints) > MAX_BREAKPOINTS:
        raise ValueError(f"at most {MAX_BREAKPOINTS} cache breakpoints, got {len(breakpoints)}")
    ordered = sorted(breakpoints)
    for _p, ttl in ordered:
        if ttl not in TTLS:
            raise ValueError(f"cache ttl must be one of {TTLS}, got {ttl!r}")
    ttls = [TTLS.index(ttl) for _p, ttl in ordered]
    if ttls != sorted(ttls):
        raise ValueError("a 1h cache breakpoint cannot come after a 5m one")
    return dict(ordered)


def _place_breakpoints(msgs: list[_Msg], ttl_at: dict[int, str]) -> None:
    """Mark the last block of each breakpoint's unit (or the last block before it, if skipped)."""
    for pos, ttl in ttl_at.items():
        target = None
        for m in msgs:
            for b in m.blocks:
                # the unit's own block, not a stand-in result placed after it (which moves
                # when later units join that message)
                if 0 <= b.unit <= pos and (target is None or b.unit > target.unit):
                    target = b
        if target is not None and target.ttl is None:  # two on one block: the longer, earlier one
            target.ttl = ttl


def _anthropic_block(b: _Block) -> dict[str, Any]:
    if b.type == "tool_use":
        d: dict[str, Any] = {
            "type": "tool_use",
            "id": b.id,
            "name": b.name,
            "input": _input(b.text),
        }
    elif b.type == "tool_result":
        d = {"type": "tool_result", "tool_use_id": b.id, "content": b.text}
        if b.is_error:
            d["is_error"] = True
    else:
        d = {"type": "text", "text": b.text}
    if b.ttl:
        d["cache_control"] = {"type": "ephemeral", "ttl": b.ttl}
    return d


def _input(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python recurses
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}


def _arguments(text: str) -> str:
    return json.dumps(_input(text), ensure_ascii=False, separators=(",", ":"))


def _call_id(u: Unit, pos: int) -> str:
    # The APIs want [A-Za-z0-9_-]; the source's own id is stable, so keep what is valid of it.
    return _ID_CHARS.sub("_", u.call_id)[:64] if u.call_id else f"call_{pos}"


def _tool_name(name: str | None) -> str:
    return _ID_CHARS.sub("_", name or "tool")[:64]


__all__ = ["MAX_BREAKPOINTS", "min_cacheable_tokens", "scrub_volatile", "to_anthropic", "to_openai"]
