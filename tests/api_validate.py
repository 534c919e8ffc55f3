"""Request validation for tests (contract C3): what the provider APIs check before answering.

    problems = validate_anthropic(body)            # [] when the Messages API would accept it
    problems = validate_anthropic(body, original)  # also: the last assistant turn's thinking
    problems = validate_openai(body)               # [] when chat completions would accept it

Each problem is one line naming where it is (`messages.3.content.0: ...`). The rules are the
ones the APIs document or answer with a 400 (tool pairs, role order, non-empty text, at most
four `cache_control` blocks, signed thinking of a tool loop's last assistant turn, known
top-level fields, block types and block fields). The field tables follow the official SDKs'
request types (anthropic 2.15.0, openai 3.57.0, checked 2026-12-01) plus the documented fields
those releases no longer type (Anthropic `temperature`, `top_p`, `top_k`) and the beta fields
(`mcp_servers`, `context_management`, ...); `tests/test_api_validate.py` checks the tables
still cover the installed SDKs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

__all__ = ["validate_anthropic", "validate_openai"]

# --- Anthropic Messages ------------------------------------------------------------------------

ANTHROPIC_TOP = {
    "model",
    "messages",
    "max_tokens",
    "system",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "thinking",
    "tool_choice",
    "tools",
    "service_tier",
    "container",
    "cache_control",
    "output_config",
    "inference_geo",
    "speed",
    "diagnostics",
    "user_profile_id",
    "workspace_id",
    # beta (`client.beta.messages.create`)
    "mcp_servers",
    "context_management",
    "compaction",
    "billing_policy",
    "fallbacks",
    "fallback_credit_token",
    "thread",
}
_CC = "cache_control"
ANTHROPIC_BLOCKS: dict[str, set[str]] = {
    "text": {"text", _CC, "citations"},
    "image": {"source", _CC, "transformations"},
    "document": {"source", _CC, "citations", "context", "title"},
    "search_result": {"content", "source", "title", _CC, "citations"},
    "thinking": {"thinking", "signature"},
    "redacted_thinking": {"data"},
    "tool_use": {"id", "input", "name", _CC, "caller", "toolset_name"},
    "tool_result": {"tool_use_id", _CC, "content", "is_error", "toolset_name"},
    "server_tool_use": {"id", "input", "name", _CC, "caller"},
    "web_search_tool_result": {"content", "tool_use_id", _CC, "caller"},
    "web_fetch_tool_result": {"content", "tool_use_id", _CC, "caller"},
    "code_execution_tool_result": {"content", "tool_use_id", _CC},
    "bash_code_execution_tool_result": {"content", "tool_use_id", _CC},
    "text_editor_code_execution_tool_result": {"content", "tool_use_id", _CC},
    "tool_search_tool_result": {"content", "tool_use_id", _CC},
    "container_upload": {"file_id", _CC},
    # beta: the MCP connector
    "mcp_tool_use": {"id", "input", "name", "server_name", _CC},
    "mcp_tool_result": {"tool_use_id", _CC, "content", "is_error"},
}
# What a tool_result's content list may hold.
TOOL_RESULT_PARTS = {
    "text",
    "image",
    "search_result",
    "document",
    "tool_reference",
    "browser_state",
}
SERVER_USES = {"server_tool_use", "mcp_tool_use"}
SERVER_RESULTS = {t for t in ANTHROPIC_BLOCKS if t.endswith("_tool_result") and t != "tool_result"}
ASSISTANT_ONLY = {"tool_use", "thinking", "redacted_thinking"} | SERVER_USES | SERVER_RESULTS
USER_ONLY = {"tool_result", "container_upload"}
THINKING = ("thinking", "redacted_thinking")
MAX_CACHE_BLOCKS = 4
TTL_ORDER = ("1h", "5m")  # a longer-lived breakpoint may not follow a shorter-lived one
_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def validate_anthropic(body: Any, original: Any = None) -> list[str]:
    """Problems the Messages API would answer with a 400; empty when the body is valid.

    With `original` (the request the body was made from), the thinking blocks of the last
    assistant turn must also be exactly the original's.
    """
    p: list[str] = []
    if not isinstance(body, dict):
        return [f"body is {type(body).__name__}, expected an object"]
    p += [f"{k}: unknown top-level field" for k in body if k not in ANTHROPIC_TOP]
    if not isinstance(body.get("model"), str) or not body.get("model"):
        p.append("model: required string")
    mt = body.get("max_tokens")
    if not isinstance(mt, int) or isinstance(mt, bool) or mt < 0:
        p.append("max_tokens: required non-negative integer")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*p, "messages: required non-empty list"]
    p += _system(body.get("system"))
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        p.append("tools: expected a list")
    for i, m in enumerate(messages):
        p += _message(m, i)
    if p:
        return p  # the order checks below assume well-formed messages
    p += _anthropic_order(messages, body)
    p += _cache_control(body)
    p += _thinking(body, original)
    return p


def _system(system: Any) -> list[str]:
    if system is None or isinstance(system, str):
        return []
    if not isinstance(system, list):
        return ["system: expected a string or a list of text blocks"]
    p = []
    for j, b in enumerate(system):
        where = f"system.{j}"
        if not isinstance(b, dict) or b.get("type") != "text":
            p.append(f"{where}: system blocks must be text blocks")
            continue
        p += _block_fields(b, where)
        if not isinstance(b.get("text"), str) or not b["text"].strip():
            p.append(f"{where}: text content blocks must contain non-whitespace text")
    return p


def _message(m: Any, i: int) -> list[str]:
    where = f"messages.{i}"
    if not isinstance(m, dict):
        return [f"{where}: expected an object"]
    # a system turn may carry its own output_config (beta per-turn-control, Claude Code 2.1.332)
    known = (
        ("role", "content", "output_config") if m.get("role") == "system" else ("role", "content")
    )
    p = [f"{where}.{k}: unknown field" for k in m if k not in known]
    role, content = m.get("role"), m.get("content")
    if role not in ("user", "assistant", "system"):
        return [*p, f"{where}.role: must be user, assistant or system, not {role!r}"]
    if isinstance(content, str):
        if not content.strip() and not (role == "assistant"):
            p.append(f"{where}.content: text content must contain non-whitespace text")
        return p
    if not isinstance(content, list) or not content:
        return [*p, f"{where}.content: expected a string or a non-empty list of blocks"]
    for j, b in enumerate(content):
        bw = f"{where}.content.{j}"
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            p.append(f"{bw}: a block needs a string `type`")
            continue
        t = b["type"]
        if t not in ANTHROPIC_BLOCKS:
            p.append(f"{bw}: unknown block type {t!r}")
            continue
        p += _block_fields(b, bw)
        if role == "system" and t != "text":
            p.append(f"{bw}: a system message holds text blocks only")
        if role == "user" and t in ASSISTANT_ONLY:
            p.append(f"{bw}: {t} blocks belong in assistant messages")
        if role == "assistant" and t in USER_ONLY:
            p.append(f"{bw}: {t} blocks belong in user messages")
        p += _block_content(b, bw)
    types = [b.get("type") if isinstance(b, dict) else None for b in content]
    if role == "assistant" and types[-1] in THINKING:
        p.append(f"{where}: The final block in an assistant message cannot be `thinking`.")
    if role == "assistant" and types[0] not in THINKING and set(types) & set(THINKING):
        p.append(
            f"{where}.content.0: If an assistant message contains any thinking blocks, the first "
            "block must be `thinking` or `redacted_thinking`."
        )
    return p


def _block_fields(b: dict, where: str) -> list[str]:
    allowed = ANTHROPIC_BLOCKS[b["type"]] | {"type"}
    p = [f"{where}.{k}: unknown field for a {b['type']} block" for k in b if k not in allowed]
    cc = b.get(_CC)
    if cc is not None and (
        not isinstance(cc, dict)
        or cc.get("type") != "ephemeral"
        or cc.get("ttl", "5m") not in TTL_ORDER
        or set(cc) - {"type", "ttl"}
    ):
        p.append(f"{where}.cache_control: expected {{type: ephemeral, ttl?: 5m|1h}}")
    return p


def _block_content(b: dict, where: str) -> list[str]:
    t = b["type"]
    p = []
    if t == "text" and (not isinstance(b.get("text"), str) or not b["text"].strip()):
        p.append(f"{where}: text content blocks must contain non-whitespace text")
    elif t == "thinking":
        if not isinstance(b.get("thinking"), str):
            p.append(f"{where}.thinking: required string")
        if not isinstance(b.get("signature"), str) or not b["signature"]:
            p.append(f"{where}.signature: a thinking block must carry its signature")
    elif t == "redacted_thinking" and not isinstance(b.get("data"), str):
        p.append(f"{where}.data: required string")
    elif t in ("tool_use", "server_tool_use", "mcp_tool_use"):
        if not isinstance(b.get("id"), str) or not _ID.match(b["id"]):
            p.append(f"{where}.id: must match ^[a-zA-Z0-9_-]+$")
        if not isinstance(b.get("name"), str) or not b["name"]:
            p.append(f"{where}.name: required string")
        if not isinstance(b.get("input"), dict):
            p.append(f"{where}.input: must be an object")
    elif t == "tool_result" or t in SERVER_RESULTS:
        if not isinstance(b.get("tool_use_id"), str) or not _ID.match(b["tool_use_id"]):
            p.append(f"{where}.tool_use_id: must match ^[a-zA-Z0-9_-]+$")
        if t in ("tool_result", "mcp_tool_result"):
            p += _result_content(b.get("content"), where)
            if "is_error" in b and not isinstance(b["is_error"], bool):
                p.append(f"{where}.is_error: must be a boolean")
        elif "content" not in b:
            p.append(f"{where}.content: required")
    elif t in ("image", "document") and not isinstance(b.get("source"), dict):
        p.append(f"{where}.source: required object")
    elif t == "search_result":
        if not isinstance(b.get("content"), list):
            p.append(f"{where}.content: must be a list of text blocks")
        for k in ("source", "title"):
            if not isinstance(b.get(k), str):
                p.append(f"{where}.{k}: required string")
    return p


def _result_content(content: Any, where: str) -> list[str]:
    if content is None or isinstance(content, str):
        return []
    if not isinstance(content, list):
        return [f"{where}.content: expected a string or a list of blocks"]
    p = []
    for k, part in enumerate(content):
        pw = f"{where}.content.{k}"
        t = part.get("type") if isinstance(part, dict) else None
        if t not in TOOL_RESULT_PARTS:
            p.append(f"{pw}: {t!r} blocks cannot be in a tool result")
        elif t in ANTHROPIC_BLOCKS:
            p += _block_fields(part, pw) + _block_content(part, pw)
    return p


def _turns(messages: list[dict]) -> list[tuple[str, list[dict], list[int]]]:
    """Consecutive same-role messages, combined into one turn as the API does."""
    turns: list[tuple[str, list[dict], list[int]]] = []
    for i, m in enumerate(messages):
        blocks = m["content"] if isinstance(m["content"], list) else [{"type": "text"}]
        if turns and turns[-1][0] == m["role"]:
            turns[-1][1].extend(blocks)
            turns[-1][2].append(i)
        else:
            turns.append((m["role"], list(blocks), [i]))
    return turns


def _anthropic_order(messages: list[dict], body: dict) -> list[str]:
    p = []
    if messages[0]["role"] != "user":
        p.append("messages.0.role: the first message must use the user role")
    turns = _turns(messages)
    ids: set[str] = set()
    client_uses = False
    for n, (role, blocks, at) in enumerate(turns):
        where = f"messages.{at[0]}"
        if role == "system":
            if n == 0 or turns[n - 1][0] != "user":
                p.append(f"{where}: a system message must follow a user message")
            continue
        for b in blocks:
            if b["type"] in ("tool_use", *SERVER_USES):
                if b["id"] in ids:
                    p.append(f"{where}: tool_use ids must be unique: {b['id']!r} repeats")
                ids.add(b["id"])
        if role == "assistant":
            uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
            client_uses = client_uses or bool(uses)
            p += _server_pairs(blocks, where, last=n == len(turns) - 1)
            if uses:
                nxt = turns[n + 1] if n + 1 < len(turns) else None
                answered = (
                    [b.get("tool_use_id") for b in nxt[1] if b["type"] == "tool_result"]
                    if nxt and nxt[0] == "user"
                    else []
                )
                missing = [u for u in uses if u not in answered]
                if missing:
                    p.append(
                        f"{where}: tool_use ids were found without tool_result blocks "
                        f"immediately after: {', '.join(missing)}"
                    )
        else:
            prev = turns[n - 1] if n else None
            prev_uses = (
                {b["id"] for b in prev[1] if b["type"] == "tool_use"}
                if prev and prev[0] == "assistant"
                else set()
            )
            seen_other = False
            for b in blocks:
                if b["type"] != "tool_result":
                    seen_other = True
                    continue
                if b["tool_use_id"] not in prev_uses:
                    p.append(
                        f"{where}: unexpected tool_use_id {b['tool_use_id']!r} in a tool_result: "
                        "each tool_result needs a tool_use in the previous message"
                    )
                if seen_other:
                    p.append(f"{where}: tool_result blocks must come first in a user message")
                    seen_other = False
    if client_uses and not body.get("tools"):
        p.append("tools: requests with tool_use blocks must define tools")
    return p


def _server_pairs(blocks: list[dict], where: str, last: bool) -> list[str]:
    """A server tool's result sits in the same assistant turn, after its use."""
    p = []
    open_uses: dict[str, int] = {}
    for k, b in enumerate(blocks):
        if b["type"] in SERVER_USES:
            open_uses[b["id"]] = k
        elif b["type"] in SERVER_RESULTS:
            if open_uses.pop(b["tool_use_id"], None) is None:
                p.append(
                    f"{where}: {b['type']} for {b['tool_use_id']!r} has no server tool use before it"
                )
    if open_uses and not last:  # a paused turn (stop_reason pause_turn) ends on its use
        p.append(f"{where}: server tool uses without a result: {', '.join(open_uses)}")
    return p


