"""The SemanticCompressor: keep the most value a token limit can hold.

    compressor = SemanticCompressor()                       # shipped classifier, extractive summaries
    result = compressor.compress(units, token_limit="30%")  # or 0.3, or 20_000 tokens
    result.units, result.tokens_before, result.tokens_after, result.records
    result.must_keep_changes                                # must-keep units that changed, and how

Every item (a unit, or a tool call with its result) has renditions, each with its token cost as
sent (rendered in `CompressorConfig.target`, read back and counted: the renderer's own text
counts) and a share of the item's value kept: verbatim; restructured (code keeps its outline, a
tool call its JSON); summarized, at a few lengths (an error keeps its error lines); a one-line
note that keeps what identifies it (a call's path, command, pattern, url, description, skill,
subagent type; a result's error lines); dropped. A unit's value is its probability-weighted
category importance (`CompressorConfig.weights`, in the taxonomy's priority order) times a size
term that saturates (a 20,000-token log is not worth forty 500-token ones), raised for the first
user request, the latest user message and the last steps (the working set). The allocator
(`winnow.serving.allocator`) picks one rendition per item to keep the most value under the limit.

Must-keep units (a must-keep top category, a pin, the thinking of the last assistant turn) stay
verbatim. When they alone exceed the limit, `on_must_keep_overflow` decides: "summarize" (the
default) turns repeated copies into a note pointing at the copy kept, then summarizes them
lowest value per token first (the first request and the latest user message last), then notes or drops
them in that order, and records each change; "error" raises `MustKeepOverflow`;
"summarize_largest" and "truncate_oldest" order the losses by size or by age instead. A thinking
unit is kept verbatim or dropped whole, and the last turn's never changes. Summaries are written
only for the renditions chosen (LLM calls concurrently). Under the limit nothing changes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from winnow.data.cues import settled_category
from winnow.data.schema import CATEGORIES, DEFAULT_STRATEGIES, DROPPABLE, Unit, as_unit
from winnow.serving import strategies as st
from winnow.serving.allocator import Option, allocate, allocate_exact, cheapest, hull
from winnow.serving.categorizer import Categorizer, as_categorizer, load_categorizer
from winnow.serving.relevance import distinctive_tokens, relevance
from winnow.serving.summarizers import ExtractiveSummarizer, Summarizer, summarize_all
from winnow.serving.tokens import (
    TARGETS,
    RunCounter,
    ScrubbedCounter,
    TokenCounter,
    default_token_counter,
    read_back,
    render,
    unit_tokens,
)

log = logging.getLogger(__name__)

ACTIONS = ("kept", "restructured", "summarized", "noted", "merged", "dropped")
OVERFLOW_POLICIES = ("summarize", "error", "summarize_largest", "truncate_oldest")

# Importance of each category, in TAXONOMY.md's priority order; a unit's value is the
# probability-weighted sum. Chosen from the order, not fitted to any data.
DEFAULT_WEIGHTS = {
    "requirement": 10.0,
    "constraint": 9.0,
    "decision": 8.0,
    "architecture": 7.0,
    "error": 6.0,
    "code": 3.0,
    "tool_output": 1.5,
    "explanation": 1.2,
    "status": 0.3,
    "acknowledgment": 0.2,
    "boilerplate": 0.1,
}
# Share of a unit's value each rendition keeps, by category: (restructured, summary exponent,
# note, note that holds the unit's error lines). A summary keeping a share r of the unit's
# tokens keeps r ** exponent of its value (never less than a note): a small exponent for
# what a few lines carry (a log, an error), near 1 for prose whose every line counts.
SHARES = {
    "requirement": (0.5, 0.8, 0.1, 0.2),
    "constraint": (0.5, 0.8, 0.1, 0.2),
    "decision": (0.5, 0.8, 0.1, 0.2),
    "architecture": (0.5, 0.7, 0.1, 0.2),
    "error": (0.6, 0.3, 0.2, 0.75),
    "code": (0.8, 0.6, 0.15, 0.3),
    "tool_output": (0.6, 0.35, 0.2, 0.5),
    "explanation": (0.5, 0.6, 0.1, 0.3),
    "status": (0.8, 0.5, 0.6, 0.6),
    "acknowledgment": (0.5, 0.5, 0.3, 0.3),
    "boilerplate": (0.5, 0.5, 0.2, 0.3),
}
# A rendition holds at most this many times the information per token of the unit it comes
# from (a summary or a note picks the telling lines, but it is no denser than that).
RENDITION_DENSITY = 3.0
RANK = {"dropped": 0, "noted": 1, "summarized": 2, "restructured": 3, "kept": 4}
# On a must-keep overflow, an error's lines count as RENDITION_DENSITY times as dense as the
# unit, but no more in all than this many such tokens (the value spread over all the lines).
# 300: scripts/bench_ab.py --baseline-src <checkout without it>, at 20%: 1,425 against 1,422
# of 1,473 must-keep units verbatim (with --categories from scripts/oof_categories.py: 1,278
# against 1,263), no error fewer at its error lines; 150 did the same on round 7's labels.
ERROR_LINES_DENSE = 300
# On a must-keep overflow, what a must-keep unit loses by no longer being verbatim, whatever
# its summary keeps: the value of this many of its tokens. A unit is changed for a good many
# tokens or not at all (fewer units change). 100: on scripts/bench_ab.py --sources
# entireio-cli,agentv,swe-agent,aider at 20%, 300 and 1000 keep one more must-keep unit
# verbatim of 812 and 3 fewer of 39 errors at their error lines.
CHANGE_TOKENS = 100
# Inputs of at most this many tokens are allocated exactly (allocator.allocate_exact)...
EXACT_TOKENS = 4000
# ...and so are inputs of at most EXACT_ITEMS items whose options times tokens are at most
# EXACT_CELLS: a huge unit alone (a 325K-token provider error) is where the greedy's hull
# shows most (its outline, then nothing short of a summary too long for the limit: 5% of
# the limit used at 30%, against 94% exactly, in 0.1 s).
EXACT_ITEMS = 8
EXACT_CELLS = 50_000_000


class MustKeepOverflow(ValueError):
    """The must-keep units alone do not fit the token limit."""

    def __init__(self, needed: int, limit: int, what: str = "the must-keep units"):
        self.needed, self.limit = needed, limit
        super().__init__(
            f"{what} alone need {needed} tokens, over the limit of {limit} "
            f"(raise the limit, or use on_must_keep_overflow='summarize')"
        )


@dataclass
class CompressorConfig:
    """What is kept, how value is weighed, and what happens when must-keep units overflow."""

    # Each category's strategy (TAXONOMY.md): the "verbatim" ones are must-keep; the others
    # are what `compress(units, None)` (or eager=True) applies in full.
    strategies: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_STRATEGIES))
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    # "summarize" (graceful, see the module docstring), "error", "summarize_largest",
    # "truncate_oldest".
    on_must_keep_overflow: str = "summarize"
    # Units kept verbatim whatever their category: a unit id, "role:user", or "re:PATTERN"
    # (a regular expression searched in the unit's text).
    pins: tuple[str, ...] = ()
    # The format the limit counts in: "anthropic", "openai", None (the units' own tokens), or
    # "auto": the provider's whose request body the units were read from, else "anthropic".
    target: str | None = "auto"
    summary_ratio: float = 0.25  # the summary `compress(units, None)` writes: this share...
    min_summary_tokens: int = 48  # ...but at least this many tokens (the shortest offered)...
    max_summary_tokens: int = 400  # ...and at most this many
    # The shortest extractive summary of a unit that is not must-keep in an input of at most
    # EXACT_TOKENS tokens (allocated exactly): its limit is a few hundred tokens or less, where
    # a 48-token step is a good share of the room the other units leave. With 48, 8 sessions
    # of ../shared/traces (limits of 51-100 tokens at 30%) used 43-88% of it; with 12, an
    # Aider session 87 of its 100 (a 12-token summary of its start-up notes did not fit the
    # 13 tokens left); with 8, 90.8% at the least (scripts/check_headline.py).
    small_min_summary_tokens: int = 8
    summary_step: float = 1.1  # summaries offered from the shortest up, this factor apart
    # Size term of a unit's value: linear up to this many tokens, a tenth as steep beyond.
    value_saturation_tokens: int = 800
    first_request_boost: float = 3.0
    latest_user_boost: float = 3.0
    working_set_steps: int = 8  # the last agent steps...
    working_set_boost: float = 2.0  # ...are worth this much more
    # Working-set relevance (winnow.serving.relevance): a unit that shares rare distinctive
    # tokens (paths, identifiers, names) with the latest user message (and, at half weight,
    # the last `relevance_steps` steps) is worth up to 1 + relevance_boost times as much, and
    # so, by relevance_decay a hop, is one that shares them with a relevant unit
    # (relevance_hops hops in all). For a unit whose top category is confident (at least
    # relevance_confident), the raise stops under the weight of the next category above it that
    # is not must-keep: relevance reorders within the taxonomy's priority, never across it.
    # 3.0: on `winnow cib` probes (seed 0) the supporting passages kept at a 10% budget go
    # from 15/10/10% (off) to 70/45/30% at 20/50/90% occupancy, and scripts/bench_ab.py
    # (--sources entireio-cli,agentv,swe-agent,aider) is unchanged within noise.
    relevance_boost: float = 3.0
    relevance_hops: int = 2
    relevance_decay: float = 0.5
    relevance_steps: int = 2
    relevance_confident: float = 0.8
    # A unit the classifier gives the must-keep categories together at least this
    # probability is must-keep too: by default, one more likely must-keep than not (its mass
    # split over several must-keep categories). None: the top category alone decides.
    protect_threshold: float | None = 0.5
    dedup_min_tokens: int = 32  # repeated must-keep units this long become a pointer on overflow
    summary_concurrency: int = 8  # LLM summary calls in flight at once

    def __post_init__(self) -> None:
        self.strategies = {**DEFAULT_STRATEGIES, **self.strategies}
        for cat, strategy in self.strategies.items():
            if cat not in CATEGORIES:
                raise ValueError(f"unknown category {cat!r} in strategies")
            if strategy not in st.STRATEGIES:
                raise ValueError(
                    f"unknown strategy {strategy!r} for {cat!r}; one of {st.STRATEGIES}"
                )
        self.weights = {**DEFAULT_WEIGHTS, **self.weights}
        for cat, w in self.weights.items():
            if cat not in CATEGORIES:
                raise ValueError(f"unknown category {cat!r} in weights")
            if not w >= 0:
                raise ValueError(f"weight of {cat!r} must be >= 0, not {w!r}")
        if not self.relevance_boost >= 0:
            raise ValueError(f"relevance_boost must be >= 0, not {self.relevance_boost!r}")
        if not 0 <= self.relevance_decay <= 1:
            raise ValueError(f"relevance_decay must be in [0, 1], not {self.relevance_decay!r}")
        if self.relevance_hops < 0 or self.relevance_steps < 0:
            raise ValueError("relevance_hops and relevance_steps must be >= 0")
        if not self.summary_step > 1:
            raise ValueError(f"summary_step must be > 1, not {self.summary_step!r}")
        if self.on_must_keep_overflow not in OVERFLOW_POLICIES:
            raise ValueError(f"on_must_keep_overflow must be one of {OVERFLOW_POLICIES}")
        if self.target is not None and self.target not in (*TARGETS, "auto"):
            raise ValueError(
                f"target must be one of {TARGETS}, 'auto' or None, not {self.target!r}"
            )
        self.pins = tuple(self.pins)
        pin_matcher(self.pins)  # a bad pin fails here, naming it

    @property
    def protected(self) -> frozenset[str]:
        """Categories kept verbatim whatever the limit: the must-keep set."""
        return frozenset(c for c, s in self.strategies.items() if s == "verbatim")


@dataclass(frozen=True)
class UnitRecord:
    """What happened to one input unit; `output_id` names the unit it became (None if dropped).
    Token figures are the unit's own cost as sent (rendered alone)."""

    id: str
    category: str
    action: str
    tokens_before: int
    tokens_after: int
    output_id: str | None
    scores: dict[str, float] | None = None
    must_keep: bool = False
    reason: str = ""  # why a must-keep unit changed, or what a note points at
    # an error the limit held at its error lines at the least (it may have kept more)
    error_lines: bool = False
    relevance: float = 0.0  # to the latest user message and the last steps, 0-1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class CompressionResult:
    """The compressed units, token figures (total and by category) and one record per input unit."""

    units: list[Unit]
    records: list[UnitRecord]
    token_limit: int | None
    tokens_before: int
    tokens_after: int
    tokens_before_by_category: dict[str, int]
    tokens_after_by_category: dict[str, int]
    target: str | None = "anthropic"
    warnings: list[str] = field(default_factory=list)
    value_before: float = 0.0  # the allocator's value of the input...
    value_after: float = 0.0  # ...and of what the allocation kept (a summary at its target)

    @property
    def fits(self) -> bool:
        return self.token_limit is None or self.tokens_after <= self.token_limit

    @property
    def actions(self) -> Counter:
        """How many input units were kept, restructured, summarized, noted, merged, dropped."""
        return Counter(r.action for r in self.records)

    @property
    def must_keep_changes(self) -> list[UnitRecord]:
        """The must-keep units that did not stay verbatim (only on a must-keep overflow)."""
        return [r for r in self.records if r.must_keep and r.action != "kept"]

    def manifest(self) -> list[dict[str, Any]]:
        """Per input unit: id, category, scores, action, tokens before and after, output id."""
        return [r.to_dict() for r in self.records]

    def to_anthropic(self, **kw: Any) -> dict[str, Any]:
        """The compressed units as a complete Anthropic Messages request: read from one, every
        field and block winnow did not change is as it was (`render.to_anthropic` takes `kw`)."""
        from winnow.serving.render import to_anthropic

        return to_anthropic(self.units, **kw)

    def to_openai(self, **kw: Any) -> dict[str, Any]:
        """The compressed units as a complete OpenAI chat request (see `to_anthropic`)."""
        from winnow.serving.render import to_openai

        return to_openai(self.units, **kw)


