"""TTL-aware idle compaction: compact while the user is away, just before the prompt cache goes cold.

    client = anthropic.AsyncAnthropic()                # or openai.AsyncOpenAI()
    compactor = IdleCompactor(conversation, client, IdleConfig(), audit=AuditLog("runs", "s1"))
    ...after each answer:   compactor.turn_ended(completion.usage)    # arms the timer, or says why not
    ...on user input:       compactor.user_activity()                 # preempts; lazy truncation if cold

When a turn ends with a big enough context (and enough new tokens since the last compaction,
and a positive expected value, see economics.py), a timer fires at TTL - safety. The
compaction request is the live conversation byte for byte with the instruction appended as
the last user turn, so it reads the warm cache. It runs on a snapshot as a task: any user
activity cancels it at once, mid-stream, and the conversation is untouched. A summary is
applied only when it is whole: the stream reached its end, the model stopped on its own
(`end_turn`, not `max_tokens`) and every section asked for is there; the words asked for are
derived from the request's `max_tokens`, which cannot change without changing the cached
prefix. Anything else aborts, is audited with the reason, and changes nothing. On success the
history becomes: a state summary (with the requirement / constraint / decision units carried
verbatim and the file registry re-listed) followed by the last N raw turns; the raw transcript
is archived first and the mutation audited. If the user comes back after the cache expired
without a compaction, old tool results become placeholders instead (the cold prefill costs
the same either way, so this is free), except errors and decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import logging
import time
from dataclasses import dataclass
from hashlib import sha256
from typing import Any, Protocol

from winnow.data.schema import CATEGORY_INDEX, Unit
from winnow.runtime.archive import AuditLog
from winnow.runtime.budget import context_tokens
from winnow.runtime.economics import CacheProfile, estimate, profile_for
from winnow.runtime.llm import Completion, Conversation, LLMError, client_api, complete, encode
from winnow.runtime.transcript import FileRegistry, replace_tool_result, to_units, turn_starts

__all__ = [
    "IdleCompactor",
    "IdleConfig",
    "SystemClock",
    "VirtualClock",
    "incomplete",
    "session_ttl",
]

log = logging.getLogger(__name__)

ACTIVE, ARMED, COMPACTING, COMPACTED = "active", "armed", "compacting", "compacted_idle"

# The sections a summary must hold, each with what goes in it; a summary missing one is
# not applied (a model that ran out of room drops the last ones first).
SECTIONS = (
    ("Goal", ""),
    ("Completed changes", ""),
    ("Active working files", "(path and line ranges, what each part holds)"),
    ("Ruled-out dead ends", "(what was tried and why it failed)"),
    ("Unresolved failures", "(error lines verbatim)"),
    ("Pending todos", ""),
    ("Next immediate step", ""),
)
INSTRUCTION = (
    "The user is away. Before the history above is removed, write the state of this session so "
    "that the work can continue from your summary alone. Use exactly these sections:\n\n"
    + "\n".join(f"## {name}" + (f"\n{hint}" if hint else "") for name, hint in SECTIONS)
    + "\n\nBe specific: paths, identifiers, commands, numbers. At most {words} words. Do not "
    "call tools; answer with the summary only."
)
# Words asked for per token of room: markdown summaries full of paths and identifiers run
# 1.3-2 tokens a word (cl100k on the demo's summary: 1.6), so half a word a token leaves room.
WORDS_PER_TOKEN = 0.5
MIN_SUMMARY_TOKENS = 256  # less room than this makes no useful summary

SUMMARY_HEADER = "<session-state compacted_at={when} tokens_before={tokens}>"
PLACEHOLDER = (
    "[tool result elided after the prompt cache expired: about {tokens} tokens of {tool} output; "
    "archived in {archive}; run the tool again if it is needed]"
)


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Wall-clock time and asyncio.sleep."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class VirtualClock:
    """A clock that moves only when told to: tests and demos idle for minutes in no time."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01 00:00 UTC
        self.t = start
        self._sleepers: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.t + seconds, next(self._seq), fut))
        await fut

    def advance(self, seconds: float) -> None:
        """Move time on and wake every sleeper whose deadline has come."""
        self.t += seconds
        while self._sleepers and self._sleepers[0][0] <= self.t:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)