def _cache_blocks(body: dict) -> Iterator[tuple[str, dict]]:
    """(where, cache_control) in prompt order: tools, system, messages (nested results too)."""
    for j, t in enumerate(body.get("tools") or []):
        if isinstance(t, dict) and t.get(_CC):
            yield f"tools.{j}", t[_CC]
    if isinstance(body.get("system"), list):
        for j, b in enumerate(body["system"]):
            if b.get(_CC):
                yield f"system.{j}", b[_CC]
    for i, m in enumerate(body["messages"]):
        if not isinstance(m["content"], list):
            continue
        for j, b in enumerate(m["content"]):
            if b.get(_CC):
                yield f"messages.{i}.content.{j}", b[_CC]
            if b["type"] == "tool_result" and isinstance(b.get("content"), list):
                for k, part in enumerate(b["content"]):
                    if isinstance(part, dict) and part.get(_CC):
                        yield f"messages.{i}.content.{j}.content.{k}", part[_CC]


def _cache_control(body: dict) -> list[str]:
    marks = list(_cache_blocks(body))
    slots = len(marks) + (1 if body.get(_CC) else 0)  # automatic caching takes a slot too
    p = []
    if slots > MAX_CACHE_BLOCKS:
        p.append(
            f"A maximum of {MAX_CACHE_BLOCKS} blocks with cache_control may be provided. "
            f"Found {slots}."
        )
    worst = 0
    for where, cc in marks:
        rank = TTL_ORDER.index(cc.get("ttl", "5m"))
        if rank < worst:
            p.append(f"{where}: a ttl='1h' cache_control block cannot come after a ttl='5m' one")
        worst = max(worst, rank)
    return p