def resolve_limit(limit: int | float | str | None, total: int) -> int | None:
    """A token count from a count (20000, "20000") or a share of `total` (0.3, "30%")."""
    if limit is None:
        return None
    if isinstance(limit, bool):
        raise TypeError("token_limit must be a count, a share or a percentage, not a bool")
    if isinstance(limit, str):
        text = limit.strip()
        try:
            if text.endswith("%"):  # a percentage may pass 100%: then nothing changes
                share = float(text[:-1]) / 100
                if share > 1:
                    return max(1, int(total * share))
            elif re.fullmatch(r"\d+", text):
                return _positive(int(text), limit)
            else:
                share = float(text)
        except ValueError:
            raise ValueError(
                f"token_limit must be a count, a share or a percentage, not {limit!r}"
            ) from None
        return _share(share, total, limit)
    if isinstance(limit, int):
        return _positive(limit, limit)
    if isinstance(limit, float):
        return _share(limit, total, limit)
    raise TypeError(f"token_limit must be a count, a share or a percentage, not {limit!r}")


def _positive(n: int, given: Any) -> int:
    if n <= 0:
        raise ValueError(f"token_limit must be positive, not {given!r}")
    return n


def _share(share: float, total: int, given: Any) -> int:
    if not 0 < share <= 1:
        raise ValueError(f"a token_limit share must be in (0, 1] (or 1%-100%), not {given!r}")
    return max(1, int(total * share))


def pin_matcher(pins: Sequence[str]) -> Callable[[Unit], bool]:
    """A predicate for `CompressorConfig.pins`: unit ids, "role:ROLE", "re:PATTERN"."""
    ids: set[str] = set()
    roles: set[str] = set()
    patterns = []
    for pin in pins:
        if pin.startswith("role:"):
            role = pin[5:]
            if role not in ("system", "user", "assistant", "tool"):
                raise ValueError(f"pin {pin!r}: role must be system, user, assistant or tool")
            roles.add(role)
        elif pin.startswith("re:"):
            try:
                patterns.append(re.compile(pin[3:]))
            except re.error as e:
                raise ValueError(f"pin {pin!r}: bad regular expression ({e})") from None
        elif pin:
            ids.add(pin)
    if not (ids or roles or patterns):
        return lambda u: False
    return lambda u: u.id in ids or u.role in roles or any(p.search(u.text) for p in patterns)


class SemanticCompressor:
    """Compresses transcripts under a token limit, keeping the most value; see the module
    docstring."""

    def __init__(
        self,
        classifier: Categorizer | Any = None,
        summarizer: Summarizer | None = None,
        token_counter: TokenCounter | None = None,
        strategies: dict[str, str] | None = None,
        config: CompressorConfig | None = None,
    ):
        self.config = config or CompressorConfig()
        if strategies:
            self.config = dataclasses.replace(
                self.config, strategies={**self.config.strategies, **strategies}
            )
        self.counter = token_counter or default_token_counter()
        self.summarizer = summarizer or ExtractiveSummarizer(self.counter)
        self._classifier = classifier
        self._costs: dict[tuple[str | None, bool], SentCost] = {}

    @property
    def classifier(self) -> Any:
        """The categorizer for units without a category; loaded on first use."""
        if self._classifier is None:
            self._classifier = load_categorizer()
        return self._classifier

    def categorize(self, units: Sequence[Unit]) -> list[str]:
        """Each unit's category: its own `extra['category']`, else the classifier's."""
        return [c for c, _scores in self._labels(units)]

    def must_keep(self, units: Sequence[Unit]) -> list[bool]:
        """Which units are kept verbatim whatever the limit (short of a must-keep overflow)."""
        pinned = pin_matcher(self.config.pins)
        protected = self.config.protected
        return [
            _is_must_keep(c, sc, self.config, protected) or pinned(u)
            for u, (c, sc) in zip(units, self._labels(units), strict=True)
        ]

    def label(self, units: Sequence[Unit]) -> list[Unit]:
        """The units with their category and scores in `extra` (the classifier's where they
        had none): label once, compress in parts."""
        out = []
        for u, (c, sc) in zip(units, self._labels(units), strict=True):
            if u.extra.get("category") == c and u.extra.get("scores") == sc:
                out.append(u)
            else:
                out.append(dataclasses.replace(u, extra={**u.extra, "category": c, "scores": sc}))
        return out

    def _labels(self, units: Sequence[Unit]) -> list[tuple[str, dict[str, float]]]:
        """(category, scores) per unit: the unit's own, else the classifier's."""
        out: list[Any] = [(u.extra.get("category"), u.extra.get("scores")) for u in units]
        todo = [i for i, (c, _sc) in enumerate(out) if c not in CATEGORIES]
        if todo:
            preds = as_categorizer(self.classifier).predict([units[i] for i in todo])
            for i, p in zip(todo, preds, strict=True):
                out[i] = (p.category, p.scores)
        return [(c, dict(sc) if sc else {c: 1.0}) for c, sc in out]

    def sent_cost(
        self, target: str | None = "auto", units: Sequence[Unit] = (), scrub: bool = False
    ) -> SentCost:
        """The cost model for `target` ("auto": the config's, resolved for `units`), cached;
        `scrub`: of texts sent with their timestamps masked (`to_anthropic(scrub=True)`)."""
        if target == "auto":
            target = self.config.target
        if target == "auto":
            target = provider_of(units)
        key = (target, scrub)
        if key not in self._costs:
            counter = ScrubbedCounter(self.counter) if scrub else self.counter
            self._costs[key] = SentCost(counter, target)
        return self._costs[key]

    def compress(
        self,
        units: Iterable[Unit | dict],
        token_limit: int | float | str | None = None,
        *,
        eager: bool = False,
        scrub: bool = False,
    ) -> CompressionResult:
        """Compress the units of one conversation, in order, under `token_limit`: a token
        count, or a share of the input's own tokens (0.3 or "30%").

        Under the limit nothing changes. With no limit, or `eager`, every unit gets its
        category's strategy in full first (then whatever the limit still needs). `scrub`: the
        output is to be sent with its timestamps masked (`to_anthropic(scrub=True)`, as
        cache-aware rendering does): the limit counts it so."""
        given = [as_unit(u) for u in units]
        costs = self.sent_cost("auto", given, scrub).for_run()
        before = costs.total(given)
        limit = resolve_limit(token_limit, before)
        plan = Plan(given, self._labels(given), self.config, costs, self.summarizer)
        if limit is not None and before <= limit and not eager:
            return plan.result(limit, before, unchanged=True)
        return plan.run(limit, before, eager or limit is None)


