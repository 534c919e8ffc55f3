"""What the proxy needs from the compressor and the renderer, in one place.

    counter = default_token_counter()
    n = message_tokens("anthropic", message, counter)          # one provider message
    block = compress_messages("anthropic", messages, 20_000, compressor)
    block.messages, block.tokens, block.changed                # valid provider messages

The proxy works on provider messages; this module turns a run of them into units, compresses
them and renders them back. It is the one module that changes when `winnow.data.parse` and
the lossless renderer (issue 11) and the value-per-token allocator (issue 10) land: today it
uses `winnow.runtime.transcript.to_units`, the SemanticCompressor and `render.to_anthropic` /
`to_openai`, which render text, tool calls and tool results only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from winnow.runtime.transcript import to_units
from winnow.serving.compressor import CompressorConfig, SemanticCompressor
from winnow.serving.render import to_anthropic, to_openai
from winnow.serving.tokens import TokenCounter, unit_tokens

__all__ = [
    "CompressedBlock",
    "compress_messages",
    "default_compressor",
    "idle_compactor",
    "message_tokens",
]


@dataclass
class CompressedBlock:
    """A run of messages compressed: what to send, its tokens, and what changed."""

    messages: list[dict[str, Any]]
    tokens_before: int
    tokens: int
    changed: dict[str, int] = field(default_factory=dict)  # category -> units not kept as they were
    dropped: dict[str, int] = field(default_factory=dict)  # block type -> blocks left out whole


def default_compressor() -> SemanticCompressor:
    """The proxy's compressor: it degrades must-keep units rather than fail a live request."""
    return SemanticCompressor(config=CompressorConfig(on_must_keep_overflow="summarize_largest"))


def message_tokens(api: str, message: dict[str, Any], counter: TokenCounter) -> int:
    """Tokens of one provider message, counted as the compressor counts its units."""
    return sum(unit_tokens(u, counter) for u in to_units(api, [message]))


def compress_messages(
    api: str, messages: Sequence[dict[str, Any]], limit: int, compressor: SemanticCompressor
) -> CompressedBlock:
    """`messages` (a run of history: it starts a turn and closes every tool pair it opens)
    compressed to about `limit` tokens, as valid provider messages that start with a user turn.

    Older thinking blocks are left out whole, never turned into text (the APIs accept a history
    without them); the caller keeps the last assistant turn out of `messages`. System-role
    messages inside the history are kept verbatim, as a must-keep category.
    """
    units = [u for u in to_units(api, list(messages)) if u.kind != "thinking"]
    for u in units:  # mid-conversation system turns (Claude Code's environment, skills): pinned
        if u.role == "system":
            u.extra["category"] = "constraint"
    result = compressor.compress(units, max(1, limit))
    if api == "anthropic":
        body = to_anthropic(result.units)
        out = body["messages"]
        if body.get(
            "system"
        ):  # leading system-role units: they stay, as the user turn they were in
            out = _merge_first({"role": "user", "content": body["system"]}, out)
    else:
        out = to_openai(result.units)["messages"]
    changed = Counter(r.category for r in result.records if r.action != "kept")
    tokens = sum(message_tokens(api, m, compressor.counter) for m in out)
    return CompressedBlock(out, result.tokens_before, tokens, dict(changed), _unread(api, messages))


# What to_units reads. Any other block (thinking, which is left out on purpose; image,
# document, redacted thinking, server tool blocks, non-text parts) cannot go through the
# compressor today: it is left out of the compressed history and counted, so that the audit
# says so. Issue 11's lossless units will carry them.
_READ = {"text", "tool_use", "tool_result"}


def _unread(api: str, messages: Sequence[dict[str, Any]]) -> dict[str, int]:
    out: Counter = Counter()

    def parts(content: Any, read: set[str]) -> None:
        if isinstance(content, list):
            for b in content:
                kind = b.get("type", "?") if isinstance(b, dict) else "?"
                if kind not in read:
                    out[kind] += 1
                elif kind == "tool_result" and isinstance(b, dict):
                    parts(b.get("content"), {"text"})

    for m in messages:
        parts(m.get("content"), _READ if api == "anthropic" else {"text"})
    return dict(out)


def _merge_first(first: dict[str, Any], rest: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if rest and rest[0]["role"] == "user":
        return [{"role": "user", "content": first["content"] + rest[0]["content"]}, *rest[1:]]
    return [first, *rest]


def idle_compactor(
    conversation: Any,
    base_url: str,
    headers: dict[str, str],
    *,
    config: Any = None,
    classifier: Any = "default",
    audit: Any = None,
    session_id: str = "session",
) -> tuple[Any, Any]:
    """(IdleCompactor, its client) for a conversation the proxy relayed: the client speaks to
    `base_url` (the SDK's base URL) with the headers of the conversation's last request."""
    from winnow.runtime.idle import IdleCompactor
    from winnow.runtime.llm import LLMClient

    client = LLMClient(base_url, api=conversation.api, headers=headers)
    compactor = IdleCompactor(
        conversation,
        client,
        config,
        classifier=classifier,
        audit=audit,
        session_id=session_id,
    )
    return compactor, client