def _last_assistant(messages: list[dict]) -> tuple[int, list[dict]] | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            c = messages[i]["content"]
            return i, c if isinstance(c, list) else []
    return None


def _thinking(body: dict, original: Any) -> list[str]:
    p = []
    messages = body["messages"]
    last = messages[-1]
    in_tool_loop = (
        last["role"] == "user"
        and isinstance(last["content"], list)
        and any(b["type"] == "tool_result" for b in last["content"])
    )
    thinking = body.get("thinking") if isinstance(body.get("thinking"), dict) else {}
    found = _last_assistant(messages)
    if in_tool_loop and thinking.get("type") == "enabled" and found:
        i, blocks = found
        if not blocks or blocks[0]["type"] not in ("thinking", "redacted_thinking"):
            p.append(
                f"messages.{i}.content.0: with thinking enabled, the assistant message of a tool "
                "loop must start with its thinking block"
            )
    if original is not None and isinstance(original, dict) and found and in_tool_loop:
        # the same assistant message in the original: the one holding the same tool calls
        i, blocks = found
        uses = {b.get("id") for b in blocks if b["type"] == "tool_use"}
        kinds = ("thinking", "redacted_thinking")
        for m in original.get("messages") or []:
            content = m.get("content") if isinstance(m, dict) else None
            if m.get("role") != "assistant" or not isinstance(content, list):
                continue
            if uses & {b.get("id") for b in content if isinstance(b, dict)}:
                want = [b for b in content if isinstance(b, dict) and b.get("type") in kinds]
                got = [b for b in blocks if b["type"] in kinds]
                if want and got != want:
                    p.append(
                        f"messages.{i}: the thinking blocks of the assistant turn a tool loop "
                        "answers must be passed back unchanged"
                    )
    return p