@dataclass
class IdleConfig:
    """When to arm, what to keep, and the resume probability the economics are judged at."""

    min_context_tokens: int = 40_000
    min_new_tokens: int = 20_000  # since the last compaction: the one-shot guard
    safety_s: float = 34.0  # fire this long before the TTL runs out
    ttl_s: float | None = None  # None: follows the session's model and cache setting
    keep_turns: int = 2  # raw turns kept after the summary...
    max_tail_tokens: int = 20_000  # ...cut short at an assistant message when they are longer
    summary_tokens: int = 5_000  # at most; less when the request's max_tokens leaves less
    resume_probability: float = 0.5
    profile: CacheProfile | None = None  # None: by the model's name
    verbatim_categories: tuple[str, ...] = ("requirement", "constraint", "decision")
    verbatim_budget_tokens: int = 4_000
    keep_on_truncate: tuple[str, ...] = ("error", "decision")
    truncate_min_chars: int = 400  # smaller tool results are not worth a placeholder


def session_ttl(conversation: Conversation) -> float:
    """The cache TTL a session runs under: Anthropic's 1 h cache when any breakpoint asks for it."""
    if conversation.api == "anthropic":
        probe = json.dumps([conversation.system, conversation.tools, conversation.messages[-4:]])
        return 3600.0 if '"ttl": "1h"' in probe else 300.0
    return 86400.0 if conversation.params.get("prompt_cache_retention") == "24h" else 300.0


