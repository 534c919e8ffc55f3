"""Cache-aware compression: a stable, cached prefix and a dynamic suffix compressed harder.

    cac = CacheAwareCompressor(SemanticCompressor(), CacheConfig(model="claude-sonnet-4-6"))
    out = cac.compress(units, token_limit=30_000)
    body = out.to_anthropic()      # cache_control on the prefix (1h) and the tail (5m)

Provider prompt caches match a byte-identical prefix. So the transcript is split where it
will not move as turns are appended: after the last phase boundary (a compaction summary, a
new-phase note), and otherwise at a multiple of `split_every` agent steps before the last
`keep_last_steps`. The prefix is compressed on its own, lightly (only what its share of the
limit needs) and memoized, so the same prefix always renders to the same bytes even with a
non-deterministic LLM summarizer; the suffix, paid in full on every call, gets every
category's strategy and then whatever the rest of the limit needs.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from winnow.data.schema import Unit, as_unit
from winnow.serving.compressor import (
    CompressionResult,
    MustKeepOverflow,
    SemanticCompressor,
    pair_links,
)
from winnow.serving.render import MAX_BREAKPOINTS, min_cacheable_tokens, to_anthropic, to_openai
from winnow.serving.strategies import is_phase_boundary
from winnow.serving.tokens import unit_tokens


@dataclass
class CacheConfig:
    """Where the prefix ends and how the request is marked for caching."""

    keep_last_steps: int = 8  # the suffix holds at least this many of the latest steps...
    split_every: int = 8  # ...and the split moves in blocks of this many steps
    prefix_share: float = 0.7  # the prefix's share of the token limit
    model: str = "claude-sonnet-4-6"
    min_cacheable_tokens: int | None = (
        None  # None: the model's minimum (render.min_cacheable_tokens)
    )
    scrub: bool = True  # mask timestamps in rendered text
    memo_size: int = 64  # compressed prefixes remembered

    @property
    def min_tokens(self) -> int:
        return self.min_cacheable_tokens or min_cacheable_tokens(self.model)


@dataclass
class CacheAwareResult:
    """The compressed units, where the stable prefix ends, and the cache breakpoints."""

    units: list[Unit]
    prefix_len: int  # output units in the stable prefix
    split: int  # input units in the prefix
    prefix: CompressionResult
    suffix: CompressionResult
    breakpoints: list[tuple[int, str]]  # (output unit position, ttl)
    scrub: bool = True
    token_limit: int | None = None

    @property
    def tokens_before(self) -> int:
        return self.prefix.tokens_before + self.suffix.tokens_before

    @property
    def tokens_after(self) -> int:
        return self.prefix.tokens_after + self.suffix.tokens_after

    def to_anthropic(self, tools: bool | Sequence[dict[str, Any]] = False) -> dict[str, Any]:
        """Anthropic Messages body with cache_control breakpoints (`tools`: see render.to_anthropic)."""
        return to_anthropic(self.units, self.breakpoints, scrub=self.scrub, tools=tools)

    def to_openai(self, tools: bool | Sequence[dict[str, Any]] = False) -> dict[str, Any]:
        """OpenAI chat body; its automatic prefix cache benefits from the same stable prefix."""
        return to_openai(self.units, scrub=self.scrub, tools=tools)


class CacheAwareCompressor:
    """Compresses so that successive calls on a growing conversation share a cached prefix."""

    def __init__(
        self, compressor: SemanticCompressor | None = None, config: CacheConfig | None = None
    ):
        self.compressor = compressor or SemanticCompressor()
        self.config = config or CacheConfig()
        self._memo: OrderedDict[str, CompressionResult] = OrderedDict()

    def split(self, units: Sequence[Unit]) -> int:
        """How many leading units form the stable prefix (never inside a tool pair)."""
        c = self.config
        starts = _step_starts(units)
        k = (len(starts) - c.keep_last_steps) // c.split_every * c.split_every
        at = starts[k] if k > 0 else 0
        boundary = max((i + 1 for i, u in enumerate(units) if is_phase_boundary(u)), default=0)
        return _closed_at_or_after(units, max(at, boundary))

    def compress(self, units: Iterable[Unit | dict], token_limit: int) -> CacheAwareResult:
        units = [as_unit(u) for u in units]
        cut = self.split(units)
        prefix = self._prefix(units[:cut], int(token_limit * self.config.prefix_share), token_limit)
        suffix = self.compressor.compress(
            units[cut:], max(0, token_limit - prefix.tokens_after), eager=True
        )
        out = prefix.units + suffix.units
        return CacheAwareResult(
            units=out,
            prefix_len=len(prefix.units),
            split=cut,
            prefix=prefix,
            suffix=suffix,
            breakpoints=self.breakpoints(out, len(prefix.units)),
            scrub=self.config.scrub,
            token_limit=token_limit,
        )

    def breakpoints(self, units: Sequence[Unit], prefix_len: int) -> list[tuple[int, str]]:
        """1h at the end of the system prompt and of the prefix, 5m at the end: each only where
        the prompt up to it reaches the model's minimum cacheable length."""
        counter = self.compressor.counter
        cum = []
        total = 0
        for u in units:
            total += unit_tokens(u, counter)
            cum.append(total)
        system_end = next((i for i, u in enumerate(units) if u.role != "system"), len(units)) - 1
        wanted = [(system_end, "1h"), (prefix_len - 1, "1h"), (len(units) - 1, "5m")]
        points: dict[int, str] = {}
        for pos, ttl in wanted:
            if pos >= 0 and cum[pos] >= self.config.min_tokens and pos not in points:
                points[pos] = ttl
        return sorted(points.items())[:MAX_BREAKPOINTS]

    def _prefix(self, units: list[Unit], budget: int, limit: int) -> CompressionResult:
        key = (
            hashlib.sha256(
                json.dumps(
                    [u.to_dict() for u in units], sort_keys=True, ensure_ascii=False
                ).encode()
            ).hexdigest()
            + f":{budget}:{limit}"
        )
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        try:
            result = self.compressor.compress(units, budget)
        except MustKeepOverflow:  # the prefix may take the whole limit before giving up
            result = self.compressor.compress(units, limit)
        self._memo[key] = result
        while len(self._memo) > self.config.memo_size:
            self._memo.popitem(last=False)
        return result


def _step_starts(units: Sequence[Unit]) -> list[int]:
    """Where each step begins: a user's text after other roles, or the agent's reply after input."""
    starts = []
    for i, u in enumerate(units):
        prev = units[i - 1].role if i else None
        if (u.role == "assistant" and prev != "assistant") or (
            u.role == "user" and u.kind == "text" and prev not in ("user", None)
        ):
            starts.append(i)
    return starts


def _closed_at_or_after(units: Sequence[Unit], at: int) -> int:
    """The first position >= at that no tool pair straddles."""
    links = pair_links(units)
    open_until = [-1] * (
        len(units) + 1
    )  # open_until[p]: a pair spans p when some call < p <= result
    reach = -1
    for i in range(len(units)):
        j = links.get(i, -1)
        reach = max(reach, j if j > i else -1)
        open_until[i + 1] = reach
    p = min(at, len(units))
    while p < len(units) and open_until[p] >= p:
        p += 1
    return p


__all__ = ["CacheAwareCompressor", "CacheAwareResult", "CacheConfig"]
