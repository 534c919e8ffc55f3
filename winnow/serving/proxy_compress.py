"""What the proxy needs from the compressor and the renderer, in one place.

    counter = default_token_counter()
    n = message_tokens("anthropic", message, counter)          # one provider message
    block = compress_messages("anthropic", messages, 20_000, compressor)
    block.messages, block.tokens, block.changed                # valid provider messages

The proxy works on provider messages; this module turns a run of them into units
(`winnow.data.parse`: each unit keeps its block), compresses them and renders them back
(`CompressionResult.to_anthropic` / `to_openai`: a unit kept is its block as it came). It is
the one module that changes when the compressor's interface does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from winnow.data import parse
from winnow.serving.compressor import CompressorConfig, SemanticCompressor
from winnow.serving.tokens import TokenCounter, unit_tokens

__all__ = [
    "CompressedBlock",
    "compress_messages",
    "default_compressor",
    "idle_compactor",
    "message_tokens",
]

FORMATS = {"anthropic": "anthropic_messages", "openai": "openai_chat"}


@dataclass
class CompressedBlock:
    """A run of messages compressed: what to send, its tokens, and what changed."""

    messages: list[dict[str, Any]]
    tokens_before: int
    tokens: int
    changed: dict[str, int] = field(default_factory=dict)  # category -> units not kept as they were
    dropped: dict[str, int] = field(default_factory=dict)  # block type -> blocks left out whole


def default_compressor() -> SemanticCompressor:
    """The proxy's compressor: it degrades must-keep units rather than fail a live request
    (the default overflow policy: the least value per token first, each change recorded)."""
    return SemanticCompressor(config=CompressorConfig(on_must_keep_overflow="summarize"))


def message_tokens(api: str, message: dict[str, Any], counter: TokenCounter) -> int:
    """Tokens of one provider message, counted as the compressor counts its units (media at
    their documented cost)."""
    return sum(unit_tokens(u, counter) for u in parse([message], FORMATS[api]))


def compress_messages(
    api: str, messages: Sequence[dict[str, Any]], limit: int, compressor: SemanticCompressor
) -> CompressedBlock:
    """`messages` (a run of history: it starts a turn and closes every tool pair it opens)
    compressed to about `limit` tokens, as valid provider messages; a block kept is the block
    as it came (images, documents, signatures and all).

    Older thinking blocks are left out whole, never turned into text (the APIs accept a history
    without them); the caller keeps the last assistant turn out of `messages`. System-role
    messages inside the history are kept verbatim, as a must-keep category.
    """
    units = []
    dropped: Counter = Counter()
    for u in parse({"messages": list(messages)}, FORMATS[api]):
        if u.kind == "thinking":
            dropped["thinking"] += 1
            continue
        if u.role == "system":  # mid-conversation system turns (Claude Code's environment)
            u.extra["category"] = "constraint"
        units.append(u)
    result = compressor.compress(units, max(1, limit))
    body = result.to_anthropic() if api == "anthropic" else result.to_openai()
    out = body["messages"]
    changed = Counter(r.category for r in result.records if r.action != "kept")
    tokens = sum(message_tokens(api, m, compressor.counter) for m in out)
    return CompressedBlock(out, result.tokens_before, tokens, dict(changed), dict(dropped))


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
    """(IdleCompactor, its client) for a conversation the proxy relayed: the official SDK
    client speaks to `base_url` (the SDK's base URL) with the headers of the conversation's
    last request, its credentials and no others."""
    from winnow.runtime.idle import IdleCompactor
    from winnow.runtime.llm import relaying_client

    client = relaying_client(conversation.api, base_url, headers, max_retries=0)
    compactor = IdleCompactor(
        conversation,
        client,
        config,
        classifier=classifier,
        audit=audit,
        session_id=session_id,
    )
    return compactor, client