PROVIDERS = {"anthropic_messages": "anthropic", "openai_chat": "openai"}


def provider_of(units: Sequence[Unit]) -> str:
    """The provider whose request body the units were read from (their blocks say), else
    "anthropic"."""
    for u in units:
        if "raw" in u.extra and u.extra.get("format") in PROVIDERS:
            return PROVIDERS[u.extra["format"]]
    return "anthropic"


def _next_weight(
    category: str, config: CompressorConfig, protected: frozenset[str]
) -> float | None:
    """The weight of the next category above `category` in the taxonomy's priority that is
    not must-keep (`protected`: `config.protected`, computed once by the caller) (None when
    there is none)."""
    order = list(CATEGORIES)
    if category not in order:
        return None
    above = [
        config.weights[k]
        for k in order[: order.index(category)]
        if k not in protected and config.weights.get(k, 0.0) > 0
    ]
    return above[-1] if above else None


def _is_must_keep(
    category: str, scores: dict[str, float], config: CompressorConfig, protected: frozenset[str]
) -> bool:
    if category in protected:
        return True
    t = config.protect_threshold
    return t is not None and sum(scores.get(c, 0.0) for c in protected) >= t


# --- what a unit costs as sent ------------------------------------------------------------------

_ANCHOR = "\u2063anchor"  # texts no transcript holds: the context rendered around a lone unit
_STUB = '{"winnow_stub":"\u2063"}'


class SentCost:
    """What units cost as sent: rendered in `target` by the public renderer, read back by the
    readers, counted. `total` is exact. `cost` is one unit's share, rendered alone (a tool
    unit beside a stub partner): exact where rendering keeps the text, a close upper bound
    where the renderer adds a prefix; the compressor checks the total at the end."""

    def __init__(self, counter: TokenCounter, target: str | None):
        self.counter = counter
        self.target = target
        self._shape: dict[tuple | str, int] = {}
        self._alone: dict[tuple, int] = {}

    def for_run(self) -> SentCost:
        """This cost model for one compression: the same caches, and each text counted once
        (see RunCounter)."""
        run = SentCost(RunCounter(self.counter), self.target)
        run._shape, run._alone = self._shape, self._alone
        return run

    def total(self, units: Sequence[Unit]) -> int:
        if self.target is None or not units:
            return sum(unit_tokens(u, self.counter) for u in units)
        body = render(units, self.target)
        return sum(unit_tokens(u, self.counter) for u in read_back(body, self.target))

    def opening(self) -> int:
        """What the renderer adds to a conversation that opens with the agent's turn."""
        if self.target is None:
            return 0
        if "opening" not in self._shape:
            probe = Unit("p", "p", 0, "assistant", "text", "probe")
            self._shape["opening"] = max(0, self.total([probe]) - self.cost(probe))
        return self._shape["opening"]

    def cost(self, u: Unit, paired: bool = False, leading: bool = False) -> int:
        """One unit's cost: `paired` when its tool partner is rendered beside it, `leading`
        for a system unit with only system units before it."""
        n = unit_tokens(u, self.counter)
        if self.target is None:
            return n
        call = u.kind == "tool_call" and u.role == "assistant"
        # (an image or a document counts its documented cost, which unit_tokens adds: its
        # size depends on the request's model, which a unit rendered alone has not)
        if not u.text.strip() or (call and not _canonical_json(u.text)):
            return self._render_alone(u, paired, leading)
        key = (u.role, u.kind, u.tool_name, bool(u.is_error), paired, leading)
        delta = self._shape.get(key)
        if delta is None:
            probe = Unit(
                u.id, u.session_id, u.index, u.role, u.kind, '{"q":1}' if call else "probe",
                u.tool_name, u.call_id, u.is_error,
            )  # fmt: skip
            delta = self._render_alone(probe, paired, leading) - unit_tokens(probe, self.counter)
            # a prefix the renderer adds may join the text's first token differently
            delta = self._shape[key] = delta + (delta != 0)
        return n + delta

    def _render_alone(self, u: Unit, paired: bool, leading: bool) -> int:
        raw = u.extra.get("raw")
        shape = (u.extra.get("media_tokens"), raw.get("type") if isinstance(raw, dict) else None)
        key = (u.role, u.kind, u.tool_name, bool(u.is_error), paired, leading, shape, u.text)
        n = self._alone.get(key)
        if n is not None:
            return n
        # the unit as it renders (its own block, when it has one), outside its request
        extra = {k: v for k, v in u.extra.items() if k != "request"}
        u = dataclasses.replace(u, extra=extra, call_id=u.call_id or "c")
        ctx: list[Unit] = []
        if not (u.role == "system" and leading):
            ctx.append(Unit("a", "a", 0, "user", "text", _ANCHOR))
        if paired and u.kind == "tool_result":
            ctx.append(_stub(u, "assistant", "tool_call"))
        ctx.append(u)
        if paired and u.kind == "tool_call":
            ctx.append(_stub(u, "tool", "tool_result"))
        assert self.target is not None
        back = read_back(render(ctx, self.target), self.target)
        n = sum(
            unit_tokens(b, self.counter)
            for b in back
            if b.text not in (_ANCHOR, _STUB) and _ANCHOR not in b.text[:32]
        )
        if len(self._alone) > 65536:
            self._alone.clear()
        self._alone[key] = n
        return n


def _stub(u: Unit, role: str, kind: str) -> Unit:
    """A partner for `u` that the cost leaves out (its text is _STUB)."""
    return Unit(u.id, u.session_id, u.index, role, kind, _STUB, u.tool_name, u.call_id)


def signed(unit: Unit) -> bool:
    """A thinking unit read from a provider block that carries its signature (or is redacted):
    the API wants it back unchanged in the turn it belongs to."""
    raw = unit.extra.get("raw")
    if isinstance(raw, dict) and raw.get("type") in ("thinking", "redacted_thinking"):
        return bool(raw.get("signature")) or raw.get("type") == "redacted_thinking"
    return bool(unit.extra.get("signature"))


def _canonical_json(text: str) -> bool:
    """Whether a tool call's text is the compact JSON object the readers write (so rendering
    and reading back gives it back unchanged)."""
    if not text.startswith("{"):
        return False
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(value, dict)
        and json.dumps(value, ensure_ascii=False, separators=(",", ":")) == text
    )


# --- the plan: items, their renditions, the choice ----------------------------------------------


@dataclass
class Form:
    """One rendition of one unit: its cost as sent and the share of the unit's value it keeps."""

    action: str  # kept | restructured | summarized | noted | dropped
    cost: int
    share: float
    unit: Unit | None  # the output unit; None when dropped or a summary not written yet
    target: int = 0  # summarized: the summary's whole cost, tokens; restructured: its head
    ahead: int = 0  # restructured: the bodies that keep the next head (st.preserve_structure)
    reason: str = ""


@dataclass
class Info:
    """One input unit, as the plan sees it."""

    unit: Unit
    category: str
    scores: dict[str, float]
    tokens: int  # verbatim cost as sent
    value: float  # of the whole unit, verbatim
    density: float  # probability-weighted importance, boosts included
    must_keep: bool = False  # a must-keep category or a pin
    pinned: bool = False
    forced: bool = False  # thinking of the last assistant turn: never changed
    paired: bool = False
    leading: bool = False
    # what the renderer adds when this unit opens the conversation (an agent's unit before
    # any user unit that must stay): charged to each such unit, an upper bound
    opening: int = 0
    fixed: Form | None = None  # a must-keep unit's rendition (verbatim, unless overflow)
    # an error (more likely than not): kept as its error lines at the least, while the limit
    # holds them beside the must-keep units
    error_floor: bool = False
    errors: str = ""  # its error lines (an error that names none: its first line)
    weighted: list[tuple[float, str]] | None = None  # see Plan._weighted
    weight: float | None = None  # the sum of `weighted`'s weights
    shares: dict[int, float] = field(default_factory=dict)  # see Plan._shares, by column
    relevance: float = 0.0  # see CompressorConfig.relevance_boost
    raised: float = 1.0  # what relevance multiplied its value by
    index: int = 0  # its position in the input
    # its renditions (Plan._forms_of): a must-keep unit's only when an overflow asks for them
    forms: list[Form] | None = None