# --- OpenAI chat completions -------------------------------------------------------------------

OPENAI_TOP = {
    "messages",
    "model",
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "metadata",
    "modalities",
    "moderation",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
}
OPENAI_MESSAGES: dict[str, set[str]] = {
    "system": {"content", "name"},
    "developer": {"content", "name"},
    "user": {"content", "name"},
    "assistant": {"content", "name", "tool_calls", "function_call", "refusal", "audio"},
    "tool": {"content", "tool_call_id"},
    "function": {"content", "name"},
}
_BREAKPOINT = "prompt_cache_breakpoint"
OPENAI_PARTS: dict[str, set[str]] = {
    "text": {"text", _BREAKPOINT},
    "image_url": {"image_url", _BREAKPOINT},
    "input_audio": {"input_audio", _BREAKPOINT},
    "file": {"file", _BREAKPOINT},
    "refusal": {"refusal"},
}
PARTS_BY_ROLE = {
    "system": {"text"},
    "developer": {"text"},
    "user": {"text", "image_url", "input_audio", "file"},
    "assistant": {"text", "refusal"},
    "tool": {"text"},
}


def validate_openai(body: Any) -> list[str]:
    """Problems chat completions would answer with a 400; empty when the body is valid."""
    if not isinstance(body, dict):
        return [f"body is {type(body).__name__}, expected an object"]
    p = [f"{k}: unknown top-level field" for k in body if k not in OPENAI_TOP]
    if not isinstance(body.get("model"), str) or not body.get("model"):
        p.append("model: required string")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*p, "messages: required non-empty list"]
    for i, m in enumerate(messages):
        p += _openai_message(m, i)
    if p:
        return p
    return _openai_order(messages)


