"""Summarizers: condense texts to a token budget.

    ExtractiveSummarizer()                        # offline: keeps the lines that matter
    AnthropicSummarizer(model="claude-haiku-4-5") # over the anthropic SDK
    OpenAISummarizer(model="gpt-4o-mini", base_url="http://localhost:8000/v1")  # any compatible API

Every summarizer takes a text, a unit, or a list of them, and returns a string that counts at
most `max_tokens` with its token counter. The LLM summarizers pre-trim huge inputs, re-trim an
over-long answer, and fall back to the extractive summary when the call fails.
`summarize_all(summarizer, jobs)` runs many at once: LLM calls concurrently (at most
`max_workers` in flight), the extractive summarizer in line.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Protocol, runtime_checkable

from winnow.data import cues
from winnow.data.schema import Unit
from winnow.serving.relevance import distinctive_tokens
from winnow.serving.strategies import error_strength, is_error_line, kept_errors
from winnow.serving.tokens import TokenCounter, default_token_counter

log = logging.getLogger(__name__)

Texts = str | Unit | Sequence[str | Unit]

# Words of a line that states a finding. A line without one of these literals (lower case)
# cannot match _CONCLUSION, and `str.find` rules most ASCII lines out far sooner than the
# case-folding regex (see _concludes); the regex is built from them so the two cannot drift.
_CONCLUSION_WORDS = (
    "because", "therefore", "so the", "root cause", "caused by", "fixed", "resolved",
    "conclusion", "result", "summary", "total", "passed", "failed", "succeeded", "decided",
    "found", "instead", "works now", "confirmed", "verified",
)  # fmt: skip
_CONCLUSION_SUBJECTS = ("fix", "issue", "problem", "cause")  # "the fix is", "the cause was"
_CONCLUSION = re.compile(
    r"\b(?:"
    + "|".join(map(re.escape, _CONCLUSION_WORDS))
    + r"|the (?:"
    + "|".join(_CONCLUSION_SUBJECTS)
    + r") (?:is|was))\b",
    re.I,
)
_CONCLUSION_LITERALS = (*_CONCLUSION_WORDS, *(f"the {s}" for s in _CONCLUSION_SUBJECTS))
_NUMBER = re.compile(r"\d")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(\[])")
MAX_LINE_CHARS = 300
MARKER_TOKENS = 7  # what a `[... 120 lines]` marker and its newline cost
# Candidate lines that did not fit in a row before the search for shorter ones stops: it
# bounds the lines counted (each is tokenized) on a huge text with a small budget.
MAX_MISSES = 64
NOTED_SCORE = 400  # a line's rank score for being one of the error lines a note keeps

PROMPT = (
    "You compress parts of a coding agent's transcript so that another agent can continue the "
    "work. Summarize the text below in at most {words} words. Keep file paths, identifiers, "
    "numbers, commands and conclusions. Quote error lines verbatim. Output only the summary."
)


@runtime_checkable
class Summarizer(Protocol):
    """Anything with `summarize(texts, max_tokens) -> str`."""

    def summarize(self, texts: Texts, max_tokens: int) -> str: ...


def as_text(texts: Texts) -> str:
    """One text from a string, a unit, or a list of them (blank-line separated)."""
    if isinstance(texts, str):
        return texts
    if isinstance(texts, Unit):
        return texts.text
    return "\n\n".join(as_text(t) for t in texts)


class _Ranked(NamedTuple):
    """A text's lines ranked for a summary (memoized per text)."""

    lines: list[str]
    candidates: list[tuple[int, int]]  # (-score, index), best first
    repeats: list[int]  # repeated lines, in order
    nonblank: list[int]  # nonblank[k]: the non-blank lines among the first k

    def gap(self, a: int, b: int) -> bool:
        """Whether lines a and b (a < b; -1 and len(lines) for the ends) leave out a
        non-blank line between them: a gap of blank lines needs no marker."""
        return self.nonblank[b] - self.nonblank[a + 1] > 0 if b - a > 1 else False


