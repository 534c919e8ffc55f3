"""Cache-aware compression: a stable, cached prefix and a suffix that takes the rest.

    cac = CacheAwareCompressor(SemanticCompressor(), CacheConfig(model="claude-sonnet-4-6"))
    out = cac.compress(units, token_limit="30%")   # or a token count
    body = out.to_anthropic()      # cache_control on the prefix (1h) and the tail (5m)

Provider prompt caches match a byte-identical prefix. So the transcript is cut into blocks
that will not move as turns are appended: every `split_every` agent steps (all but the last
`keep_last_steps`) and after each phase boundary (a compaction summary, a new-phase note).
Under the limit nothing changes. Over it, the blocks form the prefix: each block is compressed
on its own to the same share of its tokens, a share taken from a fixed ladder (`ratio_step`
apart) so that it holds while the conversation grows, and memoized, so the prefix renders to
the same bytes call after call (even with a non-deterministic LLM summarizer) until the share
steps down a rung. The suffix, the latest steps, gets the rest of the limit. The output uses
the limit: the prefix gets what the suffix leaves of it (at least `prefix_share`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from winnow.data.schema import CATEGORIES, Unit, as_unit
from winnow.serving.compressor import (
    CompressionResult,
    SemanticCompressor,
    SentCost,
    UnitRecord,
    pair_links,
    resolve_limit,
    step_starts,
)
from winnow.serving.render import MAX_BREAKPOINTS, min_cacheable_tokens, to_anthropic, to_openai
from winnow.serving.strategies import is_phase_boundary
from winnow.serving.tokens import unit_tokens

MAX_PREFIX_SHARE = 0.9  # a rung kept for stability may fill up to this share of the limit


@dataclass
class CacheConfig:
    """Where the prefix ends and how the request is marked for caching."""

    keep_last_steps: int = 8  # the suffix holds at least this many of the latest steps...
    split_every: int = 8  # ...and the split moves in blocks of this many steps
    prefix_share: float = (
        0.7  # the prefix's share of the limit, at least (the suffix may leave more)
    )
    model: str = "claude-sonnet-4-6"
    min_cacheable_tokens: int | None = (
        None  # None: the model's minimum (render.min_cacheable_tokens)
    )
    scrub: bool = True  # mask timestamps in rendered text
    # Blocks are compressed to a share of their tokens from the ladder 1, r, r^2, ...: a
    # growing conversation keeps its prefix bytes until the share it needs drops a rung.
    ratio_step: float = 0.95
    memo_size: int = 256  # prefix blocks remembered

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
    sent_before: int = 0  # the input's tokens as sent, rendered whole
    sent_after: int = 0  # the output's
    ratio: float | None = None  # the share of its tokens each prefix block kept (None: all)

    @property
    def tokens_before(self) -> int:
        return self.sent_before

    @property
    def tokens_after(self) -> int:
        return self.sent_after

    @property
    def must_keep_changes(self) -> list[UnitRecord]:
        return self.prefix.must_keep_changes + self.suffix.must_keep_changes

    @property
    def records(self) -> list[UnitRecord]:
        return self.prefix.records + self.suffix.records

    def manifest(self) -> list[dict[str, Any]]:
        return self.prefix.manifest() + self.suffix.manifest()

    def to_anthropic(
        self, tools: bool | Sequence[dict[str, Any]] = False, **kw: Any
    ) -> dict[str, Any]:
        """A complete Anthropic Messages request with cache_control breakpoints (`tools`, `kw`:
        see render.to_anthropic); read from one, what winnow did not change is as it was."""
        return to_anthropic(self.units, self.breakpoints, scrub=self.scrub, tools=tools, **kw)

    def to_openai(
        self, tools: bool | Sequence[dict[str, Any]] = False, **kw: Any
    ) -> dict[str, Any]:
        """A complete OpenAI chat request; its automatic prefix cache benefits from the same
        stable prefix."""
        return to_openai(self.units, scrub=self.scrub, tools=tools, **kw)


class CacheAwareCompressor:
    """Compresses so that successive calls on a growing conversation share a cached prefix."""

    def __init__(
        self, compressor: SemanticCompressor | None = None, config: CacheConfig | None = None
    ):
        self.compressor = compressor or SemanticCompressor()
        self.config = config or CacheConfig()
        self._memo: OrderedDict[str, CompressionResult] = OrderedDict()
        self._rungs: OrderedDict[str, float] = OrderedDict()  # conversation -> rung used last

    def block_ends(self, units: Sequence[Unit]) -> list[int]:
        """Where the blocks of the stable prefix end (the last one is the split): every
        `split_every` steps before the last `keep_last_steps`, and after each phase boundary;
        never inside a tool pair. Each depends only on the units before it, so it never moves."""
        c = self.config
        starts = step_starts(units)
        k = (len(starts) - c.keep_last_steps) // c.split_every * c.split_every
        ends = {starts[j] for j in range(c.split_every, k + 1, c.split_every) if j < len(starts)}
        ends |= {i + 1 for i, u in enumerate(units) if is_phase_boundary(u)}
        return sorted({_closed_at_or_after(units, e) for e in ends} - {0})

    def split(self, units: Sequence[Unit]) -> int:
        """How many leading units form the stable prefix."""
        ends = self.block_ends(units)
        return ends[-1] if ends else 0

    def compress(
        self, units: Iterable[Unit | dict], token_limit: int | float | str
    ) -> CacheAwareResult:
        """The units compressed under `token_limit` (a count, or a share of their tokens)."""
        return self._compress([as_unit(u) for u in units], token_limit)

    def _compress(self, units: list[Unit], token_limit: int | float | str) -> CacheAwareResult:
        comp = self.compressor
        # The limit counts what is sent (timestamps masked, when scrubbed); a share is of the
        # session's own tokens, as without --cache.
        scrub = self.config.scrub
        costs = comp.sent_cost("auto", units, scrub)
        total = comp.sent_cost("auto", units).total(units)
        sent = costs.total(units) if scrub else total
        limit = resolve_limit(token_limit, total)
        assert limit is not None
        ends = self.block_ends(units)
        cut = ends[-1] if ends else 0
        if sent <= limit:  # nothing to do: the whole prefix is the input's own
            prefix = comp.compress(units[:cut], limit, scrub=scrub)
            suffix = comp.compress(units[cut:], limit, scrub=scrub)
            previous = ends[-2] if len(ends) > 1 else 0
            return self._result(units, prefix, suffix, cut, previous, limit, total, None)
        # The suffix keeps all it has up to its share; the prefix gets the rest, as a rung of
        # the ladder: the one this conversation used last while it still leaves the suffix
        # its room (so that its bytes hold), else the one that fills the limit now.
        units = comp.label(units)  # once: the blocks are compressed apart
        # A block keeps its must-keep units (its floor) and a share of the rest: the same
        # share in every block, so that must-keep units spread unevenly never overflow a
        # block while the prefix as a whole has room for them.
        must = comp.must_keep(units)
        floor = [costs.cost(u) if m else 0 for u, m in zip(units, must, strict=True)]
        suffix_raw = costs.total(units[cut:])
        suffix_room = min(suffix_raw, int(limit * (1 - self.config.prefix_share)))
        suffix_room = max(suffix_room, min(suffix_raw, sum(floor[cut:])))
        budget = limit - suffix_room
        prefix_raw, prefix_floor = costs.total(units[:cut]), sum(floor[:cut])
        used: float | None = None
        if prefix_floor >= budget:  # the must-keep units alone overflow: one compression
            prefix, previous = comp.compress(units[:cut], max(1, budget), scrub=scrub), 0
        else:
            rest = (budget - prefix_floor) / max(1, prefix_raw - prefix_floor)
            ratio = self._rung(rest)
            conversation = self._conversation_key(units, ends)
            last = self._rungs.get(conversation)
            prefix, previous = self._prefix(units, ends, ratio if last is None else last, floor)
            if last is not None and (
                prefix.tokens_after > limit - min(suffix_raw, int(limit * (1 - MAX_PREFIX_SHARE)))
                or prefix.tokens_after < 0.5 * budget
            ):  # the rung used last no longer fits
                prefix, previous = self._prefix(units, ends, ratio, floor)
                last = None
            used = self._rungs[conversation] = ratio if last is None else last
            self._rungs.move_to_end(conversation)
            while len(self._rungs) > self.config.memo_size:
                self._rungs.popitem(last=False)
            if prefix.tokens_after > budget and last is None:  # what the blocks' pairs add
                prefix, previous, used = comp.compress(units[:cut], budget, scrub=scrub), 0, None
        suffix = comp.compress(units[cut:], max(1, limit - prefix.tokens_after), scrub=scrub)
        over = costs.total(prefix.units + suffix.units) - limit
        if over > 0:  # what the renderer adds where the two meet
            suffix = comp.compress(
                units[cut:], max(1, limit - prefix.tokens_after - over), scrub=scrub
            )
        return self._result(units, prefix, suffix, cut, previous, limit, total, used)

    def _result(
        self,
        units: list[Unit],
        prefix: CompressionResult,
        suffix: CompressionResult,
        cut: int,
        previous: int,
        limit: int,
        total: int,
        ratio: float | None,
    ) -> CacheAwareResult:
        out = prefix.units + suffix.units
        return CacheAwareResult(
            units=out,
            prefix_len=len(prefix.units),
            split=cut,
            prefix=prefix,
            suffix=suffix,
            breakpoints=self.breakpoints(out, len(prefix.units), previous),
            scrub=self.config.scrub,
            token_limit=limit,
            sent_before=total,
            sent_after=self.compressor.sent_cost("auto", units, self.config.scrub).total(out),
            ratio=ratio,
        )

    @staticmethod
    def _conversation_key(units: list[Unit], ends: list[int]) -> str:
        """A conversation's identity: the hash of its first block (which never changes)."""
        h = hashlib.sha256()
        for u in units[: ends[0] if ends else 0]:
            h.update(json.dumps(_key(u), sort_keys=True, ensure_ascii=False).encode())
        return h.hexdigest()

    def _rung(self, share: float) -> float:
        """The highest share of the ladder 1, r, r^2, ... at or below `share`."""
        if share >= 1:
            return 1.0
        if share <= 0:
            return 0.0
        step = self.config.ratio_step
        return step ** math.ceil(math.log(share) / math.log(step) - 1e-9)

    def breakpoints(
        self, units: Sequence[Unit], prefix_len: int, previous_len: int = 0
    ) -> list[tuple[int, str]]:
        """1h at the end of the system prompt, of the prefix before its newest block (where the
        previous calls wrote the cache: the provider looks back only ~20 blocks from a
        breakpoint) and of the prefix; 5m at the end. Each only where the prompt up to it
        reaches the model's minimum cacheable length."""
        counter = self.compressor.counter
        cum = []
        total = 0
        for u in units:
            total += unit_tokens(u, counter)
            cum.append(total)
        system_end = next((i for i, u in enumerate(units) if u.role != "system"), len(units)) - 1
        wanted = [
            (system_end, "1h"),
            (previous_len - 1, "1h"),
            (prefix_len - 1, "1h"),
            (len(units) - 1, "5m"),
        ]
        points: dict[int, str] = {}
        for pos, ttl in wanted:
            if pos >= 0 and cum[pos] >= self.config.min_tokens and pos not in points:
                points[pos] = ttl
        return sorted(points.items())[:MAX_BREAKPOINTS]

    def _prefix(
        self, units: list[Unit], ends: list[int], ratio: float, floor: list[int]
    ) -> tuple[CompressionResult, int]:
        """The prefix, block by block, each compressed on its own to its must-keep units'
        tokens (`floor`) and `ratio` of the rest, memoized under the chained hash of the units
        up to it and the ratio. Also returns how many output units the prefix holds before
        its newest block."""
        comp = self.compressor
        costs = comp.sent_cost("auto", units, self.config.scrub)
        parts: list[CompressionResult] = []
        h = hashlib.sha256(f"{ratio!r}:{costs.target}".encode())
        start = 0
        for end in ends:
            for u in units[start:end]:
                h.update(json.dumps(_key(u), sort_keys=True, ensure_ascii=False).encode())
            key = h.hexdigest()
            block = self._memo.get(key)
            if block is None:
                raw, keep = costs.total(units[start:end]), sum(floor[start:end])
                room = keep + math.floor(max(0, raw - keep) * ratio)
                block = comp.compress(units[start:end], max(1, room), scrub=self.config.scrub)
                self._memo[key] = block
                while len(self._memo) > self.config.memo_size:
                    self._memo.popitem(last=False)
            else:
                self._memo.move_to_end(key)
            parts.append(block)
            start = end
        previous = sum(len(p.units) for p in parts[:-1])
        return _joined(parts, costs), previous


def _key(u: Unit) -> dict[str, Any]:
    """What of a unit its compression depends on: not its raw provider block, nor the
    request's own fields (shared by every unit, rendered from the latest)."""
    return {k: v for k, v in u.to_dict().items() if k not in ("raw", "request")}


def _joined(parts: list[CompressionResult], costs: SentCost) -> CompressionResult:
    """One result of the prefix's blocks, in order."""
    units = [u for p in parts for u in p.units]
    before: Counter = Counter()
    after: Counter = Counter()
    for p in parts:
        before.update(p.tokens_before_by_category)
        after.update(p.tokens_after_by_category)
    return CompressionResult(
        units=units,
        records=[r for p in parts for r in p.records],
        token_limit=sum(p.token_limit or 0 for p in parts) or None,
        tokens_before=sum(p.tokens_before for p in parts),
        tokens_after=costs.total(units),
        tokens_before_by_category={c: before[c] for c in CATEGORIES if before[c]},
        tokens_after_by_category={c: after[c] for c in CATEGORIES if after[c]},
        target=costs.target,
        warnings=[w for p in parts for w in p.warnings],
        value_before=sum(p.value_before for p in parts),
        value_after=sum(p.value_after for p in parts),
    )


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