def _openai_message(m: Any, i: int) -> list[str]:
    where = f"messages.{i}"
    if not isinstance(m, dict):
        return [f"{where}: expected an object"]
    role = m.get("role")
    if role not in OPENAI_MESSAGES:
        return [f"{where}.role: unknown role {role!r}"]
    p = [
        f"{where}.{k}: unknown field for a {role} message"
        for k in m
        if k not in OPENAI_MESSAGES[role] | {"role"}
    ]
    content = m.get("content")
    if role == "assistant":
        if content is None and not (
            m.get("tool_calls") or m.get("function_call") or m.get("audio") or m.get("refusal")
        ):
            p.append(f"{where}.content: required unless tool_calls or function_call is given")
        for k, c in enumerate(m.get("tool_calls") or []):
            p += _tool_call(c, f"{where}.tool_calls.{k}")
        if "tool_calls" in m and not isinstance(m["tool_calls"], list):
            p.append(f"{where}.tool_calls: expected a list")
        fc = m.get("function_call")
        if fc is not None and (
            not isinstance(fc, dict) or not isinstance(fc.get("arguments"), str)
        ):
            p.append(f"{where}.function_call: expected {{name, arguments: string}}")
    elif role == "function":
        if not isinstance(m.get("name"), str):
            p.append(f"{where}.name: required string")
    elif "content" not in m or content is None:
        p.append(f"{where}.content: required")
    if role == "tool" and not isinstance(m.get("tool_call_id"), str):
        p.append(f"{where}.tool_call_id: required string")
    if "name" in m and not isinstance(m["name"], str):
        p.append(f"{where}.name: must be a string")
    if isinstance(content, list):
        for k, part in enumerate(content):
            pw = f"{where}.content.{k}"
            t = part.get("type") if isinstance(part, dict) else None
            if t not in OPENAI_PARTS or t not in PARTS_BY_ROLE.get(role, set()):
                p.append(f"{pw}: {t!r} parts are not allowed in a {role} message")
                continue
            p += [
                f"{pw}.{f}: unknown field for a {t} part"
                for f in part
                if f not in OPENAI_PARTS[t] | {"type"}
            ]
            if t == "text" and not isinstance(part.get("text"), str):
                p.append(f"{pw}.text: required string")
            if t == "image_url" and not isinstance((part.get("image_url") or {}).get("url"), str):
                p.append(f"{pw}.image_url.url: required string")
    elif content is not None and not isinstance(content, str):
        p.append(f"{where}.content: expected a string, a list of parts or null")
    return p


