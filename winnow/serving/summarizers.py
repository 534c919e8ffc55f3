"""Summarizers: condense texts to a token budget.

    ExtractiveSummarizer()                        # offline: keeps the lines that matter
    AnthropicSummarizer(model="claude-haiku-4-5") # over the anthropic SDK
    OpenAISummarizer(model="gpt-4o-mini", base_url="http://localhost:8000/v1")  # any compatible API

Every summarizer takes a text, a unit, or a list of them, and returns a string that counts at
most `max_tokens` with its token counter. The LLM summarizers pre-trim huge inputs, re-trim an
over-long answer, and fall back to the extractive summary when the call fails.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from winnow.data import cues
from winnow.data.schema import Unit
from winnow.serving.tokens import TokenCounter, default_token_counter

log = logging.getLogger(__name__)

Texts = str | Unit | Sequence[str | Unit]

_CONCLUSION = re.compile(
    r"\b(?:because|therefore|so the|root cause|caused by|the (?:fix|issue|problem|cause) (?:is|was)|"
    r"fixed|resolved|conclusion|result|summary|total|passed|failed|succeeded|decided|found|"
    r"instead|works now|confirmed|verified)\b",
    re.I,
)
_NUMBER = re.compile(r"\d")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(\[])")
MAX_LINE_CHARS = 300
MARKER_TOKENS = 7  # what a `[... 120 lines]` marker and its newline cost

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


class ExtractiveSummarizer:
    """Keeps whole lines by importance: error lines, then the first and last lines,
    conclusions, paths and numbers; gaps become `[... N lines]` markers. Offline and deterministic."""

    def __init__(self, token_counter: TokenCounter | None = None):
        self.counter = token_counter or default_token_counter()
        # Deterministic, so memoized (the same unit meets the same budget under every limit),
        # keyed by a digest and holding only summaries: bounded memory.
        self._memo: OrderedDict[tuple[bytes, int], str] = OrderedDict()
        self.memo_size = 4096

    def summarize(self, texts: Texts, max_tokens: int) -> str:
        text = as_text(texts)
        if max_tokens <= 0:
            return ""
        if self.counter.count(text) <= max_tokens:
            return text
        key = (
            hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest(),
            max_tokens,
        )
        out = self._memo.get(key)
        if out is None:
            out = self._memo[key] = self._summarize(text, max_tokens)
            if len(self._memo) > self.memo_size:
                self._memo.popitem(last=False)
        return out

    def _summarize(self, text: str, max_tokens: int) -> str:
        lines = _segments(text)
        candidates = self._rank(lines)
        chosen: list[int] = []  # sorted
        used = 0
        for _score, i in candidates:
            # a line costs its tokens and a newline, and may open or close a gap marker
            k = bisect.bisect(chosen, i)
            a = chosen[k - 1] if k else -1
            b = chosen[k] if k < len(chosen) else len(lines)
            gaps = (i - a > 1) + (b - i > 1) - (b - a > 1)
            cost = self.counter.count(_cut(lines[i])) + 1 + gaps * MARKER_TOKENS
            if used + cost <= max_tokens:
                chosen.insert(k, i)
                used += cost
        # The estimate is close, not exact: check the real count, shed the weakest lines.
        keep = set(chosen)
        order = [i for _s, i in candidates if i in keep]
        out = self._render(lines, keep)
        while order and self.counter.count(out) > max_tokens:
            keep.discard(order.pop())
            out = self._render(lines, keep)
        if not keep:
            out = self._truncate(text.strip(), max_tokens)
        return out

    def _rank(self, lines: list[str]) -> list[tuple[int, int]]:
        """(-score, index) for every non-blank, non-repeated line, best first."""
        nonblank = [i for i, ln in enumerate(lines) if ln.strip()]
        ends = {nonblank[0], nonblank[-1]} if nonblank else set()
        seen: set[str] = set()
        ranked = []
        for i in nonblank:
            ln = lines[i].strip()
            if ln in seen:  # repeated log lines say nothing new
                continue
            seen.add(ln)
            score = 0
            if cues.has_error_signal(ln):
                score += 100
            if i in ends:
                score += 50
            if _CONCLUSION.search(ln):
                score += 30
            if cues.has_path(ln):
                score += 20
            if _NUMBER.search(ln):
                score += 10
            ranked.append((-score, i))
        ranked.sort()
        return ranked

    @staticmethod
    def _render(lines: list[str], chosen: set[int]) -> str:
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
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.counter.count(text[:mid] + " ...") <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo] + " ..." if lo else ""


def _segments(text: str) -> list[str]:
    """Lines; a long prose line is split into its sentences so that it is not cut mid-way."""
    out: list[str] = []
    for line in text.split("\n"):
        out.extend(_SENTENCE.split(line) if len(line) > MAX_LINE_CHARS else [line])
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
        self.calls += 1
        try:
            out = self._call(prompt, source, max_tokens).strip()
        except Exception as e:  # noqa: BLE001 - any API failure: network, status, parse
            self.failures += 1
            if self.fallback is None:
                raise
            # once, not per unit: a dead endpoint fails every call the same way
            log.log(
                logging.WARNING if self.failures == 1 else logging.DEBUG,
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


__all__ = [
    "AnthropicSummarizer",
    "ExtractiveSummarizer",
    "OpenAISummarizer",
    "Summarizer",
    "as_text",
]
