"""Cache-aware compression: a stable, cached prefix and a dynamic suffix compressed harder.

    cac = CacheAwareCompressor(SemanticCompressor(), CacheConfig(model="claude-sonnet-4-6"))
    out = cac.compress(units, token_limit=30_000)
    body = out.to_anthropic()      # cache_control on the prefix (1h) and the tail (5m)

Provider prompt caches match a byte-identical prefix. So the transcript is cut into blocks
that will not move as turns are appended: every `split_every` agent steps (all but the last
`keep_last_steps`) and after each phase boundary (a compaction summary, a new-phase note).
The blocks form the prefix: each block gets every category's strategy once and is then
appended as it is, memoized, so the prefix renders to the same bytes call after call, even
with a non-deterministic LLM summarizer. When the prefix outgrows its share of the limit it
is compacted (recompressed to `compact_to` of that share): one cache miss, then stable bytes
again for several blocks. The suffix, paid in full on every call, gets every category's
strategy and then whatever the rest of the limit needs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from winnow.data.schema import CATEGORIES, Unit, as_unit
from winnow.serving.compressor import (
    CompressionResult,
    MustKeepOverflow,
    SemanticCompressor,
    UnitRecord,
    pair_links,
)
from winnow.serving.render import MAX_BREAKPOINTS, min_cacheable_tokens, to_anthropic, to_openai
from winnow.serving.strategies import is_phase_boundary
from winnow.serving.tokens import TokenCounter, unit_tokens


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
    compact_to: float = 0.5  # an outgrown prefix is recompressed to this share of its budget
    memo_size: int = 256  # prefix states remembered (one per block)

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
        self._memo: OrderedDict[str, tuple[list[Unit], list[UnitRecord], int]] = OrderedDict()

    def block_ends(self, units: Sequence[Unit]) -> list[int]:
        """Where the blocks of the stable prefix end (the last one is the split): every
        `split_every` steps before the last `keep_last_steps`, and after each phase boundary;
        never inside a tool pair. Each depends only on the units before it, so it never moves."""
        c = self.config
        starts = _step_starts(units)
        k = (len(starts) - c.keep_last_steps) // c.split_every * c.split_every
        ends = {starts[j] for j in range(c.split_every, k + 1, c.split_every) if j < len(starts)}
        ends |= {i + 1 for i, u in enumerate(units) if is_phase_boundary(u)}
        return sorted({_closed_at_or_after(units, e) for e in ends} - {0})

    def split(self, units: Sequence[Unit]) -> int:
        """How many leading units form the stable prefix."""
        ends = self.block_ends(units)
        return ends[-1] if ends else 0

    def compress(self, units: Iterable[Unit | dict], token_limit: int) -> CacheAwareResult:
        units = [as_unit(u) for u in units]
        ends = self.block_ends(units)
        cut = ends[-1] if ends else 0
        budget = int(token_limit * self.config.prefix_share)
        prefix, previous = self._prefix(units, ends, budget, token_limit)
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
            breakpoints=self.breakpoints(out, len(prefix.units), previous),
            scrub=self.config.scrub,
            token_limit=token_limit,
        )

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
        self, units: list[Unit], ends: list[int], budget: int, limit: int
    ) -> tuple[CompressionResult, int]:
        """The prefix, grown block by block: each block gets every category's strategy once and
        is appended as it is; only when the prefix outgrows `budget` is it compacted, to
        `compact_to` of it, so that its bytes then hold for several blocks again. The state after
        each block is memoized under the chained hash of the units up to it.

        Also returns how many of its units the prefix before its newest block shares with it
        (0 after a compaction)."""
        units_out: list[Unit] = []
        records: list[UnitRecord] = []
        previous = 0
        h = hashlib.sha256(f"{budget}:{limit}".encode())
        start = 0
        for end in ends:
            for u in units[start:end]:
                # the request's own fields (shared by every unit, rendered from the latest) are
                # no part of the prefix's units
                d = {k: v for k, v in u.to_dict().items() if k != "request"}
                h.update(json.dumps(d, sort_keys=True, ensure_ascii=False).encode())
            key = h.hexdigest()
            if key in self._memo:
                self._memo.move_to_end(key)
                units_out, records, previous = self._memo[key]
            else:
                block = self.compressor.compress(units[start:end], None)
                previous = len(units_out)
                units_out, records = units_out + block.units, records + block.records
                if self._tokens(units_out) > budget:
                    units_out = self._compact(units_out, budget, limit)
                    previous = 0
                self._memo[key] = (units_out, records, previous)
                while len(self._memo) > self.config.memo_size:
                    self._memo.popitem(last=False)
            start = end
        return _prefix_result(units_out, records, budget, self.compressor.counter), previous

    def _compact(self, units: list[Unit], budget: int, limit: int) -> list[Unit]:
        for target in (int(budget * self.config.compact_to), budget, limit):
            try:
                return self.compressor.compress(units, target).units
            except MustKeepOverflow:
                if target == limit:
                    raise
        raise AssertionError("unreachable")

    def _tokens(self, units: Sequence[Unit]) -> int:
        return sum(unit_tokens(u, self.compressor.counter) for u in units)


_ACTION_OF = {
    "preserve_structure": "restructured",
    "drop_or_minimal": "noted",
    "placeholder": "noted",
}


def _prefix_result(
    units: list[Unit], block_records: list[UnitRecord], budget: int, counter: TokenCounter
) -> CompressionResult:
    """Figures and per-unit records of a prefix, the blocks' records followed through compactions."""
    final = {}
    for u in units:
        for sid in u.extra.get("source_ids") or [u.id]:
            final[sid] = u
    tokens = {u.id: unit_tokens(u, counter) for u in units}
    records = []
    before: Counter = Counter()
    after: Counter = Counter()
    for r in block_records:
        before[r.category] += r.tokens_before
        u = final.get(r.id)
        if u is None:
            records.append(dataclasses.replace(r, action="dropped", tokens_after=0, output_id=None))
        elif u.id == r.output_id:  # itself, perhaps shrunk by a compaction since
            action = r.action
            if action == "kept" and u.extra.get("strategy"):
                action = _ACTION_OF.get(u.extra["strategy"], "summarized")
            records.append(dataclasses.replace(r, action=action, tokens_after=tokens[u.id]))
        else:  # absorbed by a compaction
            merged = len(u.extra.get("source_ids") or []) > 1
            action = "merged" if merged else "summarized"
            head = not merged or u.extra["source_ids"][0] == r.id
            records.append(
                dataclasses.replace(
                    r, action=action, tokens_after=tokens[u.id] if head else 0, output_id=u.id
                )
            )
    for u in units:
        after[u.extra.get("category", "")] += tokens[u.id]
    return CompressionResult(
        units=units,
        records=records,
        token_limit=budget,
        tokens_before=sum(before.values()),
        tokens_after=sum(tokens.values()),
        tokens_before_by_category={c: before[c] for c in CATEGORIES if before[c]},
        tokens_after_by_category={c: after[c] for c in CATEGORIES if after[c]},
    )


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