def _tool_call(c: Any, where: str) -> list[str]:
    if not isinstance(c, dict) or not isinstance(c.get("id"), str):
        return [f"{where}: a tool call needs a string `id`"]
    p = [f"{where}.{k}: unknown field" for k in c if k not in ("id", "type", "function", "custom")]
    if c.get("type") == "custom":
        custom = c.get("custom")
        if not isinstance(custom, dict) or not isinstance(custom.get("input"), str):
            p.append(f"{where}.custom: expected {{name, input: string}}")
        return p
    if c.get("type") != "function":
        p.append(f"{where}.type: must be function or custom")
    fn = c.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        p.append(f"{where}.function.name: required string")
    elif not isinstance(fn.get("arguments"), str):
        p.append(f"{where}.function.arguments: must be a string (JSON)")
    return p


def _openai_order(messages: list[dict]) -> list[str]:
    p = []
    pending: list[str] = []
    legacy = False  # a function_call waiting for its `function` message
    seen: set[str] = set()
    for i, m in enumerate(messages):
        role = m["role"]
        if role == "tool":
            if m["tool_call_id"] not in pending:
                p.append(
                    f"messages.{i}: messages with role 'tool' must be a response to a preceding "
                    f"message with 'tool_calls' ({m['tool_call_id']!r} is not pending)"
                )
            else:
                pending.remove(m["tool_call_id"])
            continue
        if role == "function":
            if not legacy:
                p.append(f"messages.{i}: a 'function' message must answer a function_call")
            legacy = False
            continue
        if pending:
            p.append(
                f"messages.{i}: an assistant message with 'tool_calls' must be followed by tool "
                f"messages responding to each 'tool_call_id' ({', '.join(pending)} unanswered)"
            )
            pending = []
        legacy = False
        if role == "assistant":
            for c in m.get("tool_calls") or []:
                if c["id"] in seen:
                    p.append(f"messages.{i}: duplicate tool call id {c['id']!r}")
                seen.add(c["id"])
                pending.append(c["id"])
            legacy = m.get("function_call") is not None
    if pending:
        p.append(f"messages: tool calls without tool messages: {', '.join(pending)}")
    return p
