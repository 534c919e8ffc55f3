"""The SemanticCompressor: compress a transcript by importance category under a token limit.

    compressor = SemanticCompressor()                 # shipped classifier, extractive summaries
    result = compressor.compress(units, token_limit=20_000)
    result.units, result.tokens_before, result.tokens_after, result.records

It does only as much as the limit needs, in tiers, cheapest loss first: (1) each category's
strategy (TAXONOMY.md), least important category first; (2) runs of consecutive
same-category units merged into one summary, oldest first; (3) the remaining units that are
not must-keep dropped; (4) the soft must-keep units (those the classifier gives the must-keep
categories at least `protect_threshold` together) dropped. Within tiers 1, 3 and 4 the
units the classifier finds least likely to be must-keep go first (in steps of 5%), oldest
first among equals: a misjudged decision outlives the tool logs around it.
Must-keep units (strategy `verbatim`) are never changed: when they alone exceed the limit it
raises `MustKeepOverflow`, or follows `on_must_keep_overflow` ("summarize_largest",
"truncate_oldest"). A tool call and its result are kept, replaced or
dropped together, so the result is always valid for the provider APIs. Records name what
happened to each input unit: kept, restructured, summarized, noted (a one-line note or a
pair's stand-in), merged or dropped. Losses the limit turned out not to need are undone at
the end, the likeliest must-keep units first.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from winnow.data.schema import CATEGORIES, DEFAULT_STRATEGIES, Unit, as_unit
from winnow.serving import strategies as st
from winnow.serving.summarizers import ExtractiveSummarizer, Summarizer
from winnow.serving.tokens import TokenCounter, default_token_counter, unit_tokens

log = logging.getLogger(__name__)

ACTIONS = ("kept", "restructured", "summarized", "noted", "merged", "dropped")
OVERFLOW_POLICIES = ("error", "summarize_largest", "truncate_oldest")


class MustKeepOverflow(ValueError):
    """The must-keep units alone do not fit the token limit."""

    def __init__(self, needed: int, limit: int):
        self.needed, self.limit = needed, limit
        super().__init__(
            f"the must-keep units alone need {needed} tokens, over the limit of {limit} "
            f"(raise the limit, or use on_must_keep_overflow='truncate_oldest')"
        )


@dataclass
class CompressorConfig:
    """How hard each category is compressed, and what happens when must-keep units overflow."""

    strategies: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_STRATEGIES))
    # When the must-keep units alone exceed the limit: "error" raises MustKeepOverflow;
    # "summarize_largest" summarizes must-keep units, largest first (one long pasted spec
    # condensed saves many short decisions), then drops the oldest units if still over;
    # "truncate_oldest" drops the oldest units.
    on_must_keep_overflow: str = "error"
    summary_ratio: float = 0.25  # a summarized unit keeps about this share of its tokens...
    min_summary_tokens: int = 48  # ...but at least this many: shorter units are left alone
    max_summary_tokens: int = 400
    group_summary_tokens: int = 120  # what a merged run of same-category units shrinks to
    # A unit the classifier gives the must-keep categories together at least this probability
    # is kept verbatim too, whatever its top category: losing a must-keep unit costs more than
    # keeping a status note. None: the top category alone decides.
    protect_threshold: float | None = 0.3

    def __post_init__(self) -> None:
        self.strategies = {**DEFAULT_STRATEGIES, **self.strategies}
        for cat, strategy in self.strategies.items():
            if cat not in CATEGORIES:
                raise ValueError(f"unknown category {cat!r} in strategies")
            if strategy not in st.STRATEGIES:
                raise ValueError(
                    f"unknown strategy {strategy!r} for {cat!r}; one of {st.STRATEGIES}"
                )
        if self.on_must_keep_overflow not in OVERFLOW_POLICIES:
            raise ValueError(f"on_must_keep_overflow must be one of {OVERFLOW_POLICIES}")

    @property
    def protected(self) -> frozenset[str]:
        """Categories kept verbatim whatever the limit: the must-keep set."""
        return frozenset(c for c, s in self.strategies.items() if s == "verbatim")


@dataclass(frozen=True)
class UnitRecord:
    """What happened to one input unit; `output_id` names the unit it became (None if dropped)."""

    id: str
    category: str
    action: str
    tokens_before: int
    tokens_after: int
    output_id: str | None


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

    @property
    def fits(self) -> bool:
        return self.token_limit is None or self.tokens_after <= self.token_limit

    @property
    def actions(self) -> Counter:
        """How many input units were kept, restructured, summarized, noted, merged, dropped."""
        return Counter(r.action for r in self.records)

    def to_anthropic(self, **kw: Any) -> dict[str, Any]:
        """The compressed units as a complete Anthropic Messages request: read from one, every
        field and block winnow did not change is as it was (`render.to_anthropic` takes `kw`)."""
        from winnow.serving.render import to_anthropic

        return to_anthropic(self.units, **kw)

    def to_openai(self, **kw: Any) -> dict[str, Any]:
        """The compressed units as a complete OpenAI chat request (see `to_anthropic`)."""
        from winnow.serving.render import to_openai

        return to_openai(self.units, **kw)


class SemanticCompressor:
    """Compresses transcripts by importance category; see the module docstring for the tiers."""

    def __init__(
        self,
        classifier: Any = None,
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

    @property
    def classifier(self) -> Any:
        """The classifier for units without a category; loaded on first use."""
        if self._classifier is None:
            self._classifier = default_classifier()
        return self._classifier

    def categorize(self, units: Sequence[Unit]) -> list[str]:
        """Each unit's category: its own `extra['category']`, else the classifier's."""
        return [c for c, _scores in self._labels(units)]

    def must_keep(self, units: Sequence[Unit]) -> list[bool]:
        """Which units are kept verbatim whatever the limit (see `CompressorConfig.protect_threshold`)."""
        return [self._protected(self._keep(c, sc)) for c, sc in self._labels(units)]

    def _labels(self, units: Sequence[Unit]) -> list[tuple[str, dict[str, float] | None]]:
        """(category, scores or None) per unit: the unit's own, else the classifier's."""
        out: list[Any] = [(u.extra.get("category"), u.extra.get("scores")) for u in units]
        todo = [i for i, (c, _sc) in enumerate(out) if c not in CATEGORIES]
        if todo:
            clf = self.classifier
            predict = getattr(clf, "predict", None) or clf.label  # a classifier or the Labeler
            preds = predict([units[i] for i in todo])
            for i, p in zip(todo, preds, strict=True):
                out[i] = (
                    (p, None) if isinstance(p, str) else (p.category, getattr(p, "scores", None))
                )
        return out

    def _keep(self, category: str, scores: dict[str, float] | None) -> float:
        """How likely the unit is must-keep: 1 for a must-keep category, else the classifier's
        must-keep probability (0 without scores)."""
        protected = self.config.protected
        if category in protected:
            return 1.0
        if not scores:
            return 0.0
        return min(sum(scores.get(c, 0.0) for c in protected), 0.999)  # 1 is for sure must-keep

    def _protected(self, keep: float) -> bool:
        t = self.config.protect_threshold
        return keep >= 1.0 or (t is not None and keep >= t)

    def compress(
        self, units: Iterable[Unit | dict], token_limit: int | None = None, *, eager: bool = False
    ) -> CompressionResult:
        """Compress the units of one conversation, in order, under `token_limit` tokens,
        doing only what the limit needs.

        With `eager` (or no limit), every category's strategy is applied in full first.
        """
        units = [as_unit(u) for u in units]
        plan = _Plan(units, self._labels(units), self)
        if eager or token_limit is None:
            plan.apply_strategies(None)
        if token_limit is not None and plan.total > token_limit:
            # fail before any summary is paid for
            protected = sum(s.tokens for s in plan.slots if s.protected and not s.soft)
            if protected > token_limit and self.config.on_must_keep_overflow == "error":
                raise MustKeepOverflow(protected, token_limit)
            plan.fit(token_limit)
            if not eager:
                plan.refill(token_limit)
        return plan.result(token_limit)


def default_classifier() -> Any:
    """The shipped ImportanceClassifier; the heuristic labeller when no model is installed."""
    try:
        from winnow.serving.classifier import ImportanceClassifier

        return ImportanceClassifier.load()
    except Exception as e:  # noqa: BLE001 - missing model, module or runtime: use the fallback
        first_error = e
    log.warning("no shipped classifier (%s); categories from the heuristic labeller", first_error)
    try:
        from winnow.data.labeling import Labeler

        return Labeler()
    except Exception:  # noqa: BLE001
        raise RuntimeError(
            f"no classifier available ({first_error}); pass classifier= or label units with extra['category']"
        ) from first_error


# --- the plan: one slot per input unit --------------------------------------------------------


@dataclass
class _Slot:
    unit: Unit
    category: str
    protected: bool
    tokens_before: int
    out: Unit | None
    tokens: int
    action: str = "kept"
    placeholder: bool = False  # a stand-in that only keeps a tool pair whole
    tried: bool = False  # its category's strategy has been applied
    soft: bool = False  # protected by the classifier's must-keep probability only
    keep_p: float = 0.0  # its must-keep probability (1 for a must-keep category)
    into: str | None = None  # merged: the id of the unit it went into
    members: list[int] = field(default_factory=list)  # merged group head: the other members


class _Plan:
    """The evolving output: slots in input order, a running token total, pair links."""

    def __init__(
        self,
        units: list[Unit],
        labels: list[tuple[str, dict[str, float] | None]],
        comp: SemanticCompressor,
    ):
        self.comp = comp
        self.config = comp.config
        self.slots: list[_Slot] = []
        for u, (c, scores) in zip(units, labels, strict=True):
            if u.extra.get("category") != c:
                u = dataclasses.replace(u, extra={**u.extra, "category": c})
            n = unit_tokens(u, comp.counter)
            keep = comp._keep(c, scores)
            protected = comp._protected(keep)
            self.slots.append(
                _Slot(u, c, protected, n, u, n, soft=protected and keep < 1, keep_p=keep)
            )
        self.total = sum(s.tokens for s in self.slots)
        self.partner = pair_links(units)

    # -- tiers -----------------------------------------------------------------------------

    def fit(self, limit: int) -> None:
        for step in (self.apply_strategies, self.merge_runs, self.drop_unprotected, self.drop_soft):
            if step(limit):
                return
        if self.total <= limit:
            return
        policy = self.config.on_must_keep_overflow
        if policy == "error":
            raise MustKeepOverflow(self.total, limit)
        if policy == "summarize_largest" and self.summarize_largest(limit):
            return
        for i, s in enumerate(self.slots):  # truncate_oldest: the last resort, recorded as dropped
            if s.out is not None:
                self._drop(i, force=True)
                if self.total <= limit:
                    return

    def apply_strategies(self, limit: int | None) -> bool:
        """Each category's strategy, least important category first, oldest unit first."""
        for cat in reversed(CATEGORIES):
            strategy = self.config.strategies[cat]
            if strategy == "verbatim":
                continue
            for i in self._loss_order:
                s = self.slots[i]
                if s.category != cat or s.out is None or s.action != "kept" or s.tried:
                    continue
                if s.protected:  # kept verbatim on the classifier's must-keep probability
                    continue
                s.tried = True  # a strategy that saved nothing is not paid for twice
                self._apply(i, strategy, None if limit is None else self.total - limit)
                if limit is not None and self.total <= limit:
                    return True
        return False

    def merge_runs(self, limit: int) -> bool:
        """Runs of consecutive same-category, same-role units become one summary each."""
        for run in self._runs():
            tokens = sum(self.slots[i].tokens for i in run)
            if tokens <= self.config.group_summary_tokens:
                continue
            # shrink to the group budget, or less hard when the limit needs less
            self._merge(run, max(self.config.group_summary_tokens, tokens - (self.total - limit)))
            if self.total <= limit:
                return True
        return False

    def drop_soft(self, limit: int) -> bool:
        """Soft must-keep units: before any sure one is lost."""
        for i in self._loss_order:
            s = self.slots[i]
            if s.soft and s.out is not None and not s.placeholder:
                self._drop(i)
                if self.total <= limit:
                    return True
        return self.total <= limit

    def drop_unprotected(self, limit: int) -> bool:
        for i in self._loss_order:
            s = self.slots[i]
            if s.out is not None and not s.protected and not s.placeholder:
                self._drop(i)
                if self.total <= limit:
                    return True
        return self.total <= limit

    def summarize_largest(self, limit: int) -> bool:
        """Overflow: summarize the must-keep units still verbatim, largest first."""
        order = sorted(
            (i for i, s in enumerate(self.slots) if s.out is not None and s.action == "kept"),
            key=lambda i: -self.slots[i].tokens,
        )
        for i in order:
            s = self.slots[i]
            if s.unit.kind == "tool_call" or s.category == "code":  # keeps its JSON / structure
                self._apply(i, "preserve_structure")
            else:  # as hard as the limit needs, down to a minimal summary
                self._summarize(
                    i, max(self.config.min_summary_tokens, s.tokens - (self.total - limit))
                )
            if self.total <= limit:
                return True
        return False

    def refill(self, limit: int) -> None:
        """Undo losses the limit turned out not to need (a tier stops at the unit that brings
        the total under the limit, which can free far more than needed): the units most likely
        must-keep first, newest first among equals, each back verbatim if it still fits.
        Merged units stay merged; a dropped tool unit stays dropped with its partner."""
        for i in reversed(self._loss_order):
            s = self.slots[i]
            if s.action == "kept" or s.into is not None:  # verbatim, or inside a summary
                continue
            if s.out is None and i in self.partner:  # its pair went as a whole
                continue
            if s.tokens_before - s.tokens <= limit - self.total:
                self.total += s.tokens_before - s.tokens
                s.out, s.tokens, s.action, s.placeholder = s.unit, s.tokens_before, "kept", False

    @functools.cached_property
    def _loss_order(self) -> list[int]:
        """Slot indices, the least likely must-keep first (5% steps), oldest first among equals."""
        return sorted(range(len(self.slots)), key=lambda i: (int(self.slots[i].keep_p * 20), i))

    # -- actions ---------------------------------------------------------------------------

    def _apply(self, i: int, strategy: str, excess: int | None = None) -> None:
        """Apply a strategy to slot i; a summary shrinks no further than `excess` tokens need."""
        s = self.slots[i]
        u = s.unit
        if strategy == "drop":
            self._drop(i)
        elif strategy == "drop_or_minimal":
            if u.kind in ("text", "thinking") and st.is_phase_boundary(u):
                self._set(i, st.phase_note(u), "noted", "drop_or_minimal")
            else:
                self._drop(i)
        elif strategy == "preserve_structure" or (
            strategy == "summarize" and u.kind == "tool_call"
        ):
            # a tool call's input must stay JSON: shrink its values rather than summarize it
            self._set(i, st.preserve_structure(u), "restructured", "preserve_structure")
        elif strategy == "summarize":
            c = self.config
            target = min(
                c.max_summary_tokens, max(c.min_summary_tokens, int(s.tokens * c.summary_ratio))
            )
            if excess is not None:
                target = max(target, s.tokens - excess)
            self._summarize(i, target)

    def _summarize(self, i: int, target: int) -> None:
        """Summarize slot i's text down to about `target` tokens (the unit's, all told)."""
        s = self.slots[i]
        if s.tokens > target:
            text = self.comp.summarizer.summarize(
                s.unit.text, target - (s.tokens - self._count(s.unit.text))
            )
            self._set(i, text, "summarized", "summarize")

    def _set(
        self, i: int, text: str, action: str, strategy: str, placeholder: bool = False
    ) -> None:
        """Replace slot i's output text, if that saves tokens."""
        s = self.slots[i]
        new = dataclasses.replace(
            s.unit,
            text=text,
            extra={**s.unit.extra, "strategy": strategy, "source_ids": _sources(s.unit)},
        )
        n = unit_tokens(new, self.comp.counter)
        if n >= s.tokens:  # no saving: keep the text (as the stand-in, when one is asked for)
            s.placeholder = s.placeholder or placeholder
            return
        self.total += n - s.tokens
        s.out, s.tokens, s.action, s.placeholder = new, n, action, placeholder

    def _remove(self, i: int, action: str = "dropped", into: str | None = None) -> None:
        s = self.slots[i]
        self.total -= s.tokens
        s.out, s.tokens, s.action, s.into, s.placeholder = None, 0, action, into, False

    def _drop(self, i: int, force: bool = False) -> None:
        """Drop slot i; a tool unit whose partner stays substantive becomes a stand-in instead."""
        s = self.slots[i]
        j = self.partner.get(i)
        p = self.slots[j] if j is not None else None
        if p is not None and p.out is not None and not p.placeholder and not force:
            if not s.placeholder:
                text = (
                    st.call_placeholder(s.unit)
                    if s.unit.kind == "tool_call"
                    else st.RESULT_PLACEHOLDER
                )
                self._set(i, text, "noted", "placeholder", placeholder=True)
            return
        for k in [i, *s.members]:
            self._remove(k)
        if p is not None and p.out is not None:  # its stand-in (or, forced, the partner itself)
            if force:
                self._drop(j, force=True)
            else:
                self._remove(j)

    def _runs(self) -> list[list[int]]:
        """Runs of live, unprotected, mergeable units with the same (category, role), in order."""
        runs: list[list[int]] = []
        key = None
        for i, s in enumerate(self.slots):
            if s.out is None:
                continue  # dropped units do not break a run: they are gone from the output
            k = (s.category, s.unit.role) if self._mergeable(i) else None
            if k is not None and k == key:
                runs[-1].append(i)
            elif k is not None:
                runs.append([i])
            key = k
        return runs

    def _mergeable(self, i: int) -> bool:
        s = self.slots[i]
        if s.protected or s.placeholder or s.members:
            return False
        j = self.partner.get(i)
        # a tool unit may become text only when its partner is gone or a mere stand-in
        return j is None or self.slots[j].out is None or self.slots[j].placeholder

    def _merge(self, run: list[int], budget: int) -> None:
        head = self.slots[run[0]].unit
        parts = []
        for i in run:
            u = self.slots[i].out
            assert u is not None
            label = f"[{u.tool_name} result]\n" if u.kind == "tool_result" and u.tool_name else ""
            parts.append(label + u.text)
        # a summary is prose: tool units become text (their stand-ins go), results speak as user
        alone = len(run) == 1 and head.kind in ("text", "thinking")
        merged = Unit(
            id=head.id if len(run) == 1 else f"{head.id}+{len(run) - 1}",
            session_id=head.session_id,
            index=head.index,
            role="user" if head.role == "tool" else head.role,
            kind=head.kind if alone else "text",
            text="",
            timestamp=head.timestamp,
            extra={
                "category": self.slots[run[0]].category,
                "strategy": "summarize",
                "source_ids": [sid for i in run for sid in _sources(self.slots[i].unit)],
            },
        )
        overhead = unit_tokens(merged, self.comp.counter)
        merged.text = self.comp.summarizer.summarize(parts, max(1, budget - overhead))
        n = unit_tokens(merged, self.comp.counter)
        members = []
        for i in run:
            self._remove(i, "merged", merged.id)
            members.append(i)
            j = self.partner.get(i)
            if j is not None and self.slots[j].out is not None:  # its stand-in goes with it
                self._remove(j, "merged", merged.id)
                members.append(j)
        h = self.slots[run[0]]
        h.out, h.tokens, h.members = merged, n, members[1:]
        h.action = "summarized" if len(run) == 1 else "merged"
        h.into = merged.id
        self.total += n

    def _count(self, text: str) -> int:
        return self.comp.counter.count(text)

    # -- result ----------------------------------------------------------------------------

    def result(self, limit: int | None) -> CompressionResult:
        before: Counter = Counter()
        after: Counter = Counter()
        records = []
        units = []
        for s in self.slots:
            before[s.category] += s.tokens_before
            if s.out is not None:
                units.append(s.out)
                after[s.category] += s.tokens
            out_id = s.out.id if s.out is not None else s.into
            tokens = s.tokens if s.out is not None else 0
            records.append(
                UnitRecord(s.unit.id, s.category, s.action, s.tokens_before, tokens, out_id)
            )
        return CompressionResult(
            units=units,
            records=records,
            token_limit=limit,
            tokens_before=sum(before.values()),
            tokens_after=self.total,
            tokens_before_by_category={c: before[c] for c in CATEGORIES if before[c]},
            tokens_after_by_category={c: after[c] for c in CATEGORIES if after[c]},
        )