class ExtractiveSummarizer:
    """Keeps whole lines by importance: error lines, then the first and last lines, lines
    naming what the conversation names again later (`salient`), conclusions, paths and
    numbers; gaps become `[... N lines]` markers. Offline and deterministic."""

    def __init__(self, token_counter: TokenCounter | None = None):
        self.counter = token_counter or default_token_counter()
        # Deterministic, so memoized (the same unit meets the same budget under every limit),
        # keyed by a digest and holding only summaries: bounded memory.
        self._memo: OrderedDict[tuple[bytes, int, frozenset[str]], str] = OrderedDict()
        self.memo_size = 4096
        # The lines of the last few texts, ranked: a text is summarized at several budgets in
        # a row (a tool call's value retried shorter, a summary topped up), and ranking its
        # lines costs more than choosing among them.
        self._ranked: OrderedDict[tuple[bytes, frozenset[str]], _Ranked] = OrderedDict()

    def summarize(
        self, texts: Texts, max_tokens: int, salient: frozenset[str] = frozenset()
    ) -> str:
        """At most `max_tokens` tokens of whole lines; `salient`: distinctive tokens
        (`relevance.distinctive_tokens`) whose lines rank above the conclusions."""
        text = as_text(texts)
        if max_tokens <= 0:
            return ""
        if self.counter.count(text) <= max_tokens:
            return text
        key = (
            hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest(),
            max_tokens,
            salient,
        )
        out = self._memo.get(key)
        if out is None:
            out = self._memo[key] = self._summarize(text, max_tokens, key[0], salient)
            if len(self._memo) > self.memo_size:
                self._memo.popitem(last=False)
        return out

    def _summarize(self, text: str, max_tokens: int, digest: bytes, salient: frozenset[str]) -> str:
        ranked = self._ranked.get((digest, salient))
        if ranked is None:
            lines = _segments(text)
            ranked = self._ranked[digest, salient] = _Ranked(lines, *self._rank(lines, salient))
            if len(self._ranked) > 8:
                self._ranked.popitem(last=False)
        lines = ranked.lines  # shared: read, never changed
        candidates, chosen, used = self._choose(ranked, max_tokens)
        out, keep, n, first = self._shed(lines, candidates, chosen, max_tokens)
        if used > first and first < max_tokens and len(chosen) < len(lines):
            # A line's own count and a newline overcount a run of short lines (tokens merge
            # across the newlines; 609 estimated for a 567-token run of 40 test failures):
            # once more with the budget scaled by what the estimate overcounted, and the
            # fuller of the two
            more = self._choose(ranked, max_tokens * used // first)
            again = self._shed(lines, more[0], more[1], max_tokens)
            if again[2] > n:
                candidates, (out, keep, n, first) = more[0], again
        if not keep:
            return self._truncate(text.strip(), max_tokens)
        # Whole lines leave room at the end: the best line left out, cut to fit, takes it (a
        # repeated line last: a retry loop's error, too long to fit whole again)
        left = [i for _s, i in candidates if i not in keep][:4]
        left += [i for i in ranked.repeats if i not in keep][: 4 - len(left)]
        filled = self._fill(lines, keep, left, out, max_tokens)
        # A short line that took the last few tokens can leave too little for any cut: the
        # best line left out, cut to fit in place of the weakest line kept, may hold more
        # (an 80-token limit: 59 tokens with the short line, 63 with the cut one instead)
        kept = [(-score, i) for score, i in candidates if i in keep]
        if left and len(kept) > 1 and kept[-1][0] < NOTED_SCORE:  # never a noted error line
            weakest = kept[-1][1]
            fewer = keep - {weakest}
            other = self._fill(lines, fewer, left, self._render(lines, fewer), max_tokens)
            if self.counter.count(other) > self.counter.count(filled):
                return other
        return filled

    def _fill(
        self, lines: Sequence[str], keep: set[int], left: list[int], out: str, max_tokens: int
    ) -> str:
        """`out` (the lines `keep`) with the first lines of `left` that fit, cut to fit."""
        lines = list(lines)
        keep = set(keep)
        for i in left:
            room = max_tokens - self.counter.count(out) - 1
            # the line may split a gap marker in two: then a shorter cut
            for cut in (room, room - MARKER_TOKENS):
                if cut < 6:
                    break
                head = self._truncate(_cut(lines[i]).strip(), cut)
                if not head:
                    break
                old, lines[i] = lines[i], head
                filled = self._render(lines, keep | {i})
                if self.counter.count(filled) <= max_tokens:
                    out = filled
                    keep.add(i)
                    break
                lines[i] = old
            else:
                continue
            if room < 6:
                break
        return out

    def _shed(
        self, lines: list[str], candidates: list[tuple[int, int]], chosen: list[int], budget: int
    ) -> tuple[str, set[int], int, int]:
        """The chosen lines rendered within `budget`: the estimate is close, not exact, so the
        real count is checked and the weakest lines shed (a share of them at a time, so that a
        poor estimate costs a few renders, not one each). (text, lines kept, its tokens, the
        tokens of all the chosen lines)."""
        keep = set(chosen)
        order = [i for _s, i in candidates if i in keep]
        out = self._render(lines, keep)
        n = first = self.counter.count(out)
        while order and n > budget:
            shed = max(1, len(order) * (n - budget) // (2 * n))
            for i in order[-shed:]:
                keep.discard(i)
            del order[-shed:]
            out = self._render(lines, keep)
            n = self.counter.count(out)
        return out, keep, n, first

    def _choose(self, ranked: _Ranked, budget: int) -> tuple[list[tuple[int, int]], list[int], int]:
        """The lines that fit `budget` by the estimate, best first: (the candidates, the
        repeats that fill room left included; the chosen, sorted; the estimated tokens)."""
        lines, candidates, repeats, _n = ranked
        gap = ranked.gap
        chosen: list[int] = []  # sorted
        used = 0
        # The error lines a note keeps go in together when the budget holds them as the note
        # does (counted as rendered: line by line, the estimate can leave two of them out of
        # a budget the size of the note, and take shorter lines instead)
        noted = sorted(i for score, i in candidates if -score >= NOTED_SCORE)
        if noted:
            n = self.counter.count(self._render(lines, set(noted)))
            if n <= budget:
                chosen, used = noted, n
        taken = set(chosen)
        misses = 0
        for _score, i in candidates:
            if i in taken:
                continue
            if used + 2 > budget or misses >= MAX_MISSES:
                break  # nothing fits any more (a line costs at least itself and a newline)
            # a line costs its tokens and a newline, and may open or close a gap marker
            k = bisect.bisect(chosen, i)
            a = chosen[k - 1] if k else -1
            b = chosen[k] if k < len(chosen) else len(lines)
            gaps = gap(a, i) + gap(i, b) - gap(a, b)
            cost = self.counter.count(_cut(lines[i])) + 1 + gaps * MARKER_TOKENS
            if used + cost <= budget:
                chosen.insert(k, i)
                used += cost
                misses = 0
            else:
                misses += 1
        if repeats and len(chosen) == len(candidates) and used + 2 <= budget:
            # Every distinct line is in and room is left (a log of one error repeated): the
            # repeated lines fill it, earliest first, rather than leave the budget unused.
            # One sweep in order of position (no insertion into `chosen`): linear.
            more, used = self._fill_repeats(ranked, chosen, used, budget)
            candidates = candidates + [(0, i) for i in more]
            chosen = sorted(chosen + more)
        return candidates, chosen, used

    def _fill_repeats(
        self, ranked: _Ranked, chosen: list[int], used: int, max_tokens: int
    ) -> tuple[list[int], int]:
        """The repeated lines (ascending) that fit beside `chosen` (sorted), in order of
        position, and the tokens used then."""
        lines, repeats, gap = ranked.lines, ranked.repeats, ranked.gap
        more: list[int] = []
        k = 0  # chosen[k] is the first chosen line after the one looked at
        prev = -1  # the last line kept before it, chosen or added here
        misses = 0
        for i in repeats:
            if used + 2 > max_tokens or misses >= MAX_MISSES:
                break
            while k < len(chosen) and chosen[k] < i:
                prev = max(prev, chosen[k])
                k += 1
            b = chosen[k] if k < len(chosen) else len(lines)
            gaps = gap(prev, i) + gap(i, b) - gap(prev, b)
            cost = self.counter.count(_cut(lines[i])) + 1 + gaps * MARKER_TOKENS
            if used + cost <= max_tokens:
                more.append(i)
                used += cost
                prev = i
                misses = 0
            else:
                misses += 1
        return more, used

    def _rank(
        self, lines: list[str], salient: frozenset[str] = frozenset()
    ) -> tuple[list[tuple[int, int]], list[int], list[int]]:
        """(-score, index) for every non-blank, non-repeated line, best first; the repeated
        lines (a copy of a line seen above), in order; and the count of non-blank lines
        before each line."""
        nonblank = [i for i, ln in enumerate(lines) if ln.strip()]
        ends = {nonblank[0], nonblank[-1]} if nonblank else set()
        seen: set[str] = set()
        ranked = []
        repeats = []
        cut = [_cut(lines[i].strip()) for i in nonblank]  # the cues look at what is kept
        # error lines as strategies.error_lines finds them: not stripped (an indented
        # "error:" is no error line there)
        strength = [error_strength(lines[i]) for i in nonblank]
        errors = [(k, s > 1) for k, s in enumerate(strength) if s]
        # the lines an error note keeps, at the places it keeps them (copies counted, each
        # text once: strategies.error_excerpt), ranked there, their other copies repeats
        noted: dict[str, int] = {}
        for k in kept_errors(errors):
            noted.setdefault(cut[k], k)
        errors_at = {k for k, _strong in errors}
        for k, i in enumerate(nonblank):
            ln = cut[k]
            error = k in errors_at
            if ln in seen or noted.get(ln, k) != k:
                repeats.append(i)  # repeated log lines say nothing new: only room left takes them
                continue
            seen.add(ln)
            score = 0
            if error:  # above any sum of the rest: the error lines come first, and those
                # an error note keeps before the others
                score += NOTED_SCORE if ln in noted else 200
            if i in ends:
                score += 50
            if salient and not salient.isdisjoint(distinctive_tokens(ln, remember=False)):
                score += 40
            if _concludes(ln):
                score += 30
            if cues.has_path(ln):
                score += 20
            if _NUMBER.search(ln):
                score += 10
            ranked.append((-score, i))
        ranked.sort()
        nonblank = [0] * (len(lines) + 1)
        for i, ln in enumerate(lines):
            nonblank[i + 1] = nonblank[i] + bool(ln.strip())
        return ranked, repeats, nonblank

    @staticmethod
    def _render(lines: Sequence[str], chosen: set[int]) -> str:
        out: list[str] = []
        gap = 0
        blank = True  # a gap of blank lines only needs no marker
        for i, ln in enumerate(lines):
            if i in chosen:
                if gap and not blank:
                    out.append(f"[... {gap} lines]")
                gap, blank = 0, True
                out.append(_cut(ln))
            else:
                gap += 1
                blank = blank and not ln.strip()
        if gap and out and not blank:
            out.append(f"[... {gap} lines]")
        return "\n".join(out)

    def _truncate(self, text: str, max_tokens: int) -> str:
        """The longest head of `text` (plus ' ...') within the budget."""
        # a token holds at most a few dozen characters: no need to search the whole text
        lo, hi = 0, min(len(text), 64 * max_tokens + 64)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.counter.count(text[:mid] + " ...") <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo] + " ..." if lo else ""


def _concludes(line: str) -> bool:
    """`_CONCLUSION.search(line)`, with ASCII lines that hold none of its words ruled out
    first (13 vs 5 ms on the lines ranked in scripts/bench_compress_speed.py)."""
    if line.isascii():
        low = line.lower()
        if not any(w in low for w in _CONCLUSION_LITERALS):
            return False
    return _CONCLUSION.search(line) is not None


def _segments(text: str) -> list[str]:
    """Lines; a long prose line is split into its sentences so that it is not cut mid-way,
    and what is still longer (minified code, data) into pieces a summary can keep."""
    out: list[str] = []
    for line in text.split("\n"):
        # an error line stays one line, cut as an error note cuts it: the same words either way
        if len(line) <= MAX_LINE_CHARS or is_error_line(line):
            out.append(line)
            continue
        for part in _SENTENCE.split(line):
            out.extend(part[k : k + MAX_LINE_CHARS] for k in range(0, len(part), MAX_LINE_CHARS))
    return out


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " ..."


class _LLMSummarizer:
    """Shared plumbing of the SDK summarizers: trim in, call, trim out, fall back."""

    def __init__(
        self,
        model: str,
        client: Any = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_input_tokens: int = 8000,
        token_counter: TokenCounter | None = None,
        fallback: Summarizer | None | bool = True,
    ):
        self.model = model
        self._client = client
        self._client_kw = {
            "base_url": base_url,
            "api_key": api_key,
            "timeout": timeout,
            "max_retries": max_retries,
        }
        self.counter = token_counter or default_token_counter()
        self.extractive = ExtractiveSummarizer(self.counter)
        self.max_input_tokens = max_input_tokens
        self.fallback = self.extractive if fallback is True else (fallback or None)
        self.calls = 0
        self.failures = 0
        self._lock = threading.Lock()  # calls run concurrently (summarize_all)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._make_client(
                **{k: v for k, v in self._client_kw.items() if v is not None}
            )
        return self._client

    def summarize(self, texts: Texts, max_tokens: int) -> str:
        text = as_text(texts)
        if max_tokens <= 0:
            return ""
        if self.counter.count(text) <= max_tokens:
            return text
        source = self.extractive.summarize(text, self.max_input_tokens)
        prompt = PROMPT.format(words=max(8, int(max_tokens * 0.7)))
        with self._lock:
            self.calls += 1
        try:
            out = self._call(prompt, source, max_tokens).strip()
        except Exception as e:  # noqa: BLE001 - any API failure: network, status, parse
            with self._lock:
                self.failures += 1
                first = self.failures == 1
            if self.fallback is None:
                raise
            # once, not per unit: a dead endpoint fails every call the same way
            log.log(
                logging.WARNING if first else logging.DEBUG,
                "%s failed (%s); using %s",
                type(self).__name__,
                e,
                type(self.fallback).__name__,
            )
            return self.fallback.summarize(text, max_tokens)
        # The provider counts with its own tokenizer: enforce our budget on the answer.
        return (
            out
            if self.counter.count(out) <= max_tokens
            else self.extractive.summarize(out, max_tokens)
        )

    def _make_client(self, **kw: Any) -> Any:
        raise NotImplementedError

    def _call(self, prompt: str, text: str, max_tokens: int) -> str:
        raise NotImplementedError