class IdleCompactor:
    """Compacts a live conversation while the user is idle; preempted by any user activity.

    `client`: the official async SDK client the session talks through
    (`anthropic.AsyncAnthropic` or `openai.AsyncOpenAI`).

    `classifier`: anything with `predict(units)` returning objects with `.category`; "default"
    loads the shipped model lazily (falling back to a rule: user words are requirements, failed
    tool results errors); None uses the rule. A model (`SessionClassifier`, or an
    `ImportanceClassifier`, which gets one) labels online, as the turns arrive: each new unit
    once, seeing the units before it, at a constant cost per unit; any other classifier labels
    the new units as one batch.
    """

    def __init__(
        self,
        conversation: Conversation,
        client: Any,
        config: IdleConfig | None = None,
        *,
        clock: Clock | None = None,
        classifier: Any = "default",
        token_counter: Any = None,
        audit: AuditLog | None = None,
        registry: FileRegistry | None = None,
        session_id: str = "session",
    ) -> None:
        if client_api(client) != conversation.api:
            raise ValueError(f"a {client_api(client)} client for a {conversation.api} conversation")
        self.conversation = conversation
        self.client = client
        self.config = config or IdleConfig()
        self.clock = clock or SystemClock()
        self._classifier = classifier
        self._counter = token_counter
        self.audit = audit or AuditLog(".winnow/runs", session_id, self.clock.now)
        self.registry = registry or FileRegistry()
        self.session_id = session_id
        self.state = ACTIVE
        self.context_tokens = 0
        self.tokens_after_compaction: int | None = None
        self.last_turn_end: float | None = None
        self.last_decision = ""
        self._task: asyncio.Task | None = None
        self._observed = 0  # messages already shown to the file registry
        # (message, block) -> (hash of the text labelled, category)
        self._labels: dict[tuple[int, int], tuple[int, str]] = {}
        self._label_task: asyncio.Task | None = None
        # Online labelling: the (key, text hash) of the units fed so far, in order.
        self._fed: list[tuple[tuple[int, int], int]] = []

    # -- harness events ----------------------------------------------------------------------

    def turn_ended(self, usage: Any) -> str:
        """Call (in the event loop) after each answer with its usage: arms the idle timer when
        it pays. Returns the decision in words."""
        self.preempt("turn_ended")
        self.last_turn_end = self.clock.now()
        self.context_tokens = context_tokens(usage)
        units = to_units(self.conversation.api, self.conversation.messages[self._observed :])
        self.registry.observe(units)
        self._observed = len(self.conversation.messages)
        self._start_labelling()
        ok, why = self.should_arm()
        self.last_decision = why
        if ok:
            self.state = ARMED
            self._task = asyncio.get_running_loop().create_task(
                self._idle(self.last_turn_end + self.trigger_after)
            )
        return why

    def user_activity(self, reason: str = "user_message") -> None:
        """Call before the user's turn is sent. Never blocks: cancelling is immediate."""
        self.preempt(reason)
        if self.cache_expired():
            self.truncate_stale()
        self.state = ACTIVE

    def preempt(self, reason: str) -> bool:
        """Cancel the timer or the in-flight compaction; the conversation stays as it was."""
        task, self._task = self._task, None
        if task is None or task.done():
            return False
        if self.state == COMPACTING:
            self.audit.record("aborted", trigger=reason, tokens_before=self.context_tokens)
        task.cancel()
        self.state = ACTIVE
        return True

    async def wait(self) -> None:
        """Until the pending labelling and timer / compaction are over (for tests and demos)."""
        for task in (self._label_task, self._task):
            if task:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # -- decisions ---------------------------------------------------------------------------

    @property
    def profile(self) -> CacheProfile:
        return self.config.profile or profile_for(self.conversation.model, long_ttl=self.ttl > 300)

    @property
    def ttl(self) -> float:
        return self.config.ttl_s or session_ttl(self.conversation)

    @property
    def trigger_after(self) -> float:
        """T_trigger: seconds after the turn end at which the compaction fires."""
        return max(0.0, self.ttl - self.config.safety_s)

    @property
    def summary_budget(self) -> int:
        """Tokens the summary may take: `summary_tokens`, or less if max_tokens leaves less."""
        room = self.conversation.max_output_tokens
        return self.config.summary_tokens if room is None else min(self.config.summary_tokens, room)

    @property
    def summary_words(self) -> int:
        """The word limit the instruction states, derived from `summary_budget`."""
        return int(self.summary_budget * WORDS_PER_TOKEN)

    def cache_expired(self) -> bool:
        return self.last_turn_end is not None and self.clock.now() - self.last_turn_end >= self.ttl

    def should_arm(self) -> tuple[bool, str]:
        cfg, tokens = self.config, self.context_tokens
        if self.tokens_after_compaction is not None:
            new = tokens - self.tokens_after_compaction
            if new < cfg.min_new_tokens:
                self.state = COMPACTED
                return (
                    False,
                    f"compacted idle: {new:,} new tokens since the last compaction < {cfg.min_new_tokens:,}",
                )
        if tokens < cfg.min_context_tokens:
            return False, f"context {tokens:,} < {cfg.min_context_tokens:,} tokens"
        if self.summary_budget < MIN_SUMMARY_TOKENS:
            return False, (
                f"max_tokens leaves {self.summary_budget:,} tokens for a summary "
                f"< {MIN_SUMMARY_TOKENS}"
            )
        tail = self._tail_start()
        if tail is None:
            return False, f"fewer than {cfg.keep_turns + 1} turns: nothing to summarize"
        budget = self.summary_budget
        compacted = self._estimate_tokens(self.conversation.messages[tail:]) + budget
        est = estimate(tokens, compacted, budget, self.profile)
        if not est.worth_it(cfg.resume_probability):
            return False, (
                f"not worth it on {self.profile.name}: break-even p {est.break_even:.0%} "
                f"> resume probability {cfg.resume_probability:.0%}"
            )
        return (
            True,
            f"armed: fires in {self.trigger_after:.0f} s (TTL {self.ttl:.0f} s), EV {est.expected_value(cfg.resume_probability):+,.0f}",
        )

    # -- actions -----------------------------------------------------------------------------

    async def _idle(self, deadline: float) -> None:
        # the deadline is absolute: the task may first run after the clock has moved on
        await self.clock.sleep(deadline - self.clock.now())
        await self.compact("idle_ttl")

    async def compact(self, trigger: str = "manual") -> bool:
        """Summarize the history and splice the summary in; False (and no change) when it cannot."""
        conv = self.conversation
        snap, version = conv.snapshot(), conv.version
        tail = self._tail_start()
        if tail is None:
            return False
        if self.summary_budget < MIN_SUMMARY_TOKENS:
            self.audit.record(
                "rejected",
                trigger=trigger,
                reason=f"max_tokens leaves {self.summary_budget} tokens for a summary",
            )
            return False
        self.state = COMPACTING
        words = self.summary_words
        instruction = {"role": "user", "content": INSTRUCTION.format(words=words)}
        before = snap.encode()
        expected_hit = (
            0.0 if self.cache_expired() else (len(before) - 2) / len(snap.encode([instruction]))
        )
        labelling = self._start_labelling()
        try:
            done = await complete(self.client, snap, [instruction])
            await labelling
        except LLMError as e:
            self.state = ACTIVE
            self.audit.record("failed", trigger=trigger, reason=str(e))
            return False
        why = incomplete(done)
        if why or conv.version != version:
            self.state = ACTIVE
            self.audit.record(
                "rejected" if why else "stale",
                trigger=trigger,
                reason=why or "the conversation changed while the summary was written",
                stop_reason=done.stop_reason,
                words_asked=words,
                tokens_before=self.context_tokens,
                compaction_usage=done.usage,
            )
            return False
        summary = done.text.strip()
        # no await from here on: the splice is atomic with respect to the user's next turn
        try:
            archive = self.audit.archive(snap, "compact")
        except OSError as e:  # no archive, no mutation
            self.state = ACTIVE
            log.warning("idle compaction skipped: cannot archive the transcript: %s", e)
            return False
        block, carried = self._summary_block(snap.messages[:tail], summary, archive.name)
        messages = [{"role": "user", "content": block}, *snap.messages[tail:]]
        after = Conversation(**{**vars(conv), "messages": messages}).encode()
        tokens_after = round(self.context_tokens * len(after) / len(before))
        # audited before it is applied: a mutation the log cannot hold does not happen
        self.audit.record(
            "compact",
            trigger=trigger,
            tokens_before=self.context_tokens,
            tokens_after=tokens_after,
            bytes_before=len(before),
            bytes_after=len(after),
            sha256_before=sha256(before).hexdigest(),
            estimated_cache_hit=round(expected_hit, 4),
            cache_hit=_cache_hit(done.usage),
            compaction_usage=done.usage,
            words_asked=words,
            summary_tokens=self._count(summary),
            verbatim_units=carried,
            kept_messages=len(snap.messages) - tail,
            archive=str(archive),
        )
        conv.replace(messages)
        self.tokens_after_compaction = tokens_after
        self.context_tokens = tokens_after
        self._observed = len(conv.messages)
        self.state = COMPACTED
        return True

    def truncate_stale(self, trigger: str = "resume_after_ttl") -> int:
        """Replace old tool results by placeholders, except errors and decisions. Returns how many."""
        conv = self.conversation
        tail = self._tail_start()
        if tail is None:
            return 0
        keep = set(self.config.keep_on_truncate)
        stale = [
            u
            for u in to_units(conv.api, conv.messages[:tail])
            if u.kind == "tool_result"
            and len(u.text) >= self.config.truncate_min_chars
            and not u.is_error
            # only what has been labelled, as something not to keep: never guess
            and self._label(u) not in (None, *keep)
        ]
        if not stale:
            return 0
        before = conv.encode()
        try:
            archive = self.audit.archive(conv.snapshot(), "truncate")
        except OSError as e:  # no archive, no mutation
            log.warning("lazy truncation skipped: cannot archive the transcript: %s", e)
            return 0
        messages = list(conv.messages)
        for u in stale:
            text = PLACEHOLDER.format(
                tokens=max(1, len(u.text) // 4), tool=u.tool_name or "tool", archive=archive.name
            )
            messages[u.extra["msg"]] = replace_tool_result(
                conv.api, messages[u.extra["msg"]], u.extra["block"], text
            )
        after = Conversation(**{**vars(conv), "messages": messages}).encode()
        tokens_after = round(self.context_tokens * len(after) / len(before))
        self.audit.record(
            "truncate",
            trigger=trigger,
            tokens_before=self.context_tokens,
            tokens_after=tokens_after,
            bytes_before=len(before),
            bytes_after=len(after),
            sha256_before=sha256(before).hexdigest(),
            estimated_cache_hit=0.0,  # the cache is cold: the prefix is prefilled anew either way
            replaced=len(stale),
            archive=str(archive),
        )
        conv.replace(messages)
        self.context_tokens = tokens_after
        return len(stale)

    # -- helpers -----------------------------------------------------------------------------

    def _tail_start(self) -> int | None:
        """Index of the first raw message kept; None when there is nothing before it to summarize.

        The last `keep_turns` turns are kept, but a long agentic turn (one prompt, hundreds of
        tool calls) is cut at an assistant message so that the tail stays under
        `max_tail_tokens`: no tool result is ever kept without its call.
        """
        conv, cfg = self.conversation, self.config
        msgs = conv.messages
        starts = turn_starts(conv.api, msgs)
        k = cfg.keep_turns
        cut = (starts[-k] if k <= len(starts) else 0) if k else len(msgs)
        sizes = [len(encode(m)) + 1 for m in msgs]
        budget = cfg.max_tail_tokens / (self.context_tokens / max(1, len(conv.encode())) or 0.25)
        if sum(sizes[cut:]) > budget:  # in bytes from here on
            later = [i for i in range(cut + 1, len(msgs)) if msgs[i].get("role") == "assistant"]
            suffix, fits = 0, later[-1:]  # at worst, keep from the last assistant message on
            for i in range(len(msgs) - 1, cut, -1):
                suffix += sizes[i]
                if suffix > budget:
                    break
                if msgs[i].get("role") == "assistant":
                    fits = [i]
            cut = fits[0] if fits else cut
        return cut or None

    def _estimate_tokens(self, messages: list[dict[str, Any]]) -> int:
        """Tokens of a request holding `messages`, scaled from the last real usage by bytes."""
        full = len(self.conversation.encode())
        part = len(Conversation(**{**vars(self.conversation), "messages": messages}).encode())
        return round(self.context_tokens * part / max(1, full))

    def _count(self, text: str) -> int:
        if self._counter is None:
            from winnow.serving.tokens import default_token_counter

            self._counter = default_token_counter()
        return self._counter.count(text)

    def _summary_block(
        self, old: list[dict[str, Any]], summary: str, archive: str
    ) -> tuple[str, int]:
        """The summary message: the model's state summary, verbatim units, the file registry."""
        cfg = self.config
        units = [
            u
            for u in to_units(self.conversation.api, old)
            if self._label(u) in cfg.verbatim_categories
        ]
        units.sort(key=lambda u: (CATEGORY_INDEX[self._label(u) or ""], u.index))  # all labelled
        picked, used = [], 0
        for u in units:
            cost = self._count(u.text)
            if used + cost <= cfg.verbatim_budget_tokens:
                picked.append(u)
                used += cost
        picked.sort(key=lambda u: u.index)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock.now()))
        parts = [SUMMARY_HEADER.format(when=when, tokens=self.context_tokens), summary]
        if picked:
            lines = [f"- [{self._label(u)}] {u.role}: {u.text}" for u in picked]
            more = len(units) - len(picked)
            if more:
                lines.append(f"- ({more} more in the archive {archive})")
            parts.append(
                "## Carried verbatim (requirements, constraints, decisions)\n" + "\n".join(lines)
            )
        files = self.registry.render()
        if files:
            parts.append(
                "## Files read or edited this session (still valid for read-before-edit)\n" + files
            )
        parts.append(f"(Full transcript before this point: {archive})\n</session-state>")
        return "\n\n".join(parts), len(picked)

    def _start_labelling(self) -> asyncio.Future:
        """Label every unit not labelled yet, off the event loop; returns the (shared) task."""
        if self._label_task and not self._label_task.done():
            return self._label_task  # it loops until the units added meanwhile are done too

        async def run() -> None:
            while True:
                conv = self.conversation
                units = to_units(conv.api, conv.messages, self.session_id)
                if all(self._label(u) is not None for u in units):
                    return
                labelled = await asyncio.to_thread(self._predict, units)
                self._labels.update({_key(u): (hash(u.text), c) for u, c in labelled})

        self._label_task = asyncio.get_running_loop().create_task(run())
        return self._label_task

    def _label(self, u: Unit) -> str | None:
        """The unit's category if it was labelled with this very text, else None."""
        entry = self._labels.get(_key(u))
        return entry[1] if entry and entry[0] == hash(u.text) else None

    def _predict(self, units: list[Unit]) -> list[tuple[Unit, str]]:
        """(unit, category) for the units of the conversation (`units`, in order) that need a
        label: online, the units not fed yet; else the units not labelled yet."""
        if self._classifier == "default":
            self._classifier = _load_default_classifier()
        clf = self._classifier
        online = _online(clf)
        if online is not None:
            self._classifier = clf = online
            return self._predict_online(clf, units)
        todo = [u for u in units if self._label(u) is None]
        if clf is not None:
            try:
                return list(zip(todo, [p.category for p in clf.predict(todo)], strict=True))
            except Exception as e:  # noqa: BLE001 - a broken model must not break the session
                log.warning("importance classifier failed (%s); using the rule", e)
        return [(u, _rule_category(u)) for u in todo]

    def _predict_online(self, clf: Any, units: list[Unit]) -> list[tuple[Unit, str]]:
        """Feed the units after those fed before; when the history before them changed (a
        compaction, a truncation), the session starts over from its first unit."""
        fed = self._fed
        seen = [(_key(u), hash(u.text)) for u in units[: len(fed)]]
        if seen != fed:
            clf.reset(self.session_id)
            fed.clear()
        new = units[len(fed) :]
        try:
            cats = [p.category for p in clf.extend(new)]
        except Exception as e:  # noqa: BLE001 - a broken model must not break the session
            log.warning("importance classifier failed (%s); using the rule", e)
            clf.reset(self.session_id)
            fed.clear()
            return [(u, _rule_category(u)) for u in new]
        fed.extend((_key(u), hash(u.text)) for u in new)
        return list(zip(new, cats, strict=True))