def _sources(unit: Unit) -> list[str]:
    """The input units a unit stands for: its own id, or those of the units it was made from."""
    return list(unit.extra.get("source_ids") or [unit.id])


def orphan_call_ids(units: Iterable[Unit]) -> set[str]:
    """Call ids that have a tool call without its result or a result without its call."""
    calls: set[str] = set()
    results: set[str] = set()
    for u in units:
        if u.call_id and u.kind == "tool_call":
            calls.add(u.call_id)
        elif u.call_id and u.kind == "tool_result":
            results.add(u.call_id)
    return calls ^ results


def pair_links(units: Sequence[Unit]) -> dict[int, int]:
    """index -> partner index, for each tool call whose result is also present (first of each)."""
    calls: dict[str, int] = {}
    results: dict[str, int] = {}
    for i, u in enumerate(units):
        if u.call_id:
            if u.kind == "tool_call":
                calls.setdefault(u.call_id, i)
            elif u.kind == "tool_result":
                results.setdefault(u.call_id, i)
    links = {}
    for cid, i in calls.items():
        j = results.get(cid)
        if j is not None:
            links[i], links[j] = j, i
    return links


__all__ = [
    "ACTIONS",
    "CompressionResult",
    "CompressorConfig",
    "MustKeepOverflow",
    "SemanticCompressor",
    "UnitRecord",
    "orphan_call_ids",
    "pair_links",
]