class AnthropicSummarizer(_LLMSummarizer):
    """Summaries from a Claude model over the Anthropic Messages API (`anthropic` SDK)."""

    def __init__(self, model: str = "claude-haiku-4-5", client: Any = None, **kw: Any):
        super().__init__(model, client, **kw)

    def _make_client(self, **kw: Any) -> Any:
        import anthropic

        return anthropic.Anthropic(**kw)

    def _call(self, prompt: str, text: str, max_tokens: int) -> str:
        msg = self.client.messages.create(
            model=self.model,
            max_tokens=max_tokens,
            system=prompt,
            messages=[{"role": "user", "content": text}],
        )
        return "".join(b.text for b in msg.content if getattr(b, "type", None) == "text")


class OpenAISummarizer(_LLMSummarizer):
    """Summaries over the OpenAI chat-completions API (`openai` SDK); set `base_url` for any
    compatible endpoint (vLLM, llama.cpp, Ollama, a gateway)."""

    def __init__(self, model: str = "gpt-4o-mini", client: Any = None, **kw: Any):
        super().__init__(model, client, **kw)

    def _make_client(self, **kw: Any) -> Any:
        import openai

        return openai.OpenAI(**kw)

    def _call(self, prompt: str, text: str, max_tokens: int) -> str:
        resp = self.client.chat.completions.create(
            model=self.model,
            max_tokens=max_tokens,
            messages=[{"role": "system", "content": prompt}, {"role": "user", "content": text}],
        )
        return resp.choices[0].message.content or ""