def incomplete(done: Completion) -> str | None:
    """Why a compaction answer is not a whole summary; None when it is."""
    if not done.ended:
        return "the stream closed before its end"
    if done.stop_reason not in ("end_turn", "stop"):
        cut = done.stop_reason in ("max_tokens", "length")
        return f"stop_reason {done.stop_reason}" + (": the summary was cut off" if cut else "")
    if not done.text.strip():
        return "empty summary"
    present = {line.strip().strip("#*: ").lower() for line in done.text.splitlines()}
    missing = [name for name, _ in SECTIONS if name.lower() not in present]
    if missing:
        return f"missing section{'s' * (len(missing) > 1)}: {', '.join(missing)}"
    return None


def _key(u: Unit) -> tuple[int, int]:
    return u.extra["msg"], u.extra["block"]


def _rule_category(u: Unit) -> str:
    if u.kind == "tool_result":
        return "error" if u.is_error else "tool_output"
    return "requirement" if u.role == "user" else "explanation"


def _online(classifier: Any) -> Any:
    """A `SessionClassifier` for a model (None for anything else: a rule, a stand-in)."""
    if classifier is None or not hasattr(classifier, "predict_proba"):
        return None
    from winnow.serving.classifier import ImportanceClassifier
    from winnow.serving.session import SessionClassifier

    if isinstance(classifier, SessionClassifier):
        return classifier
    if isinstance(classifier, ImportanceClassifier):
        return SessionClassifier(classifier)
    return None


def _load_default_classifier() -> Any:
    try:
        from winnow.serving.categorizer import load_categorizer

        return load_categorizer(fallback=None)
    except Exception as e:  # noqa: BLE001 - no model shipped yet, or a broken one: use the rule
        log.warning("idle compaction without the importance classifier (%s); using the rule", e)
        return None


def _cache_hit(usage: dict[str, Any]) -> float | None:
    if "prompt_tokens" in usage:
        total = usage.get("prompt_tokens") or 0
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    else:
        cached = usage.get("cache_read_input_tokens") or 0
        total = (
            cached
            + (usage.get("input_tokens") or 0)
            + (usage.get("cache_creation_input_tokens") or 0)
        )
    return round(cached / total, 4) if total else None