class Plan:
    """One compression: items (a unit, or a tool call with its result), their renditions, the
    allocation, the summaries it needs, and the result. Holds nothing of the compressor but
    what it is given."""

    def __init__(
        self,
        units: list[Unit],
        labels: list[tuple[str, dict[str, float]]],
        config: CompressorConfig,
        costs: SentCost,
        summarizer: Summarizer,
    ):
        self.units = units
        self.config = config
        self.costs = costs
        self.summarizer = summarizer
        self.warnings: list[str] = []
        self.links = pair_links(units)
        self.rendered_pairs = _adjacent_pairs(units, self.links)
        self.items: list[list[int]] = []
        for i in range(len(units)):
            j = self.links.get(i)
            if j is None:
                self.items.append([i])
            elif j > i:
                self.items.append([i, j])
        self.items.sort(key=lambda it: it[0])
        self.asks: tuple[int, ...] = ()  # the first request and the latest user message
        self.info = self._infos(labels)
        # A short conversation is allocated exactly: the greedy's granularity shows there (a
        # limit of a few hundred tokens, one item frozen below a step it cannot afford), and
        # the exact solution costs little. Decided by the input alone, so that one input gets
        # one method at every limit (each is monotone in the limit).
        self._total = sum(info.tokens for info in self.info)
        self._exact = self._total <= EXACT_TOKENS
        self._summaries: dict[tuple[int, int], str] = {}
        self._locked: dict[int, Form] = {}  # units whose summary is written: they keep it
        self._widen: int | None = None  # the must-keep summary that made an overflow fit
        self._later: list[frozenset[str]] | None = None  # see _salient
        self.planned: dict[int, Form] = {}
        self._error_memo: dict[int, tuple[str, str]] = {}
        # the offline summarizer costs nothing: its summaries may be rewritten at other lengths
        self._free_summaries = isinstance(summarizer, ExtractiveSummarizer)
        self._extractive = (
            summarizer
            if isinstance(summarizer, ExtractiveSummarizer)
            else ExtractiveSummarizer(costs.counter)
        )

    # -- units ------------------------------------------------------------------------------

    def _infos(self, labels: list[tuple[str, dict[str, float]]]) -> list[Info]:
        c = self.config
        units = self.units
        pinned = pin_matcher(c.pins)
        protected = c.protected  # a property that builds a set: once, not once per unit
        boosts = self._boosts(labels)
        relevant = self._relevance()
        last_turn = final_turn(units)
        leading = 0
        while leading < len(units) and units[leading].role == "system":
            leading += 1
        out = []
        for i, (u, (cat, scores)) in enumerate(zip(units, labels, strict=True)):
            if cat == settled_category(u):
                # a harness fact (`cues.settled_category`), not a guess: its category is
                # certain, whatever the model's scores said (out of fold they kept 24 settled
                # units, Codex's catalogue notes and SWE-agent's demonstrations among them,
                # as must-keep)
                scores = {cat: 1.0}
            total = sum(scores.values()) or 1.0
            importance = sum(p * c.weights.get(k, 0.0) for k, p in scores.items()) / total
            paired = i in self.rendered_pairs
            n = self.costs.cost(u, paired, i < leading)
            raise_ = 1.0 + c.relevance_boost * relevant[i]
            top = max(scores.values(), default=0.0) / total
            if relevant[i] and top >= c.relevance_confident and importance > 0:
                ceiling = _next_weight(cat, c, protected)
                if ceiling is not None:  # stays under the next category above it
                    raise_ = max(1.0, min(raise_, 0.99 * ceiling / importance))
            density = importance * boosts[i] * raise_
            is_pinned = pinned(u)
            info = Info(
                unit=u,
                category=cat,
                scores=scores,
                tokens=n,
                value=density * self._size(n),
                density=density,
                must_keep=_is_must_keep(cat, scores, c, protected) or is_pinned,
                pinned=is_pinned,
                forced=u.kind == "thinking" and i in last_turn,
                paired=paired,
                leading=i < leading,
                relevance=relevant[i],
                raised=raise_,
                index=i,
            )
            # error lines are looked for where errors are: tool output, a client's console
            # lines mid-session (Aider's: 43 of the 44 there with error lines are hand-labelled
            # error), and any unit the classifier gives some chance of being one
            output = u.kind == "tool_result" or (
                u.kind == "text" and u.role == "system" and i >= leading
            )
            if output or scores.get("error", 0.0) >= 0.05 or cat == "error":
                info.errors = st.error_excerpt(u.text)
            # an error by its category (more likely than not), by the tool's own word, or by
            # an error line in a tool's or the client's output
            likely = cat == "error" or scores.get("error", 0.0) >= 0.5
            failed = output and (bool(u.is_error) or bool(info.errors))
            if not info.must_keep and u.kind in ("text", "tool_result") and (likely or failed):
                info.error_floor = True
                info.errors = info.errors or st.first_line_excerpt(u.text)
            out.append(info)
        first_user = next(
            (
                i
                for i, info in enumerate(out)
                if info.unit.role not in ("system", "assistant") and (info.must_keep or info.forced)
            ),
            len(out),
        )
        for i, info in enumerate(out):
            if i < first_user and info.unit.role == "assistant":
                info.opening = self.costs.opening()
            if info.must_keep or info.forced:
                info.fixed = Form("kept", info.tokens + info.opening, 1.0, info.unit)
        return out

    def _size(self, tokens: int) -> float:
        cap = self.config.value_saturation_tokens
        return min(tokens, cap) + 0.1 * max(0, tokens - cap)

    def _boosts(self, labels: list[tuple[str, dict[str, float]]]) -> list[float]:
        c = self.config
        units = self.units
        boost = [1.0] * len(units)
        # the user's words, not what they attached: an image or a file in the latest user
        # message is not what must go last (it went last, and the words went before it); nor
        # what the harness sends as the user: injected project rules (Codex sends AGENTS.md
        # first) or a skill launched without a task (`settled_category`)
        asks = [
            i
            for i, u in enumerate(units)
            if u.role == "user"
            and u.kind == "text"
            and not u.extra.get("media_tokens")
            and labels[i][0] not in DROPPABLE
            and settled_category(u) in (None, "requirement")
        ]
        self.asks = (asks[0], asks[-1]) if asks else ()
        if asks:
            boost[asks[0]] *= c.first_request_boost
            if asks[-1] != asks[0]:
                boost[asks[-1]] *= c.latest_user_boost
        starts = step_starts(units)
        if c.working_set_steps > 0 and starts:
            for i in range(starts[max(0, len(starts) - c.working_set_steps)], len(units)):
                boost[i] *= c.working_set_boost
        return boost

    def _relevance(self) -> list[float]:
        """Each unit's relevance to the latest user message and the last steps (a tool call
        and its result are one document)."""
        c = self.config
        out = [0.0] * len(self.units)
        if c.relevance_boost <= 0 or c.relevance_hops <= 0 or not self.units:
            return out
        item_of = {i: k for k, item in enumerate(self.items) for i in item}
        docs = [
            frozenset().union(*(distinctive_tokens(self.units[i].text) for i in item))
            for item in self.items
        ]
        # the seeds: the latest user message, and at half weight what the agent did since
        # (of its last steps): the request being worked on now
        seeds: dict[int, float] = {}
        starts = step_starts(self.units)
        if c.relevance_steps > 0 and starts:
            start = starts[max(0, len(starts) - c.relevance_steps)]
            if self.asks:
                start = max(start, self.asks[-1] + 1)
            for i in range(start, len(self.units)):
                seeds[item_of[i]] = 0.5
        if self.asks:
            seeds[item_of[self.asks[-1]]] = 1.0
        r = relevance(docs, seeds, hops=c.relevance_hops, decay=c.relevance_decay)
        for i in range(len(self.units)):
            out[i] = r[item_of[i]]
        return out

    def _weighted(self, info: Info) -> list[tuple[float, str]]:
        """(probability x weight, category) of the unit's scores (the weights of its value)."""
        if info.weighted is None:
            w = self.config.weights
            pairs = [(p * w.get(k, 0.0), k) for k, p in info.scores.items() if k in SHARES]
            total = sum(a for a, _k in pairs)
            # a category under 1% of the unit's weight changes no share that matters
            info.weighted = [(a, k) for a, k in pairs if a > 0.01 * total] or [(1.0, info.category)]
        return info.weighted

    def _shares(self, info: Info, col: int) -> float:
        """The probability-weighted share of the unit's value a rendition keeps (SHARES col)."""
        share = info.shares.get(col)
        if share is None:  # asked for each rendition of the unit: worked out once
            pairs = self._weighted(info)
            share = info.shares[col] = sum(a * SHARES[k][col] for a, k in pairs) / sum(
                a for a, _k in pairs
            )
        return share

    def _forms_of(self, info: Info) -> list[Form]:
        if info.forms is None:
            info.forms = self._forms(info.index)
        return info.forms

    def _forms(self, i: int) -> list[Form]:
        """Every rendition of unit i, verbatim first, dropped last."""
        info = self.info[i]
        u, n = info.unit, info.tokens
        forms = [Form("kept", n + info.opening, 1.0, u)]
        if u.kind != "thinking" and not u.extra.get("media_tokens"):
            if u.kind == "tool_call" or info.scores.get("code", 0.0) >= 0.2:
                self._add(forms, info, i, st.preserve_structure(u), "restructured", 0)
                if u.kind != "tool_call" and forms[-1].action == "restructured":
                    forms += self._fuller_structures(info, forms[-1])
            if u.kind != "tool_call" or st.long_values(u.text):
                forms += self._summary_forms(info)
            note = self._note(info)
            if note is not None:
                text, has_errors = note
                self._add(forms, info, i, text, "noted", 3 if has_errors else 2)
        forms.append(Form("dropped", 0, 0.0, None))
        return forms

    def _add(self, forms: list[Form], info: Info, i: int, text: str, action: str, col: int) -> None:
        if text == info.unit.text:
            return
        new = rewrite(info.unit, text, STRATEGY_OF[action])
        cost = self._cost(info, new)
        if cost < info.tokens * 0.9:
            forms.append(Form(action, cost + info.opening, self._shares(info, col), new))

    def _value(self, i: int, form: Form) -> float:
        """The value a rendition keeps: its share of the unit's, but no more than
        RENDITION_DENSITY times the unit's importance per token it costs (a note of a huge
        log holds a line, not a share of the log)."""
        info = self.info[i]
        if form.action == "kept":
            return info.value * form.share
        cap = RENDITION_DENSITY * info.density * max(0, form.cost - info.opening)
        return min(info.value * form.share, cap)

    def _fuller_structures(self, info: Info, base: Form) -> list[Form]:
        """The outline with more of each body back (its first 2, 3, 4, 6, ... lines, a
        shorter body whole): steps between the outline's share and verbatim, by the square
        root of the share of the extra tokens, that the allocator can stop at (so that code
        fills a limit). Their costs come from each line's count (the text is written only for
        the step chosen)."""
        if base.unit is None:
            return []
        runs = st.elided_runs(info.unit.text)  # each elided run's lines, in order
        count = self.costs.counter.count
        # Each run's lines are counted as the steps reach them (one tokenizer call a line),
        # blank and comment lines left out as st._elide leaves them out: the steps stop short
        # of verbatim, so the tail of the longest runs is never counted. A newline is a token
        # of its own before a line at the margin, and one with the indentation after it: so
        # counted, the estimates of the fuller outlines of the units of scripts/bench_ab.py's
        # first 200 sessions are right at the median (p10 2% under, p90 4% over), against 4%
        # over with a token for every newline and 7% with blank lines counted too.
        counted = [0] * len(runs)  # lines counted of each run...
        heads = [0] * len(runs)  # ...and their tokens
        out: list[Form] = []
        n, c0 = info.tokens + info.opening, base.cost

        def add(cost: int, extra: int, head: int, ahead: int = 0) -> None:
            if extra and cost > (out[-1].cost if out else c0) * 1.05:
                share = base.share + (1 - base.share) * (extra / (n - c0)) ** 0.5
                out.append(Form("restructured", cost, share, None, target=head, ahead=ahead))

        head, before = 0, 0  # the step below, and its extra tokens
        open_ = list(range(len(runs)))  # the runs not yet whole
        while open_ and head < 4096:
            step = st.next_head(head)
            was = list(heads)
            for j in open_:
                run = runs[j]
                upto = step if len(run) >= st.MIN_ELIDED + step else len(run)
                for line in run[counted[j] : upto]:
                    if not st.blank_or_comment(line):
                        heads[j] += count(line[: st.MAX_LINE_CHARS]) + (not line[:1].isspace())
                if upto == len(run) > counted[j]:  # whole: its marker line goes
                    heads[j] -= count(f"... ({len(run)} lines)") + 1
                counted[j] = upto
            open_ = [j for j in open_ if counted[j] < len(runs[j])]
            extra = sum(heads)
            if c0 + extra >= 0.97 * n:
                break
            # A step that puts back a good share of the text at once (every body a few lines
            # more) is also taken a few bodies at a time, from the top, each a tenth of the
            # rendition it grows from or 2.5% of the text, the less: steps a limit can stop
            # at, between the two.
            grain = max(1, min(n // 40, (c0 + before) // 10))
            parts = min(32, (extra - before) // grain)
            if parts > 1:
                gained, goal = before, before
                for j in range(len(runs)):
                    gained += heads[j] - was[j]
                    if gained >= goal + (extra - before) // parts and gained < extra:
                        add(c0 + gained, gained, head, ahead=j + 1)
                        goal = gained
            add(c0 + extra, extra, step)
            head, before = step, extra
        return out

    def _outline_written(self, info: Info, form: Form) -> Form:
        """A fuller outline (`_fuller_structures`) with its text, at its cost as counted."""
        new = rewrite(
            info.unit,
            st.preserve_structure(info.unit, form.target, form.ahead),
            "preserve_structure",
        )
        return dataclasses.replace(form, unit=new, cost=self._cost(info, new) + info.opening)

    def _cost(self, info: Info, unit: Unit) -> int:
        """A rendition's own cost as sent (without the opening it may be charged)."""
        return self.costs.cost(unit, info.paired, info.leading)

    def _note(self, info: Info) -> tuple[str, bool] | None:
        u = info.unit
        if u.kind == "tool_call":
            return st.call_placeholder(u), False
        errors = info.errors
        if errors:
            return errors, True
        if u.kind == "tool_result":
            return st.RESULT_PLACEHOLDER, False
        if st.is_phase_boundary(u):
            return st.phase_note(u), False
        return None

    def _first_summary(self, info: Info) -> int:
        """The shortest summary of a unit (whole cost, tokens): min_summary_tokens of text
        (small_min_summary_tokens, see below), and room for its error lines."""
        c = self.config
        # An input allocated exactly is small, and so is its limit: a finer ladder for the
        # units the allocation chooses for (a must-keep unit is summarized only on an overflow,
        # and then not to a dozen tokens), when summaries are free (a model is not called to
        # write a dozen tokens: a summary paid for is kept, and one that fills the limit to the
        # token leaves no room for what the renderer adds between units)
        small = self._exact and self._free_summaries and not (info.must_keep or info.forced)
        first = c.small_min_summary_tokens if small else c.min_summary_tokens
        errors = info.errors
        if errors:  # a summary holds the error lines, whatever else it keeps
            first = max(first, self.costs.counter.count(errors) + first // 2)
        return first + info.tokens - self.costs.counter.count(info.unit.text)

    def _summary_share(self, info: Info, target: int) -> float:
        """The share of a unit's value a summary of `target` tokens keeps (see SHARES): what
        its note keeps (a summary holds the error lines a note would) and part of the rest."""
        r = min(1.0, max(0, target) / max(1, info.tokens))
        pairs = self._weighted(info)
        if info.weight is None:
            info.weight = sum(a for a, _k in pairs)
        rest = sum(a * r ** SHARES[k][1] for a, k in pairs) / info.weight
        note = self._shares(info, 3 if info.errors else 2)
        return note + (1 - note) * rest

    def _summary_forms(self, info: Info) -> list[Form]:
        forms = []
        level = self._first_summary(info)
        while level <= 0.9 * info.tokens:
            share = self._summary_share(info, level)
            forms.append(Form("summarized", level + info.opening, share, None, target=level))
            level = max(level + 1, int(level * self.config.summary_step))
        return forms

    # -- the run ----------------------------------------------------------------------------

    def run(self, limit: int | None, before: int, eager: bool) -> CompressionResult:
        for info in self.info:
            # a must-keep unit keeps its fixed rendition unless there is an overflow: its
            # others are worked out only then (163 of the 1,288 units of the
            # scripts/bench_compress_speed.py session, 23% of its tokens)
            if info.fixed is None:
                self._forms_of(info)
        if limit is not None:
            self._fit_must_keep(limit)
        budget = limit
        caps = self._caps() if eager else None
        for attempt in range(6):
            choice = self._choose(budget, caps)
            self.planned = dict(choice)  # the allocation, summaries at their targets
            written = self._write_summaries(choice)
            out = self._output(choice)
            total = self.costs.total(out)
            if limit is None or budget is None:
                break
            if total > limit:
                if not self._free_summaries:  # paid for: kept, the rest gives way
                    self._locked.update((i, choice[i]) for i in written)
                # Each unit's cost is its own, rendered alone; what the renderer adds or
                # merges between units can differ a little: give back what the whole went
                # over (twice as much each time, so that a few rounds always settle it).
                budget -= (total - limit) << attempt
            elif written and total < limit * (0.95 if self._free_summaries else 1.0):
                # Summaries came in under their budgets: they stay as written (a model's is
                # paid for, and none is thrown away) and the room they left goes round again.
                # (The extractive summarizer fills its budget to a line or so: a second round
                # only when that leaves 5% of the limit, a few small units' whole lines.)
                self._locked.update((i, choice[i]) for i in written)
            else:
                break
        if limit is not None and total > limit:
            choice = self._last_resort(choice, limit)
            self.planned.update((i, f) for i, f in choice.items() if f.action == "dropped")
            out = self._output(choice)
            total = self.costs.total(out)
        if limit is not None and self._widen is not None and total < limit:
            choice, out, total = self._widened(self._widen, choice, out, total, limit)
        if limit is not None and self.units and not any(u.role != "system" for u in out):
            # an empty request is no request: say what could not be kept
            forced = sum(info.tokens for info in self.info if info.forced and signed(info.unit))
            if forced:
                raise MustKeepOverflow(forced, limit, "the last turn's signed thinking blocks")
        self.choice = choice
        return self.result(limit, before, tokens_after=total)

    def _unit_forms(self, i: int, caps: dict[int, int] | None) -> list[Form]:
        info = self.info[i]
        if i in self._locked:
            return [self._locked[i]]
        if info.fixed is not None:
            return [info.fixed]
        forms = self._forms_of(info)
        if info.error_floor:  # its error lines at the least
            forms = [f for f in forms if f.action != "dropped"]
        if caps is None:
            return forms
        return [f for f in forms if _order(f) <= caps[i]] or forms[-1:]

    def _item_options(
        self, item: list[int], caps: dict[int, int] | None = None
    ) -> list[tuple[Option, tuple[Form, ...]]]:
        """(cost, value) of the allowed combinations of the item's unit renditions that the
        allocator can choose: a pair is dropped whole or not at all, and of its kept
        combinations only those on the upper hull of both sides' (the allocator walks the
        hull; the whole product of two ladders of summaries would be their lengths squared)."""
        per_unit = [self._unit_forms(i, caps) for i in item]
        if len(item) == 1:
            return [(Option(f.cost, self._value(item[0], f)), (f,)) for f in per_unit[0]]
        i, j = item
        kept = [[f for f in forms if f.action != "dropped"] for forms in per_unit]
        combos: list[tuple[Form, ...]] = []
        if all(any(f.action == "dropped" for f in forms) for forms in per_unit):
            drops = [next(f for f in forms if f.action == "dropped") for forms in per_unit]
            combos.append((drops[0], drops[1]))
        if kept[0] and kept[1]:
            combos += self._hull_sum(i, kept[0], j, kept[1])
            if caps is not None:  # the strategies' own combination, exactly
                a = max(kept[0], key=lambda f: (_order(f) <= caps[i], -abs(_order(f) - caps[i])))
                b = max(kept[1], key=lambda f: (_order(f) <= caps[j], -abs(_order(f) - caps[j])))
                combos.append((a, b))
        if not combos:  # a must-keep side fixed one way, the other side the other way
            fixed = [self.info[k].fixed for k in item]
            if any(f is not None and f.action == "dropped" for f in fixed):
                why = "must-keep overflow: dropped with its tool partner"
                drop = Form("dropped", 0, 0.0, None, reason=why)
                combos = [(drop, drop)]
            else:  # the other side's note keeps the pair whole
                a, b = (self.info[k].fixed or self._forms_of(self.info[k])[-2] for k in item)
                combos = [(a, b)]
        out = []
        for combo in combos:
            cost = sum(f.cost for f in combo)
            value = sum(self._value(k, f) for k, f in zip(item, combo, strict=True))
            out.append((Option(cost, value), combo))
        return out

    def _hull_sum(self, i: int, a: list[Form], j: int, b: list[Form]) -> list[tuple[Form, Form]]:
        """The upper hull of the sums of two units' renditions: from both cheapest, each
        step the more valuable per token of the two sides' next hull steps."""

        def chain(k: int, forms: list[Form]) -> tuple[list[Form], list[float]]:
            opts = [Option(f.cost, self._value(k, f)) for f in forms]
            steps = hull(opts, cheapest(opts))
            return [forms[n] for n in steps], [opts[n].value for n in steps]

        (ca, va), (cb, vb) = chain(i, a), chain(j, b)

        def slope(c: list[Form], v: list[float], n: int) -> float:
            dc = c[n + 1].cost - c[n].cost
            return (v[n + 1] - v[n]) / dc if dc > 0 else float("inf")

        out = [(ca[0], cb[0])]
        x = y = 0
        while x + 1 < len(ca) or y + 1 < len(cb):
            if y + 1 >= len(cb) or (x + 1 < len(ca) and slope(ca, va, x) >= slope(cb, vb, y)):
                x += 1
            else:
                y += 1
            out.append((ca[x], cb[y]))
        return out

    def _choose(self, budget: int | None, caps: dict[int, int] | None) -> dict[int, Form]:
        options = [self._item_options(item, caps) for item in self.items]
        picks: list[int] | None
        if budget is None:  # no limit: each unit as its strategy says (its cap)
            assert caps is not None
            cap = caps

            def as_strategy(item: list[int], opts: list[tuple[Option, tuple[Form, ...]]]) -> int:
                def key(k: int) -> tuple[bool, float, int]:
                    forms = opts[k][1]
                    exact = all(_order(f) == cap[i] for i, f in zip(item, forms, strict=True))
                    return exact, opts[k][0].value, -opts[k][0].cost

                return max(range(len(opts)), key=key)

            picks = [as_strategy(item, o) for item, o in zip(self.items, options, strict=True)]
        elif self._exact or (
            len(options) <= EXACT_ITEMS
            and sum(len(o) for o in options) * (self._total + 1) <= EXACT_CELLS
        ):
            # A request needs a message: an output of system units alone is none (the CLI
            # leaves it out), so the allocation keeps a user or agent unit whenever one fits
            # (an Aider session whose start-up notes outweigh its one-word request).
            needs = [
                [
                    any(f.unit is not None and f.unit.role != "system" for f in forms)
                    for _o, forms in opts
                ]
                for opts in options
            ]
            picks = allocate_exact([[o for o, _f in opts] for opts in options], budget, needs)
        else:
            picks = allocate([[o for o, _f in opts] for opts in options], budget)
        if picks is None:  # the must-keep floor alone is over: keep the floor
            picks = [cheapest([o for o, _f in opts]) for opts in options]
        choice: dict[int, Form] = {}
        for item, opts, k in zip(self.items, options, picks, strict=True):
            for i, f in zip(item, opts[k][1], strict=True):
                choice[i] = f
        return choice

    def _caps(self) -> dict[int, int]:
        """Each unit's category strategy (TAXONOMY.md) as the most it may keep; a tool pair
        goes whole only when both sides' strategies drop it."""
        want = {i: self._strategy_form(info) for i, info in enumerate(self.info)}
        caps = {}
        for i, info in enumerate(self.info):
            w = want[i]
            j = self.links.get(i)
            if j is not None and w == "dropped" and want[j] != "dropped":
                w = "noted"  # the stand-in that keeps its partner's pair whole
            have = [f for f in self._forms_of(info) if f.action == w]
            if have and w == "summarized":  # the length the config asks, or the next below
                c = self.config
                overhead = info.tokens - self.costs.counter.count(info.unit.text)
                want_tokens = overhead + min(
                    c.max_summary_tokens,
                    max(c.min_summary_tokens, int(info.tokens * c.summary_ratio)),
                )
                fit = [f for f in have if f.target <= want_tokens] or have[:1]
                caps[i] = max(_order(f) for f in fit)
            elif have:
                caps[i] = min(_order(f) for f in have)
            else:  # none shorter than the unit itself (too short to summarize): verbatim
                caps[i] = _order(self._forms_of(info)[0])
        return caps

    def _strategy_form(self, info: Info) -> str:
        strategy = self.config.strategies[info.category]
        u = info.unit
        if u.kind == "thinking":  # kept or dropped whole
            return "dropped" if strategy in ("drop", "drop_or_minimal") else "kept"
        if strategy == "verbatim":
            return "kept"
        if strategy == "preserve_structure" or (strategy == "summarize" and u.kind == "tool_call"):
            return "restructured"
        if strategy == "summarize":
            return "summarized"
        if strategy == "drop_or_minimal" and st.is_phase_boundary(u):
            return "noted"
        return "dropped"

    # -- must-keep overflow -----------------------------------------------------------------

    def _fit_must_keep(self, limit: int) -> None:
        """Bring the must-keep units under the limit as `on_must_keep_overflow` says; raises
        MustKeepOverflow when they cannot be."""
        item_of = {i: k for k, item in enumerate(self.items) for i in item}
        floors = {
            k: self._item_floor(item)
            for k, item in enumerate(self.items)
            if any(self.info[i].fixed is not None or self.info[i].error_floor for i in item)
        }
        need = sum(floors.values())

        def fits() -> bool:
            # an empty output costs nothing at all, not even what the renderer adds
            return need == 0 or need + self._floor_opening() <= limit

        if fits():
            return
        policy = self.config.on_must_keep_overflow

        def release(i: int) -> bool:
            """Error i gives up its error lines; True once the floors fit."""
            nonlocal need
            k = item_of[i]
            self.info[i].error_floor = False
            floor = self._item_floor(self.items[k])
            need, floors[k] = need + floor - floors[k], floor
            return fits()

        errors = [i for i, info in enumerate(self.info) if info.error_floor]
        if policy != "summarize":
            # errors keep their error lines while the limit holds them beside the must-keep
            # units; when it does not, they give way first, the least value per token first
            for i in sorted(errors, key=lambda i: (self._per_token(i), -self.info[i].tokens, i)):
                if release(i):
                    return
            errors = []
        if policy == "error":
            raise MustKeepOverflow(need + self._floor_opening(), limit)
        # Signed thinking of the last turn goes back unchanged (the API checks it); thinking
        # without a signature is only ever replayed as text, so it gives way like the rest.
        movable = [
            i
            for i, info in enumerate(self.info)
            if info.fixed is not None
            and not info.pinned
            and not (info.forced and signed(info.unit))
        ]

        def change(i: int, form: Form) -> bool:
            """Give unit i a new rendition if that lowers the floor; True once it fits."""
            nonlocal need
            k = item_of[i]
            old = self.info[i].fixed
            self.info[i].fixed = form
            floor = self._item_floor(self.items[k])
            if floor >= floors[k] and form.action != "dropped":
                self.info[i].fixed = old  # saved nothing
                return False
            need += floor - floors[k]
            floors[k] = floor
            return fits()

        # A repeated copy gives way first: a pointer at the copy kept loses next to nothing.
        if policy != "truncate_oldest":
            for i, form in self._duplicates(movable):
                if change(i, form):
                    return
        # whatever the policy, the latest user message goes last and the first request just
        # before it: a request without the user's words is no request
        asks = self.asks

        def last(i: int) -> int:
            return 2 if asks and i == asks[-1] else 1 if asks and i == asks[0] else 0

        # A fixed sequence of steps, whatever the limit (so that a larger limit never changes
        # more): the units in an order, first each summarized at shorter and shorter lengths,
        # then each as a note, then each dropped; as many steps as the limit needs.
        if policy == "summarize":
            # The least value lost per token freed first, as the allocator would: a unit's
            # cost, summarized as far as it goes (a thinking unit: dropped), against an error's
            # error lines; errors mostly outlast the must-keep units' summaries (their lines
            # are few and dense), and a summary that frees a few tokens comes late. A long
            # unit's shortest summary gives way to its note before a short unit changes (the
            # summary of a long unit keeps little more than its note).
            moves = [(self._release_cost(i), i, "error") for i in errors]
            for i in movable:
                summary = self._summary_cost(i)
                moves.append((summary, i, "summarized"))
                note = self._note_cost(i)
                if note < float("inf"):
                    moves.append((max(summary, note), i, "noted"))
            step = {"summarized": 0, "noted": 1, "error": 2}
            moves.sort(key=lambda m: (last(m[1]), m[0], -self.info[m[1]].tokens, m[1], step[m[2]]))
            for _cost, i, move in moves:
                if move == "error":
                    if release(i):
                        return
                elif self._walk(i, move, change):
                    if move == "summarized":
                        self._widen = i  # may take the room the allocation leaves
                    return
            order = list(dict.fromkeys(i for _c, i, move in moves if move != "error"))
            passes: tuple[str, ...] = ("noted", "dropped")
        elif policy == "summarize_largest":
            order = sorted(movable, key=lambda i: (last(i), -self.info[i].tokens, i))
            passes = ("summarized", "noted", "dropped")
        else:
            order = sorted(movable, key=lambda i: (last(i), i))
            passes = ("dropped",)
        for action in passes:
            if action == "dropped" and self._drop_final_turn():
                need = sum(self._item_floor(item) for item in self.items)
                if need + self._floor_opening() <= limit:
                    return
            for i in order:
                if self._walk(i, action, change):
                    return
        if self._drop_final_turn():
            need = sum(self._item_floor(item) for item in self.items)
            if need + self._floor_opening() <= limit:
                return
        pinned = any(info.pinned for info in self.info)
        what = "the pinned units" if pinned else "the last turn's signed thinking blocks"
        raise MustKeepOverflow(need + self._floor_opening(), limit, what)

    def _walk(self, i: int, action: str, change: Callable[[int, Form], bool]) -> bool:
        """Unit i through one pass of an overflow, longest rendition first; True once the
        floors fit."""
        info = self.info[i]
        for form in self._overflow_steps(info, action):
            fixed = info.fixed
            if fixed is None or form.cost >= fixed.cost and action != "dropped":
                continue
            if form.action == "restructured" and form.unit is None:
                # a fuller outline's cost is estimated (a few % under, at times): the floor
                # it is to hold is counted on its text
                form = self._outline_written(info, form)
                if form.cost >= fixed.cost:
                    continue
            if change(i, form):
                return True
        return False

    def _summary_cost(self, i: int) -> float:
        """Value a must-keep unit loses per token it frees, summarized as far as summaries go
        (a thinking unit: dropped), CHANGE_TOKENS of its value for no longer being verbatim
        included; inf when no summary is shorter."""
        info = self.info[i]
        fixed = info.fixed
        steps = [
            f for f in self._overflow_steps(info, "summarized") if fixed and f.cost < fixed.cost
        ]
        if fixed is None or not steps:
            return float("inf")
        shortest = min(steps, key=lambda f: f.cost)
        kept = self._value(i, shortest) if shortest.action != "dropped" else 0.0
        lost = info.value - kept + info.density * CHANGE_TOKENS
        return lost / info.raised / max(1, fixed.cost - shortest.cost)

    def _note_cost(self, i: int) -> float:
        """Value a must-keep unit loses per token it frees going from its shortest summary to
        its note; inf when it has no summary or the note frees nothing."""
        info = self.info[i]
        fixed = info.fixed
        notes = self._overflow_steps(info, "noted")
        if fixed is None or not notes:
            return float("inf")
        steps = [f for f in self._overflow_steps(info, "summarized") if f.cost < fixed.cost]
        if not steps:
            return float("inf")
        base = min(steps, key=lambda f: f.cost)
        freed = base.cost - notes[0].cost
        if freed <= 0:
            return float("inf")
        lost = self._value(i, base) - self._value(i, notes[0])
        return max(0.0, lost) / info.raised / freed

    def _release_cost(self, i: int) -> float:
        """Value an error loses per token it frees when its error lines give way: error lines
        are as dense as a rendition gets (RENDITION_DENSITY), whether they are a note of a
        long log or the whole of a one-line error; but a long run of them no more in all than
        ERROR_LINES_DENSE such tokens (a test run's 40 FAILED lines are one failure, not 40
        decisions' worth)."""
        info = self.info[i]
        floor = min((f.cost for f in self._forms_of(info) if f.action != "dropped"), default=0)
        dense = min(1.0, ERROR_LINES_DENSE / max(1, floor - info.opening))
        return RENDITION_DENSITY * info.density / info.raised * dense

    def _drop_final_turn(self) -> bool:
        """A tool loop's signed thinking goes back unchanged or not at all, and its tool calls
        carry it (the renderer puts it back beside them): for an overflow, the loop's last
        step goes whole, before any must-keep unit is dropped. False when there is none."""
        turn = final_turn(self.units)
        if not any(self.info[i].forced and signed(self.info[i].unit) for i in turn):
            return False
        if all((f := self.info[i].fixed) is not None and f.action == "dropped" for i in turn):
            return False
        why = "must-keep overflow: the last step dropped whole (its signed thinking does not fit)"
        for i in turn:
            self.info[i].fixed = Form("dropped", 0, 0.0, None, reason=why)
        return True

    def _per_token(self, i: int) -> float:
        """Value per token, as the must-keep rules weigh it (relevance left out: it orders
        what the limit holds beside the must-keep units, not the must-keep units themselves)."""
        info = self.info[i]
        return info.value / info.raised / max(1, info.tokens)

    def _item_floor(self, item: list[int]) -> int:
        """The least an item costs with its must-keep units as they are fixed (without the
        opening charged to agent units: `_floor_opening` adds it once)."""
        return min(
            sum(f.cost - (self.info[i].opening if f.unit is not None or f.action != "dropped" else 0)
                for i, f in zip(item, forms, strict=True))
            for _o, forms in self._item_options(item)
        )  # fmt: skip

    def _floor_opening(self) -> int:
        """What the renderer adds to the must-keep units alone: the opening, when the first of
        them after the system prompt is the agent's."""
        for info in self.info:
            kept = info.fixed is not None and info.fixed.action != "dropped"
            if kept and info.unit.role != "system":
                return self.costs.opening() if info.unit.role == "assistant" else 0
        return 0

    def _duplicates(self, movable: list[int]) -> list[tuple[int, Form]]:
        """Later copies of a repeated must-keep text, as notes pointing at the first."""
        first: dict[tuple[str, str], int] = {}
        out = []
        for i in sorted(movable):
            info = self.info[i]
            u = info.unit
            if u.kind != "text" or info.tokens < self.config.dedup_min_tokens:
                continue
            key = (u.role, u.text)
            if key not in first:
                first[key] = i
                continue
            note = rewrite(u, st.duplicate_note(u), "duplicate")
            cost = self._cost(info, note) + info.opening
            reason = f"must-keep overflow: a repeat of {self.units[first[key]].id}, kept above"
            out.append((i, Form("noted", cost, 0.95, note, reason=reason)))
        return out

    def _overflow_steps(self, info: Info, action: str) -> list[Form]:
        """A must-keep unit's renditions for one pass of an overflow, longest first."""
        u = info.unit
        why = {
            "summarize": "lowest value per token first",
            "summarize_largest": "largest first",
            "truncate_oldest": "oldest first",
        }[self.config.on_must_keep_overflow]
        reason = f"must-keep overflow: {action} ({why})"
        if u.kind == "thinking":  # dropped whole, or kept: its summary is to go
            if action == "noted":
                return []
            return [Form("dropped", 0, 0.0, None, reason=f"must-keep overflow: dropped ({why})")]
        if action == "dropped":  # a tool unit's partner goes with it
            return [Form("dropped", 0, 0.0, None, reason=reason)]
        if action == "summarized":
            steps = [f for f in self._forms_of(info) if f.action in ("summarized", "restructured")]
            steps.sort(key=lambda f: -f.cost)
            return [dataclasses.replace(f, reason=reason) for f in steps]
        if u.kind == "tool_call":
            text = st.call_placeholder(u)
        elif u.kind == "tool_result":
            text = st.result_note(u)
        else:
            text = st.omitted_note(u)
        note = rewrite(u, text, "note")
        cost = self._cost(info, note) + info.opening
        return [Form("noted", cost, self._shares(info, 2), note, reason=reason)]

    def _last_resort(self, choice: dict[int, Form], limit: int) -> dict[int, Form]:
        """Over the limit after every correction (a renderer that adds far more than its
        units say): drop whole items, least value per token first, until it fits."""
        choice = dict(choice)

        def worth(k: int) -> tuple[float, int]:
            item = self.items[k]
            value = sum(self._value(i, choice[i]) for i in item)
            return value / max(1, sum(choice[i].cost for i in item)), k

        def paid(k: int) -> bool:  # a model's summary, written: kept while anything else can go
            return any(i in self._locked for i in self.items[k])

        def frees(k: int) -> bool:  # an empty unit costs nothing: dropping it frees nothing
            return any(choice[i].cost for i in self.items[k])

        order = sorted(
            (k for k, item in enumerate(self.items) if not any(self.info[i].forced for i in item)),
            key=lambda k: (
                any(self.info[i].must_keep for i in self.items[k]),
                paid(k),
                not frees(k),
                worth(k),
            ),
        )
        over = self.costs.total(self._output(choice)) - limit
        freed = 0
        for k in order:
            if over <= 0:
                break
            item = self.items[k]
            freed += sum(choice[i].cost for i in item)
            for i in item:
                why = "over the limit as rendered"
                if self.info[i].must_keep:
                    why = f"must-keep overflow: dropped ({why})"
                choice[i] = Form("dropped", 0, 0.0, None, reason=why)
            if freed >= over:  # by the units' own counts: check the whole
                over = self.costs.total(self._output(choice)) - limit
                freed = 0
        return choice

    # -- summaries ----------------------------------------------------------------------------

    def _widened(
        self, i: int, choice: dict[int, Form], out: list[Unit], total: int, limit: int
    ) -> tuple[dict[int, Form], list[Unit], int]:
        """The must-keep summary that made an overflow fit, longer by the room the allocation
        left (the summaries are 10% apart: a unit a few tokens over the limit loses no more
        than those few, and nothing the allocation chose gives way). Free summaries only: a
        model's is paid for and kept."""
        f, info = choice[i], self.info[i]
        if f.action != "summarized" or f.unit is None or not self._free_summaries:
            return choice, out, total
        target = min(f.cost - info.opening + limit - total, info.tokens - 1)
        wider = Form(
            "summarized",
            target + info.opening,
            self._summary_share(info, target),
            None,
            target=target,
            reason=f.reason,
        )
        new = {**choice, i: wider}
        self._write_summaries(new)
        more = self._output(new)
        n = self.costs.total(more)
        if not total < n <= limit:
            return choice, out, total
        self.planned[i] = wider
        return new, more, n

    def _salient(self, i: int) -> frozenset[str]:
        """The distinctive tokens a tool result holds that a later unit names again (a path
        the agent opens next, an id it passes on): what its summary keeps first."""
        if self._later is None:
            later: set[str] = set()
            self._later = [frozenset()] * len(self.units)
            for k in range(len(self.units) - 1, -1, -1):
                tokens = distinctive_tokens(self.units[k].text)
                if self.units[k].kind == "tool_result":
                    self._later[k] = tokens & later
                later |= tokens
        return self._later[i]

    def _write_summaries(self, choice: dict[int, Form]) -> list[int]:
        """Write the summaries the choice needs (only those), LLM calls concurrently; returns
        the units whose summary is new in the choice."""
        pending = [
            i
            for i, f in choice.items()
            if f.action == "summarized" and f.unit is None and (i, f.target) not in self._summaries
        ]
        # A tool call stays JSON: its long values are summarized in line, extractively.
        for i in pending:
            u = self.info[i].unit
            if u.kind == "tool_call":  # its cost beyond its (compact JSON) text: an empty input's
                empty = rewrite(u, "{}", "summarize")
                overhead = self._cost(self.info[i], empty) - self.costs.counter.count("{}")
                budget = choice[i].target - overhead
                text = st.summarize_call(
                    u.text, budget, self._extractive.summarize, self.costs.counter.count
                )
                self._summaries[i, choice[i].target] = text or st.call_placeholder(u)
        todo = [i for i in pending if self.info[i].unit.kind != "tool_call"]
        extractive = isinstance(self.summarizer, ExtractiveSummarizer)
        # A summary's text and what the renderer puts round it can tokenize a token or two
        # longer than apart: a paid summary asks for that much less, or one that fills its
        # budget is cut to size and thrown away (8 of 3,667 stand-in summaries in
        # scripts/bench_ab.py at 30% and 50%); a free one is cut again at no cost.
        margin = 0 if extractive else 2
        jobs = []
        for i in todo:
            f = choice[i]
            u = self.info[i].unit
            budget = f.target - (self.info[i].tokens - self.costs.counter.count(u.text)) - margin
            jobs.append((u.text, max(1, budget)))
        errors = {}
        if not extractive:  # a model may paraphrase error lines: they go first, verbatim
            for k, i in enumerate(todo):
                e = st.error_excerpt(self.info[i].unit.text)
                if e:
                    errors[k] = e
                    left = jobs[k][1] - self.costs.counter.count(e) - 1
                    jobs[k] = (self.info[i].unit.text, max(1, left))
        # an error whose lines leave the summary no room is its error lines: no call (its
        # answer would be thrown away)
        ask = [k for k, (_text, n) in enumerate(jobs) if k not in errors or n > 1]
        texts = [""] * len(jobs)
        if extractive:  # its lines naming what comes up again later rank higher
            answers = [self._extractive.summarize(*jobs[k], self._salient(todo[k])) for k in ask]
        else:
            answers = summarize_all(
                self.summarizer,
                [jobs[k] for k in ask],
                self.config.summary_concurrency,
                fallback=self._extractive,
            )
        for k, text in zip(ask, answers, strict=True):
            texts[k] = text
        for k, (i, text) in enumerate(zip(todo, texts, strict=True)):
            if k in errors:
                text = errors[k] + "\n" + text if jobs[k][1] > 1 else errors[k]
            self._summaries[i, choice[i].target] = text
        fresh = []
        for i, f in choice.items():
            if f.action == "restructured" and f.unit is None:  # a fuller outline: its text now
                choice[i] = self._outline_written(self.info[i], f)
            if f.action == "summarized" and f.unit is None:
                info = self.info[i]
                text = self._summaries[i, f.target]
                new = rewrite(info.unit, text, "summarize")
                cost = self._cost(info, new)
                if cost > f.target and info.unit.kind == "tool_call":  # keep it JSON: the
                    # fullest rendition of the call that fits (its structure, else its note)
                    fits = [
                        g
                        for g in self._forms_of(info)
                        if g.unit is not None
                        and g.action in ("restructured", "noted")
                        and g.cost - info.opening <= f.target
                    ]
                    best = max(fits, key=lambda g: g.cost, default=None)
                    text = best.unit.text if best is not None and best.unit is not None else ""
                    new = rewrite(info.unit, text or st.call_placeholder(info.unit), "summarize")
                    cost = self._cost(info, new)
                elif cost > f.target:  # a summarizer that overshot its budget: cut it to size
                    fallback = self._extractive
                    text = fallback.summarize(
                        text, max(1, f.target - (cost - self.costs.counter.count(text)))
                    )
                    new = rewrite(info.unit, text, "summarize")
                    cost = self._cost(info, new)
                elif self._free_summaries and info.unit.kind != "tool_call":
                    new, cost = self._top_up(i, f.target, new, cost)
                choice[i] = dataclasses.replace(f, unit=new, cost=cost + info.opening)
                fresh.append(i)
        return fresh

    def _top_up(self, i: int, target: int, new: Unit, cost: int) -> tuple[Unit, int]:
        """An extractive summary keeps whole lines, so it can come in well under its target:
        ask again for the room it left, halving the step when the answer overshoots (free: no
        model is called)."""
        info = self.info[i]
        overhead = info.tokens - self.costs.counter.count(info.unit.text)
        low, high = target - overhead, None  # budgets known to fit, and to overshoot
        for _try in range(3):
            if cost >= 0.95 * target:
                break
            budget = low + (target - cost) if high is None else (low + high) // 2
            if budget <= low or high is not None and budget >= high:
                break
            text = self._extractive.summarize(info.unit.text, budget, self._salient(i))
            more = rewrite(info.unit, text, "summarize")
            n = self._cost(info, more)
            if n > target:
                high = budget
                continue
            low = budget
            if n > cost:
                new, cost = more, n
                self._summaries[i, target] = text
        return new, cost

    # -- output -------------------------------------------------------------------------------

    def _output(self, choice: dict[int, Form]) -> list[Unit]:
        return [f.unit for i in range(len(self.units)) if (f := choice[i]).unit is not None]

    def result(
        self,
        limit: int | None,
        before: int,
        tokens_after: int | None = None,
        unchanged: bool = False,
    ) -> CompressionResult:
        if unchanged:
            self.choice = {
                i: Form("kept", info.tokens, 1.0, info.unit) for i, info in enumerate(self.info)
            }
            self.planned = self.choice
        before_by: Counter = Counter()
        after_by: Counter = Counter()
        records = []
        units = []
        for i, info in enumerate(self.info):
            f = self.choice[i]
            before_by[info.category] += info.tokens
            out_id = None
            if f.unit is not None:
                out = f.unit
                if out.extra.get("category") != info.category:
                    out = dataclasses.replace(out, extra={**out.extra, "category": info.category})
                units.append(out)
                out_id = out.id
                after_by[info.category] += f.cost - info.opening
            records.append(
                UnitRecord(
                    info.unit.id,
                    info.category,
                    f.action,
                    info.tokens,
                    f.cost - info.opening if f.unit is not None else 0,
                    out_id,
                    info.scores,
                    info.must_keep or info.forced,
                    f.reason,
                    info.error_floor,
                    round(info.relevance, 3),
                )
            )
        return CompressionResult(
            units=units,
            records=records,
            token_limit=limit,
            tokens_before=before,
            tokens_after=before if unchanged else (tokens_after or 0),
            tokens_before_by_category={c: before_by[c] for c in CATEGORIES if before_by[c]},
            tokens_after_by_category={c: after_by[c] for c in CATEGORIES if after_by[c]},
            target=self.costs.target,
            warnings=list(self.warnings),
            value_before=sum(info.value for info in self.info),
            value_after=sum(self._value(i, self.planned[i]) for i in range(len(self.info))),
        )


STRATEGY_OF = {"restructured": "preserve_structure", "summarized": "summarize", "noted": "note"}


def _order(f: Form) -> int:
    """A rendition's place from dropped (0) to verbatim, summaries by length."""
    extent = f.target if f.action == "summarized" else f.cost if f.action == "restructured" else 0
    # (a fuller outline's `target` is the lines it keeps of each body: its cost orders it)
    return RANK[f.action] * 1_000_000_000 + extent


def rewrite(unit: Unit, text: str, strategy: str) -> Unit:
    """A unit with new text: marked with its strategy and the ids it stands for, without the
    raw provider block it was read from (contract C1: the renderer must not emit it)."""
    extra = {k: v for k, v in unit.extra.items() if k != "raw"}
    extra["strategy"] = strategy
    extra["source_ids"] = list(unit.extra.get("source_ids") or [unit.id])
    return dataclasses.replace(unit, text=text, extra=extra)


# --- tool pairs ---------------------------------------------------------------------------------


def orphan_call_ids(units: Iterable[Unit]) -> set[str]:
    """Call ids that have a tool call without its result or a result without its call."""
    calls: Counter = Counter()
    results: Counter = Counter()
    for u in units:
        if u.call_id and u.kind == "tool_call":
            calls[u.call_id] += 1
        elif u.call_id and u.kind == "tool_result":
            results[u.call_id] += 1
    return {cid for cid in calls.keys() | results.keys() if calls[cid] != results[cid]}


def pair_links(units: Sequence[Unit]) -> dict[int, int]:
    """index -> partner index for each tool call and its result: the i-th call with an id is
    paired with the i-th result with that id, when the result comes after the call."""
    calls: dict[str, list[int]] = {}
    results: dict[str, list[int]] = {}
    for i, u in enumerate(units):
        if u.call_id:
            if u.kind == "tool_call":
                calls.setdefault(u.call_id, []).append(i)
            elif u.kind == "tool_result":
                results.setdefault(u.call_id, []).append(i)
    links = {}
    for cid, cs in calls.items():
        for i, j in zip(cs, results.get(cid, ()), strict=False):
            if i < j:
                links[i], links[j] = j, i
    return links


def _adjacent_pairs(units: Sequence[Unit], links: dict[int, int]) -> set[int]:
    """The paired units the renderer keeps paired: the result in the user-side run right after
    the agent's run that holds the call (an agent reply in between leaves the call answered by
    a stand-in and the result as text)."""
    agent_before = [0]  # agent units before each position
    for u in units:
        agent_before.append(agent_before[-1] + (u.role == "assistant"))
    first_other = [len(units)] * (len(units) + 1)  # the first non-agent unit at or after k
    for k in range(len(units) - 1, -1, -1):
        first_other[k] = k if units[k].role != "assistant" else first_other[k + 1]
    out = set()
    for i, j in links.items():
        if i < j:
            f = first_other[i + 1]
            if f >= j or agent_before[j] == agent_before[f]:
                out |= {i, j}
    return out


def final_turn(units: Sequence[Unit]) -> range:
    """The agent's final message and the tool results that answer it, when the conversation
    ends with them (a tool loop in progress): the API wants that message's thinking blocks
    back unchanged, and the renderer puts them back beside its tool calls."""
    end = len(units)
    k = end
    while k and units[k - 1].kind == "tool_result":
        k -= 1
    if k == end:
        return range(0)  # it ends with the user's words or the agent's answer
    start = k
    while start and units[start - 1].role == "assistant":
        start -= 1
    return range(start, end)


def step_starts(units: Sequence[Unit]) -> list[int]:
    """Where each agent step begins: a user's text after other roles, or the agent's reply
    after input."""
    starts = []
    for i, u in enumerate(units):
        prev = units[i - 1].role if i else None
        if (u.role == "assistant" and prev != "assistant") or (
            u.role == "user" and u.kind == "text" and prev not in ("user", None)
        ):
            starts.append(i)
    return starts


def default_classifier() -> Any:
    """The shipped classifier, else the heuristic labeller (see `load_categorizer`)."""
    return load_categorizer()


__all__ = [
    "ACTIONS",
    "DEFAULT_WEIGHTS",
    "OVERFLOW_POLICIES",
    "CompressionResult",
    "CompressorConfig",
    "MustKeepOverflow",
    "SemanticCompressor",
    "UnitRecord",
    "orphan_call_ids",
    "pair_links",
    "resolve_limit",
]