def summarize_all(
    summarizer: Summarizer,
    jobs: Sequence[tuple[Texts, int]],
    max_workers: int = 8,
    fallback: Summarizer | None = None,
) -> list[str]:
    """`summarizer.summarize(texts, max_tokens)` for each job, in order. A summarizer that
    calls a model runs its calls concurrently, at most `max_workers` at a time; the offline
    extractive one runs in line (threads would only queue on the GIL). A call that fails gets
    `fallback`'s summary instead (None: the error is raised)."""
    jobs = list(jobs)
    many = getattr(summarizer, "summarize_many", None)
    if many is not None:
        return list(many(jobs))
    failures = 0

    def one(job: tuple[Texts, int]) -> str:
        nonlocal failures
        try:
            return summarizer.summarize(*job)
        except Exception as e:  # noqa: BLE001 - any failure of a model call
            if fallback is None:
                raise
            failures += 1
            if failures == 1:  # once, not per unit: a dead endpoint fails every call alike
                log.warning("%s failed (%s); extractive summaries instead", summarizer, e)
            return fallback.summarize(*job)

    if isinstance(summarizer, ExtractiveSummarizer) or max_workers <= 1 or len(jobs) <= 1:
        return [one(job) for job in jobs]
    with ThreadPoolExecutor(min(max_workers, len(jobs))) as pool:
        return list(pool.map(one, jobs))


__all__ = [
    "AnthropicSummarizer",
    "ExtractiveSummarizer",
    "OpenAISummarizer",
    "Summarizer",
    "as_text",
    "summarize_all",
]
