"""Render units as provider requests: Anthropic Messages and OpenAI chat completions.

    body = to_anthropic(units, breakpoints=[(41, "1h"), (97, "5m")])
    body = to_openai(units)

Units read from a request body of the same provider (`winnow.data.parse`, the readers) come
back as that very request: each unit left unchanged (no `extra["strategy"]`) is written as its
original block (`extra["raw"]`), blocks stay in their messages, and every other field of the
request and of its messages (model, max_tokens, thinking, tools, metadata, a message's `name`,
the `developer` role, ...) is written back as it was, in its order. A body that needs no
change comes out JSON-equal to the input.

Units without their block (from agent transcripts, or rewritten by the compressor) are built
into blocks: consecutive same-role units share one message, a call's input becomes the tool's
input, a transcript's thinking becomes `[thinking] ...` text. A provider's thinking block is
never sent as text: a rewritten one is left out (the compressor keeps them whole or drops
them; the thinking of the turn a request's final tool results answer is put back, as the API
requires). What the APIs require is repaired only where it is broken, so a valid request passes
as it is: a tool result sits first in the turn right after its call (a call without one gets
a placeholder result; a result without its call becomes a note marked as a tool note, never
user text), a server tool's use and result stay together in their turn (or both become
notes), duplicate call ids are made unique, empty text is skipped. An OpenAI call and its result
are written in one style: OpenAI's legacy `function_call` and `function` message when either
came so (an unanswered legacy call is valid as it is), else `tool_calls` and `tool` messages;
a request that declares `functions` gets no `tools` list beside them.

Rendering is deterministic and prefix-stable: the blocks of the units before a point where no
tool pair is open do not depend on what follows; `scrub=True` masks timestamps in the texts
winnow writes (never in a block kept as it was).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from winnow.data.schema import Unit

log = logging.getLogger(__name__)

MAX_BREAKPOINTS = 4  # Anthropic accepts at most four cache_control blocks per request
TTLS = ("1h", "5m")  # longer-lived entries must come first
NO_RESULT = "[no result recorded]"
CONTINUED = "(continued)"  # the user turn put first when the Messages API wants one
EMPTY_RESULT = "(no output)"
DEFAULT_MAX_TOKENS = 8192  # for a request built from a transcript, which names none
ANTHROPIC = "anthropic_messages"
OPENAI = "openai_chat"

_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_TIMESTAMP = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?\b"
)
# A provider's thinking blocks (which cannot carry cache_control either: the API rejects it).
_THINKING = frozenset({"thinking", "redacted_thinking"})

# --- cache minimums ------------------------------------------------------------------------
# The shortest prompt prefix each Claude model caches: a breakpoint placed before it is
# silently not cached. From Anthropic's prompt-caching documentation (platform.claude.com/docs/
# en/build-with-claude/prompt-caching), checked 2026-12-01: 1,024 tokens for Claude Opus 4.8,
# Sonnet 4.6 / 4.5 / 4 / 3.7, Opus 4.1 / 4 (and the retired Sonnet 3.5 and Opus 3); 4,096 for
# Opus 4.7 / 4.6 / 4.5 and Haiku 4.5; 2,048 for Haiku 3.5 / 3.
CACHE_MINIMUMS: dict[tuple[str, int, int], int] = {
    ("opus", 4, 8): 1024,
    ("opus", 4, 7): 4096,
    ("opus", 4, 6): 4096,
    ("opus", 4, 5): 4096,
    ("opus", 4, 1): 1024,
    ("opus", 4, 0): 1024,
    ("opus", 3, 0): 1024,
    ("sonnet", 4, 6): 1024,
    ("sonnet", 4, 5): 1024,
    ("sonnet", 4, 0): 1024,
    ("sonnet", 3, 7): 1024,
    ("sonnet", 3, 5): 1024,
    ("haiku", 4, 5): 4096,
    ("haiku", 3, 5): 2048,
    ("haiku", 3, 0): 2048,
}
# OpenAI caches every prompt from 1,024 tokens on, whatever the model (platform.openai.com/docs/
# guides/prompt-caching, checked 2026-12-01): no cache_control, so no table.
OPENAI_MIN_CACHEABLE = 1024
# An unknown model: the largest documented minimum, so no breakpoint is wasted where it
# cannot cache (one too few costs a cache write; one too early costs a breakpoint for nothing).
UNKNOWN_MODEL_MIN = 4096
# claude-opus-4-5-20251101, claude-3-5-haiku-latest, anthropic.claude-sonnet-4-6-v1:0,
# claude-opus-4-1@20250805, anthropic/claude-opus-4.6
_MODEL = re.compile(
    r"claude-(?:(?P<major>\d)(?:-(?P<minor>\d)(?!\d))?-(?P<family>opus|sonnet|haiku)"
    r"|(?P<family2>opus|sonnet|haiku)-(?P<major2>\d)(?:-(?P<minor2>\d)(?!\d))?)"
)
_warned: set[str] = set()
_media_warned: set[tuple[str, str]] = set()  # (unit id, target): said once, counts render often


def model_key(model: str) -> tuple[str, int, int] | None:
    """(family, major, minor) of a Claude model id, or None."""
    m = _MODEL.search(model.lower().replace(".", "-"))
    if m is None:
        return None
    family = m["family"] or m["family2"]
    major = int(m["major"] or m["major2"])
    minor = int(m["minor"] or m["minor2"] or 0)
    return family, major, minor


def min_cacheable_tokens(model: str) -> int:
    """The shortest prompt prefix `model` caches (see CACHE_MINIMUMS); for a model the table
    does not know, a one-line warning and the largest documented minimum."""
    key = model_key(model)
    if key is not None and key in CACHE_MINIMUMS:
        return CACHE_MINIMUMS[key]
    if model not in _warned:
        _warned.add(model)
        log.warning(
            "unknown model %r: its minimum cacheable prompt length is not in winnow's table; "
            "assuming %d tokens",
            model,
            UNKNOWN_MODEL_MIN,
        )
    return UNKNOWN_MODEL_MIN


def scrub_volatile(text: str) -> str:
    """Replace timestamps, which change from run to run, with a fixed marker."""
    return _TIMESTAMP.sub("<time>", text)


# --- the shared intermediate form ------------------------------------------------------------

_NONE = object()


@dataclass
class _Block:
    kind: (
        str  # text | thinking | tool_use | tool_result | server_use | server_result | field | other
    )
    text: str = ""
    id: str = ""
    name: str = ""
    is_error: bool = False
    unit: int = -1  # position of the unit it came from
    ttl: str | None = None  # cache breakpoint on this block
    raw: Any = _NONE  # the provider's own block, written back unchanged
    u: Unit | None = None
    note: bool = False  # a stand-in winnow wrote (placeholder, tool note)
    legacy: bool = False  # OpenAI's legacy `function_call` / `function` message

    @property
    def native(self) -> bool:
        return self.raw is not _NONE


@dataclass
class _Msg:
    role: str  # system | user | assistant
    blocks: list[_Block] = field(default_factory=list)
    key: Any = None  # the input message it stands for (native units), else None
    shell: dict[str, Any] | None = None  # that message's own fields, in order
    whole: bool = False  # its content was one string (or empty), written back as such
    fields: Sequence[str] | None = None  # the shell's fields its units stood for


def _native(u: Unit, fmt: str) -> bool:
    return u.extra.get("format") == fmt


def _has_raw(u: Unit, fmt: str) -> bool:
    return _native(u, fmt) and "raw" in u.extra and not u.extra.get("strategy")


def _request(units: Sequence[Unit], fmt: str) -> dict[str, Any] | None:
    """The request's own fields: the latest unit's (units memoized from an earlier request of a
    growing conversation may carry that one's)."""
    for u in reversed(units):
        if _native(u, fmt) and isinstance(u.extra.get("request"), dict):
            return u.extra["request"]
    return None


def _msg_role(u: Unit, fmt: str) -> str:
    """The role of the input message a native unit came from."""
    shell = u.extra.get("shell")
    role = shell.get("role") if isinstance(shell, dict) else None
    if role in ("system", "developer"):
        return "system"
    if role in ("user", "assistant"):
        return role
    if role in ("tool", "function"):
        return "user"
    if u.role == "tool":  # an Anthropic server tool's result sits in the assistant turn
        return "assistant" if u.extra.get("block_type", "tool_result") != "tool_result" else "user"
    return u.role if u.role in ("system", "user", "assistant") else "user"


def _messages(units: Sequence[Unit], fmt: str, scrub: bool) -> tuple[list[_Block], list[_Msg]]:
    """(top-level system blocks, messages) of the units, grouped as in the input."""
    system: list[_Block] = []
    msgs: list[_Msg] = []
    leading = True
    for pos, u in enumerate(units):
        native = _native(u, fmt)
        if native and u.extra.get("system"):  # Anthropic's top-level system prompt
            b = _block(u, pos, fmt, scrub)
            if b is not None:
                system.append(b)
            continue
        if native and "msg" in u.extra:
            role, key = _msg_role(u, fmt), ("msg", u.extra["msg"])
            leading = leading and role == "system"
        elif u.role == "system" and leading and not native:
            system.append(_block(u, pos, fmt, scrub) or _Block("text", "", unit=pos))
            continue
        else:
            leading = False
            role, key = ("assistant" if u.role == "assistant" else "user"), None
        b = _block(u, pos, fmt, scrub, as_user_text=role == "user" and u.role == "system")
        if b is None:
            continue
        prev_shell = msgs[-1].shell if msgs else None
        answers = isinstance(prev_shell, dict) and prev_shell.get("role") in ("tool", "function")
        if msgs and msgs[-1].role == role and (key is None or msgs[-1].key == key):
            # a unit of winnow's joins the message before it, unless that message is an OpenAI
            # tool (function) message: it can hold only its call's result
            if key is not None or not answers:
                msgs[-1].blocks.append(b)
                continue
        shell = u.extra.get("shell") if native and isinstance(u.extra.get("shell"), dict) else None
        whole = native and u.extra.get("block", 0) is None
        fields = u.extra.get("unit_fields") if shell is not None else None
        msgs.append(_Msg(role, [b], key, shell, whole, fields))
    system = [b for b in system if b.native or b.text.strip()]
    return system, msgs


def _block(u: Unit, pos: int, fmt: str, scrub: bool, as_user_text: bool = False) -> _Block | None:
    """The block a unit becomes; None when there is nothing to send."""
    native = _native(u, fmt)
    legacy = native and fmt == OPENAI and _legacy(u)
    if _has_raw(u, fmt):
        raw = u.extra["raw"]
        kind = _raw_kind(raw, u, fmt)
        return _Block(
            kind,
            u.text,
            # a legacy call has no id of its own: the reader's, made valid, on both sides
            _call_id(u, pos) if legacy else _raw_id(raw, u, kind),
            u.tool_name or "",
            bool(u.is_error),
            pos,
            raw=raw,
            u=u,
            legacy=legacy,
        )
    text = scrub_volatile(u.text) if scrub else u.text
    if "raw" in u.extra and u.extra.get("media_tokens") and not native:
        _warn_media(u, fmt)
    if u.kind == "thinking":
        if native or (u.extra.get("format") in (ANTHROPIC, OPENAI)):
            # a provider's (signed) thinking block, rewritten or for the other provider:
            # never sent as text
            log.warning("thinking unit %s left out: a provider's thinking is never text", u.id)
            return None
        text = f"[thinking] {text}" if text.strip() else ""
    block_type = u.extra.get("block_type", "") if native else ""
    server = block_type.startswith(("server_tool_use", "mcp_tool_use")) or (
        u.kind == "tool_result" and block_type not in ("", "tool_result")
    )
    if u.kind == "tool_call" and u.role == "assistant" and not server:
        name = _tool_name(u.tool_name)
        return _Block("tool_use", text, _call_id(u, pos), name, unit=pos, u=u, legacy=legacy)
    if u.kind == "tool_result" and not server:
        return _Block(
            "tool_result",
            text if text.strip() else EMPTY_RESULT,
            _call_id(u, pos),
            _tool_name(u.tool_name),
            bool(u.is_error),
            pos,
            u=u,
            legacy=legacy,
        )
    if server:  # a server tool's use or result that changed: it can only be a note now
        what = "call" if u.kind == "tool_call" else "result"
        text = f"[{u.tool_name or block_type} {what}] {text}"
        return _Block("text", text, unit=pos, u=u, note=True)
    if not text.strip():
        return None  # the APIs reject empty text blocks
    if as_user_text:
        text = f"[system] {text}"
    return _Block("text", text, unit=pos, u=u)


def _warn_media(u: Unit, fmt: str) -> None:
    """Once per unit and target: a media block of the other API goes out as its text note."""
    key = (u.id, fmt)
    if key in _media_warned:
        return
    if len(_media_warned) >= 65536:
        _media_warned.clear()
    _media_warned.add(key)
    kind = u.extra.get("block_type") or "media"
    log.warning("unit %s: a %s block has no %s form: sent as the text %r", u.id, kind, fmt, u.text)


def _legacy(u: Unit) -> bool:
    """An OpenAI unit of the legacy function calling: a `function_call` or a `function`
    message (native units only)."""
    shell = u.extra.get("shell")
    role = shell.get("role") if isinstance(shell, dict) else None
    return u.extra.get("field") == "function_call" or (
        u.kind == "tool_result" and role == "function"
    )


def _raw_kind(raw: Any, u: Unit, fmt: str) -> str:
    if fmt == OPENAI:
        f = u.extra.get("field", "content")
        if f in ("tool_calls", "function_call"):
            return "tool_use"
        if u.kind == "tool_result":
            return "tool_result"
        if f == "empty":  # a message with no content at all: the unit only keeps it
            return "empty"
        return "field" if f != "content" else "other"
    t = raw.get("type") if isinstance(raw, dict) else None
    if t == "tool_use":
        return "tool_use"
    if t == "tool_result":
        return "tool_result"
    if t in ("server_tool_use", "mcp_tool_use"):
        return "server_use"
    if isinstance(t, str) and t.endswith("_tool_result"):
        return "server_result"
    if t in _THINKING:
        return "thinking"
    return "text" if t == "text" else "other"


def _raw_id(raw: Any, u: Unit, kind: str) -> str:
    if isinstance(raw, dict):
        if kind in ("tool_use", "server_use") and isinstance(raw.get("id"), str):
            return raw["id"]
        if kind in ("tool_result", "server_result") and isinstance(raw.get("tool_use_id"), str):
            return raw["tool_use_id"]
    return u.call_id or ""


# --- repairs: a no-op on a valid request ------------------------------------------------------


def _turns(msgs: list[_Msg], merge_assistant: bool) -> list[list[_Msg]]:
    """Runs of consecutive same-role messages: the API reads each run as one turn."""
    turns: list[list[_Msg]] = []
    for m in msgs:
        if (
            turns
            and turns[-1][0].role == m.role
            and m.role != "system"
            and (m.role == "user" or merge_assistant)
        ):
            turns[-1].append(m)
        else:
            turns.append([m])
    return turns


def _repair(msgs: list[_Msg], merge_assistant: bool) -> list[_Msg]:
    """Each turn's client tool calls answered first thing in the next turn (placeholders for
    missing results); results without their call become tool notes; server tool pairs whole;
    duplicate call ids renamed. Messages left empty are removed."""
    _unique_ids(msgs)
    turns = _turns(msgs, merge_assistant)
    out: list[_Msg] = []
    t = 0
    while t < len(turns):
        turn = turns[t]
        role = turn[0].role
        if role == "assistant":
            for m in turn:
                _server_pairs(m, last=t == len(turns) - 1)
            calls = [b for m in turn for b in m.blocks if b.kind == "tool_use"]
            out.extend(turn)
            if calls:
                nxt = (
                    turns[t + 1] if t + 1 < len(turns) and turns[t + 1][0].role == "user" else None
                )
                if nxt is None:
                    nxt = [_Msg("user")]
                    turns.insert(t + 1, nxt)
                _answer(nxt, calls)
                out.extend(nxt)
                t += 2
                continue
        elif role == "user":
            _answer(turn, [])
            out.extend(turn)
        else:
            out.extend(turn)
        t += 1
    return [m for m in out if m.blocks]


def _answer(turn: list[_Msg], calls: list[_Block]) -> None:
    """Make `turn` start with exactly the results of `calls` (valid input is left alone). A
    legacy `function_call` without its `function` message stays unanswered, as the API
    accepts it."""
    blocks = [b for m in turn for b in m.blocks]
    results = [b for b in blocks if b.kind == "tool_result"]
    answered_ids = {b.id for b in results}
    calls = [c for c in calls if not c.legacy or c.id in answered_ids]
    ids = [c.id for c in calls]
    lead = 0
    while lead < len(blocks) and blocks[lead].kind == "tool_result":
        lead += 1
    if lead == len(results) and len(set(ids)) == len(ids):
        got = [b.id for b in results]
        # the API takes a turn's results in any order; winnow's own go in call order
        if got == ids or (sorted(got) == sorted(ids) and all(b.native for b in results)):
            return
    chosen: dict[str, _Block] = {}
    for b in results:
        if b.id in ids and b.id not in chosen:
            chosen[b.id] = b
    answered = [
        chosen.get(c.id)
        or _Block("tool_result", NO_RESULT, c.id, c.name, unit=c.unit, note=True, legacy=c.legacy)
        for c in calls
    ]
    kept = set(map(id, answered))
    for m in turn:
        m.blocks = [
            _as_note(b) if b.kind == "tool_result" else b
            for b in m.blocks
            if not (b.kind == "tool_result" and id(b) in kept)
        ]
    turn[0].blocks = answered + turn[0].blocks


def _as_note(b: _Block) -> _Block:
    """A result whose call is not in this context: a note that says so (an orphan result is
    rejected by the APIs, and it must not read as something the user wrote)."""
    name = b.name or (b.u.tool_name if b.u else "") or "tool"
    return _Block(
        "text",
        f"[tool note: result of a {name} call no longer in this context]\n{b.text}",
        unit=b.unit,
        ttl=b.ttl,
        u=b.u,
        note=True,
    )


def _server_pairs(m: _Msg, last: bool) -> None:
    """A server tool's use and result stay together (both kept) or become notes together."""
    uses = {b.id: b for b in m.blocks if b.kind == "server_use"}
    results = {b.id: b for b in m.blocks if b.kind == "server_result"}
    for i, b in enumerate(m.blocks):
        partner = (results if b.kind == "server_use" else uses).get(b.id)
        if b.kind == "server_use" and partner is None and last and i == len(m.blocks) - 1:
            continue  # a paused turn ends on its server tool's use
        if b.kind in ("server_use", "server_result") and (partner is None or not partner.native):
            what = "call" if b.kind == "server_use" else "result"
            m.blocks[i] = _Block(
                "text",
                f"[{b.name or 'server tool'} {what}] {b.text}",
                unit=b.unit,
                u=b.u,
                note=True,
            )


def _unique_ids(msgs: list[_Msg]) -> None:
    """A call id used twice: the later call (and the first result after it that answers it)
    gets `<id>_2`, `_3`, ...: deterministic, and never two calls with one id."""
    seen: dict[str, int] = {}
    pending: dict[str, str] = {}  # old id -> new id, for the next result
    for m in msgs:
        for i, b in enumerate(m.blocks):
            if b.kind in ("tool_use", "server_use"):
                if b.id in seen:
                    seen[b.id] += 1
                    suffix = f"_{seen[b.id]}"  # within the 64 characters the APIs take
                    new = b.id[: 64 - len(suffix)] + suffix
                    log.warning("duplicate tool call id %r renamed %r", b.id, new)
                    pending[b.id] = new
                    m.blocks[i] = _renamed(b, new)
                else:
                    seen[b.id] = 1
            elif b.kind in ("tool_result", "server_result") and b.id in pending:
                m.blocks[i] = _renamed(b, pending.pop(b.id))


def _renamed(b: _Block, new: str) -> _Block:
    raw = b.raw
    if isinstance(raw, dict):  # a copy: the caller's block is never changed
        raw = dict(raw)
        if "id" in raw and b.kind in ("tool_use", "server_use"):
            raw["id"] = new
        if "tool_use_id" in raw:
            raw["tool_use_id"] = new
        if "tool_call_id" in raw:
            raw["tool_call_id"] = new
    return replace(b, id=new, raw=raw)


# --- Anthropic ---------------------------------------------------------------------------------


def to_anthropic(
    units: Sequence[Unit],
    breakpoints: Sequence[tuple[int, str]] = (),
    *,
    scrub: bool = False,
    tools: bool | Sequence[dict[str, Any]] = False,
    model: str | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """An Anthropic Messages request body, with `cache_control` on the blocks of the units
    named by `breakpoints` ((unit position, ttl) pairs, ttl "1h" or "5m"; fewer when the
    request's own cache_control blocks leave no room).

    Units read from an Anthropic request come back as that request (see the module
    docstring). For other units, `model` and `max_tokens` (default DEFAULT_MAX_TOKENS when a
    model is given) start the body, and `tools` gives the tool definitions the API wants when
    messages hold tool blocks: your agent's own (they sit first in the cached prefix, so keep
    them fixed), or True for permissive stubs of the tools the units name.
    """
    ttl_at = _check_breakpoints(breakpoints)
    request = _request(units, ANTHROPIC)
    system, msgs = _messages(units, ANTHROPIC, scrub)
    msgs = _repair(msgs, merge_assistant=True)
    _restore_thinking(msgs)
    _no_bare_thinking(msgs, request)
    if msgs and msgs[0].role != "user" and not (msgs[0].key == ("msg", 0)):
        msgs.insert(0, _Msg("user", [_Block("text", CONTINUED, note=True)]))
    tool_defs = request.get("tools") if request else None
    used = sorted({b.name for m in msgs for b in m.blocks if b.kind == "tool_use"})
    if tools is True and not tool_defs:
        stub = {"description": "replayed from a transcript", "input_schema": {"type": "object"}}
        tools = _tool_definitions(units, ANTHROPIC, used, lambda n: {"name": n, **stub})
    if ttl_at:
        _place_breakpoints(system, msgs, ttl_at, _existing_marks(request, system, msgs))
    body_system = _anthropic_system(system)
    body_messages = [_anthropic_message(m) for m in msgs]
    body: dict[str, Any] = {}
    if request is not None:
        for k, v in request.items():
            if k == "messages":
                body[k] = body_messages
            elif k == "system":
                if body_system is not None:
                    body[k] = body_system
                elif v is not None:
                    body[k] = v  # an empty system prompt, as it was
            else:
                body[k] = v
        if body_system is not None and "system" not in body:
            body["system"] = body_system
        if tools and tools is not True and not tool_defs:
            body["tools"] = list(tools)
        return body
    body = {}  # a request built from units alone
    if model:
        body["model"] = model
        body["max_tokens"] = max_tokens or DEFAULT_MAX_TOKENS
    elif max_tokens:
        body["max_tokens"] = max_tokens
    if tools and tools is not True:
        body["tools"] = list(tools)
    if body_system is not None:
        body["system"] = body_system
    body["messages"] = body_messages
    return body


def _restore_thinking(msgs: list[_Msg]) -> None:
    """The assistant message a request's final tool results answer starts with its thinking
    blocks, unchanged: the API rejects the request otherwise. Its tool calls carry them
    (`turn_thinking`), so they come back even when the compressor dropped them."""
    if len(msgs) < 2 or msgs[-1].role != "user":
        return
    answered = {b.id for b in msgs[-1].blocks if b.kind == "tool_result"}
    m = next((m for m in reversed(msgs) if m.role == "assistant"), None)
    if m is None or not answered & {b.id for b in m.blocks if b.kind == "tool_use"}:
        return
    keep = next(
        (
            b.u.extra["turn_thinking"]
            for b in m.blocks
            if b.kind == "tool_use"
            and b.u is not None
            and isinstance(b.u.extra.get("turn_thinking"), list)
        ),
        None,
    )
    if not keep:
        return
    present = [b for b in m.blocks if b.kind == "thinking"]
    if [b.raw for b in present] == keep and m.blocks[: len(present)] == present:
        return
    log.warning("thinking blocks of the last assistant turn put back (the API wants them)")
    u = next(b.u for b in m.blocks if b.u is not None)
    restored = [_Block("thinking", "", raw=raw, u=u) for raw in keep]
    m.blocks = restored + [b for b in m.blocks if b.kind != "thinking"]


def _no_bare_thinking(msgs: list[_Msg], request: dict[str, Any] | None) -> None:
    """An assistant message may not end with a thinking block (the API answers 400: "The final
    block in an assistant message cannot be `thinking`"). One that compression left so, its
    text and tool calls dropped, loses that thinking whole, as the API allows for older turns;
    a message the request itself sent so is left as it was."""
    original = (request or {}).get("messages")
    for m in msgs:
        if m.role != "assistant" or not m.blocks or m.blocks[-1].kind != "thinking":
            continue
        if _sent_so(original, m.key):
            continue
        while m.blocks and m.blocks[-1].kind == "thinking":
            m.blocks.pop()
        log.info("thinking left without its turn's text and tool calls: dropped whole")
    msgs[:] = [m for m in msgs if m.blocks]


def _sent_so(original: Any, key: Any) -> bool:
    """Whether the request's own message `key` ended with a thinking block."""
    if not (isinstance(original, list) and isinstance(key, tuple) and key[0] == "msg"):
        return False
    i = key[1]
    message = original[i] if isinstance(i, int) and 0 <= i < len(original) else None
    content = message.get("content") if isinstance(message, dict) else None
    last = content[-1] if isinstance(content, list) and content else None
    return isinstance(last, dict) and last.get("type") in _THINKING


def _empty(raw: Any) -> bool:
    return raw is None or (isinstance(raw, (list, str)) and not raw)


def _anthropic_system(system: list[_Block]) -> Any:
    if not system:
        return None
    if (
        len(system) == 1
        and system[0].native
        and isinstance(system[0].raw, str)
        and not system[0].ttl
    ):
        return system[0].raw
    return [_anthropic_block(b) for b in system]


def _anthropic_message(m: _Msg) -> dict[str, Any]:
    if m.whole and len(m.blocks) == 1 and m.blocks[0].native and not m.blocks[0].ttl:
        content: Any = m.blocks[0].raw  # a string content, as it was
    else:  # an empty content ([]) among other blocks adds nothing
        content = [_anthropic_block(b) for b in m.blocks if not (b.native and _empty(b.raw))]
    if m.shell is not None:
        return {k: (content if k == "content" else v) for k, v in m.shell.items()}
    return {"role": m.role, "content": content}


def _anthropic_block(b: _Block) -> Any:
    if b.native and isinstance(b.raw, dict):
        if b.ttl:  # a copy: the caller's block is never changed
            return {**b.raw, "cache_control": {"type": "ephemeral", "ttl": b.ttl}}
        return b.raw
    d: dict[str, Any]
    if b.kind == "tool_use":
        d = {"type": "tool_use", "id": b.id, "name": b.name, "input": _input(b.text)}
    elif b.kind == "tool_result":
        d = {"type": "tool_result", "tool_use_id": b.id, "content": b.text}
        if b.is_error:
            d["is_error"] = True
    else:
        d = {"type": "text", "text": b.raw if b.native else b.text}
    if b.ttl:
        d["cache_control"] = {"type": "ephemeral", "ttl": b.ttl}
    return d


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


def _marks_of(raw: Any) -> list[str]:
    """The ttls of the cache_control marks in a block (and in a tool result's content)."""
    if not isinstance(raw, dict):
        return []
    out = []
    cc = raw.get("cache_control")
    if isinstance(cc, dict):
        out.append(cc.get("ttl", "5m"))
    if raw.get("type") == "tool_result" and isinstance(raw.get("content"), list):
        for part in raw["content"]:
            out += _marks_of(part) if isinstance(part, dict) and "cache_control" in part else []
    return out


def _existing_marks(
    request: dict[str, Any] | None, system: list[_Block], msgs: list[_Msg]
) -> list[tuple[int, str]]:
    """(prompt order, ttl) of the request's own cache_control marks; tools and the request's
    automatic caching come first (order -1)."""
    marks: list[tuple[int, str]] = []
    if request:
        for t in request.get("tools") or ():
            if isinstance(t, dict) and isinstance(t.get("cache_control"), dict):
                marks.append((-1, t["cache_control"].get("ttl", "5m")))
        if isinstance(request.get("cache_control"), dict):
            marks.append((-1, request["cache_control"].get("ttl", "5m")))
    for n, b in enumerate([*system, *(b for m in msgs for b in m.blocks)]):
        if b.native:
            marks += [(n, ttl) for ttl in _marks_of(b.raw)]
    return marks


def _place_breakpoints(
    system: list[_Block],
    msgs: list[_Msg],
    ttl_at: dict[int, str],
    existing: list[tuple[int, str]],
) -> None:
    """Mark the last block of each breakpoint's unit (or the last block before it): the unit's
    own block, not a stand-in placed after it. Only blocks without a mark of their own, only
    as many as the request's own marks leave room for, and never a 1h mark after a 5m one."""
    order = [*system, *(b for m in msgs for b in m.blocks)]
    room = MAX_BREAKPOINTS - len(existing)
    for pos, ttl in ttl_at.items():
        if room <= 0:
            return
        target, at = None, -1
        for n, b in enumerate(order):
            if (
                0 <= b.unit <= pos
                and not b.note
                and _cacheable(b)
                and (target is None or b.unit > target.unit)
            ):
                target, at = b, n
        if target is None or target.ttl is not None or (target.native and _marks_of(target.raw)):
            continue  # two on one block: the longer-lived, earlier one stays
        rank = TTLS.index(ttl)
        marks = existing + [(n, t) for n, b in enumerate(order) if b.ttl for t in (b.ttl,)]
        if any(TTLS.index(t) > rank for n, t in marks if n <= at) or any(
            TTLS.index(t) < rank for n, t in marks if n > at
        ):
            continue
        target.ttl = ttl
        room -= 1


def _cacheable(b: _Block) -> bool:
    """A block that may carry cache_control: not thinking, not empty text."""
    if not b.native:
        return b.kind != "thinking" and bool(b.text.strip())
    if isinstance(b.raw, str):
        return bool(b.raw.strip())
    if not isinstance(b.raw, dict) or b.raw.get("type") in _THINKING:
        return False
    return b.raw.get("type") != "text" or bool(str(b.raw.get("text", "")).strip())


def _input(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}


def _arguments(text: str) -> str:
    return json.dumps(_input(text), ensure_ascii=False, separators=(",", ":"))


def _call_id(u: Unit, pos: int) -> str:
    # The APIs want [A-Za-z0-9_-]{1,64}; the source's own id is stable, so keep what is valid
    # of it. A longer one keeps its start and a hash of the whole: ids alike in their first 64
    # characters (a SpecStory chat's calls, named after its long file name) stay apart.
    if not u.call_id:
        return f"call_{pos}"
    clean = _ID_CHARS.sub("_", u.call_id)
    if len(clean) <= 64:
        return clean
    return f"{clean[:51]}_{hashlib.sha256(u.call_id.encode()).hexdigest()[:12]}"


def _tool_name(name: str | None) -> str:
    return _ID_CHARS.sub("_", name or "tool")[:64]


def _tool_definitions(
    units: Sequence[Unit], fmt: str, used: Sequence[str], stub: Callable[[str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Tool definitions for a request of `fmt` that has none of its own: the function tools
    (and legacy `functions`) of the other API's request the units were read from, translated
    (name, description, JSON schema), then a stub for each tool the units call that it does
    not define."""
    other = _request(units, OPENAI if fmt == ANTHROPIC else ANTHROPIC) or {}
    found: dict[str, dict[str, Any]] = {}
    legacy = [{"type": "function", "function": f} for f in other.get("functions") or ()]
    for t in [*(other.get("tools") or ()), *legacy]:
        if not isinstance(t, dict):
            continue
        f = t.get("function") if t.get("type") == "function" else t  # OpenAI wraps it
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            continue
        schema = f.get("parameters") if f is not t else t.get("input_schema")
        if f is t and t.get("type") not in (None, "custom"):  # an Anthropic server tool
            continue
        name, schema = _tool_name(f["name"]), schema if isinstance(schema, dict) else None
        about = {"description": f["description"]} if isinstance(f.get("description"), str) else {}
        schema = schema or {"type": "object"}
        found[name] = (
            {"name": name, **about, "input_schema": schema}
            if fmt == ANTHROPIC
            else {"type": "function", "function": {"name": name, **about, "parameters": schema}}
        )
    return [*found.values(), *(stub(n) for n in used if n not in found)]


# --- OpenAI ------------------------------------------------------------------------------------


def to_openai(
    units: Sequence[Unit],
    *,
    scrub: bool = False,
    tools: bool | Sequence[dict[str, Any]] = False,
    model: str | None = None,
) -> dict[str, Any]:
    """An OpenAI chat-completions request body (`messages`, with `tool_calls` and `tool`
    turns). Units read from an OpenAI request come back as that request; for others,
    `model` starts the body and `tools` is as for `to_anthropic`."""
    request = _request(units, OPENAI)
    system, msgs = _messages(units, OPENAI, scrub)
    if system:
        msgs.insert(0, _Msg("system", system))
    msgs = _repair(msgs, merge_assistant=False)
    if _one_style(msgs):
        msgs = _repair(msgs, merge_assistant=False)  # a call made new-style wants its result
    out: list[dict[str, Any]] = []
    for m in msgs:
        out.extend(_openai_messages(m))
    # the request's own definitions, new-style or legacy: never a stub list beside them
    tool_defs = (request.get("tools") or request.get("functions")) if request else None
    used = sorted({b.name for m in msgs for b in m.blocks if b.kind == "tool_use"})
    if tools is True and not tool_defs:
        tools = _tool_definitions(
            units,
            OPENAI,
            used,
            lambda n: {
                "type": "function",
                "function": {"name": n, "parameters": {"type": "object"}},
            },
        )
    if request is not None:
        body = {k: (out if k == "messages" else v) for k, v in request.items()}
        if tools and tools is not True and not tool_defs:
            body["tools"] = list(tools)
        return body
    body = {"model": model} if model else {}
    body["messages"] = out
    if tools and tools is not True:
        body["tools"] = list(tools)
    return body


def _one_style(msgs: list[_Msg]) -> bool:
    """Each call and its result in one style: legacy (the message's `function_call`, then a
    `function` message) when either side is legacy, for one call a message (the API takes one
    `function_call` a message); else `tool_calls` and `tool` messages. True when a legacy block
    had to become new-style (its partner may now want a placeholder)."""
    demoted = False
    for i, m in enumerate(msgs):
        calls = [b for b in m.blocks if b.kind == "tool_use"] if m.role == "assistant" else []
        if not calls:
            continue
        ids = {c.id for c in calls}
        results: dict[str, _Block] = {}
        for n in msgs[i + 1 :]:
            if n.role == "assistant":
                break
            for b in n.blocks:
                if b.kind == "tool_result" and b.id in ids:
                    results.setdefault(b.id, b)
        taken = False
        for c in calls:
            r = results.get(c.id)
            legacy = not taken and (c.legacy or (r is not None and r.legacy))
            taken = taken or legacy
            for side in (c, r):
                if side is not None and side.legacy != legacy:
                    demoted = demoted or side.legacy
                    if side.native:
                        log.warning("tool call %s written in the style of its partner", side.id)
                    side.legacy = legacy
    return demoted


def _openai_messages(m: _Msg) -> list[dict[str, Any]]:
    """One intermediate message as OpenAI messages: its tool results as `tool` (`function`)
    messages first, then the message itself."""
    out = [_tool_message(b) for b in m.blocks if b.kind == "tool_result"]
    rest = [b for b in m.blocks if b.kind != "tool_result"]
    if not rest:
        return out
    shell = m.shell
    if shell is not None and shell.get("role") in ("tool", "function"):
        shell = None  # a note in the place of a result whose call went: the user's turn
    role = m.role
    values: dict[str, Any] = {}
    parts = [b for b in rest if b.kind in ("text", "other")]
    calls = [b for b in rest if b.kind == "tool_use"]
    if len(parts) == 1 and parts[0].native and not isinstance(parts[0].raw, dict):
        values["content"] = parts[0].raw  # a string (or empty) content, as it was
    elif parts and not any(b.native for b in parts):
        values["content"] = "\n\n".join(b.text for b in parts)
    elif parts:
        values["content"] = [
            b.raw
            if b.native and isinstance(b.raw, dict)
            else {"type": "text", "text": b.raw if b.native else b.text}
            for b in parts
            if not (b.native and (b.raw is None or isinstance(b.raw, list) or b.raw == ""))
        ]
    elif role == "assistant" and shell is None:
        values["content"] = None
    for b in rest:
        if b.kind == "field" and b.u is not None:  # a native unit's: it has its unit
            values[b.u.extra["field"]] = b.raw
    legacy = [b for b in calls if b.legacy]
    if legacy:
        values["function_call"] = _function_call(legacy[0])
    if len(legacy) < len(calls):
        values["tool_calls"] = [_tool_call(b) for b in calls if not b.legacy]
    if shell is not None:
        # a call field whose units all went is left out (the API rejects an empty list, and a
        # null the request did not send is winnow's); every other field stays, null if emptied
        stood_for = m.fields if m.fields is not None else _CALL_FIELDS
        msg = {}
        for k, v in shell.items():
            if k in values:
                msg[k] = values.pop(k)
            elif not (k in _CALL_FIELDS and v is None and k in stood_for):
                msg[k] = v
        msg.update(values)
    else:
        msg = {"role": role, **values}
        if "content" not in msg:
            msg["content"] = None
    out.append(msg)
    return out


_CALL_FIELDS = ("tool_calls", "function_call")


def _function_call(b: _Block) -> Any:
    """A legacy call: its own `function_call`, or one made from its text."""
    if b.native and isinstance(b.raw, dict) and "id" not in b.raw:
        return b.raw
    return {"name": _tool_name(b.name), "arguments": _arguments(b.text)}


def _tool_call(b: _Block) -> Any:
    """A `tool_calls` entry: its own (renamed when its id was), or one made from the call."""
    if b.native and isinstance(b.raw, dict) and "id" in b.raw:
        return _renamed_call(b)
    arguments = b.raw.get("arguments") if b.native and isinstance(b.raw, dict) else None
    return {
        "id": b.id,
        "type": "function",
        "function": {
            "name": _tool_name(b.name),
            "arguments": arguments if isinstance(arguments, str) else _arguments(b.text),
        },
    }


def _renamed_call(b: _Block) -> Any:
    if isinstance(b.raw, dict) and b.raw.get("id") != b.id and b.id:
        return {**b.raw, "id": b.id}
    return b.raw


def _tool_message(b: _Block) -> dict[str, Any]:
    """A result as a `tool` message, or as a `function` message when legacy: its own message
    when it has one of that role (its content as it was, or its rewritten text)."""
    shell = b.u.extra.get("shell") if b.u is not None and _native(b.u, OPENAI) else None
    role = "function" if b.legacy else "tool"
    if isinstance(shell, dict) and shell.get("role") == role:
        content = b.raw if b.native else b.text
        msg = {k: (content if k == "content" else v) for k, v in shell.items()}
        if "tool_call_id" in msg and b.id:
            msg["tool_call_id"] = b.id
        return msg
    if b.legacy:
        return {"role": "function", "name": _tool_name(b.name), "content": b.text}
    return {"role": "tool", "tool_call_id": b.id, "content": b.text}


__all__ = [
    "CACHE_MINIMUMS",
    "CONTINUED",
    "DEFAULT_MAX_TOKENS",
    "MAX_BREAKPOINTS",
    "OPENAI_MIN_CACHEABLE",
    "min_cacheable_tokens",
    "model_key",
    "scrub_volatile",
    "to_anthropic",
    "to_openai",
]
