"""The context budget: how full the window is, from the real `usage` figures of responses.

    budget = ContextBudget("budget.jsonl", window=200_000)     # threshold: HARNESS_CTX_THRESHOLD
    sample = budget.record(response.usage)                     # fires on_cross when the line is crossed

Samples go to a JSONL file (one a line) so that a hook process, which lives for one call,
can continue where the previous one stopped, and `winnow budget report` can aggregate them.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_THRESHOLD",
    "DEFAULT_WINDOW",
    "BudgetReport",
    "ContextBudget",
    "Sample",
    "context_tokens",
    "env_threshold",
    "occupancy",
    "read_samples",
    "report",
]

DEFAULT_WINDOW = 200_000
DEFAULT_THRESHOLD = 40.0  # percent


def env_threshold(
    default: float = DEFAULT_THRESHOLD, environ: Mapping[str, str] = os.environ
) -> float:
    """HARNESS_CTX_THRESHOLD (percent) if set and valid, else `default`."""
    raw = environ.get("HARNESS_CTX_THRESHOLD", "").strip().rstrip("%")
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if 0 < value <= 100 else default


def occupancy(used: int, window: int) -> float:
    """Percent of the window in use."""
    return 100.0 * used / window


def _get(usage: Any, key: str) -> int:
    value = usage.get(key) if isinstance(usage, dict) else getattr(usage, key, None)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 2**53:
        raise ValueError(f"usage `{key}` is {value!r:.40}, not a number of tokens")
    return int(value)


def context_tokens(usage: Any) -> int:
    """Tokens the next request will carry, from a response's usage (a dict or an SDK object).

    Anthropic splits the prompt into input, cache-read and cache-creation tokens: all three
    count. OpenAI reports the whole prompt as prompt_tokens. The answer (output /
    completion tokens) joins the context on the next turn, so it counts too.
    """
    if _get(usage, "prompt_tokens") or _get(usage, "completion_tokens"):
        return _get(usage, "prompt_tokens") + _get(usage, "completion_tokens")
    return sum(
        _get(usage, k)
        for k in (
            "input_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "output_tokens",
        )
    )


@dataclass
class Sample:
    """One measurement of the context."""

    time: float
    used: int
    window: int
    percent: float
    over: bool
    crossed: bool  # this sample went from under the line to at/over it
    source: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


CHECKPOINT_TEXT = """# Context checkpoint

The context is at {percent:.0f}% of a {window:,}-token window ({used:,} tokens), past the
{threshold:g}% line, at {when}.

Before going on, write down in this file or in your notes:

- the goal, in one line;
- the changes completed so far (files, what changed);
- the files you are working in, with line ranges;
- the approaches ruled out, and why;
- the failures still open (error lines verbatim);
- the next immediate step.

Then continue, or compact the session with that state.
"""


class ContextBudget:
    """Records context samples and signals when the occupancy crosses the threshold.

    `on_cross(sample)` runs once per upward crossing (the budget re-arms when a later sample
    is back under the line, e.g. after a compaction); the default writes `checkpoint_path`.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        window: int = DEFAULT_WINDOW,
        threshold: float | None = None,
        checkpoint_path: str | Path | None = None,
        on_cross: Callable[[Sample], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(window, int) or window <= 0:
            raise ValueError(
                f"the context window must be a positive number of tokens, got {window!r}"
            )
        self.path = Path(path) if path else None
        self.window = window
        self.threshold = env_threshold() if threshold is None else threshold
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path else None
        self.on_cross = on_cross or self.write_checkpoint
        self.clock = clock
        last = _last_sample(self.path) if self.path else None
        self.over = bool(last and last.over)

    def record(self, usage: Any, *, source: str = "") -> Sample:
        """Record a sample from a response's usage (see `context_tokens`)."""
        return self.record_tokens(context_tokens(usage), source=source)

    def record_tokens(self, used: int, *, source: str = "") -> Sample:
        pct = occupancy(used, self.window)
        over = pct >= self.threshold
        sample = Sample(
            self.clock(), used, self.window, round(pct, 3), over, over and not self.over, source
        )
        self.over = over
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(sample.to_json() + "\n")
        if sample.crossed:
            self.on_cross(sample)
        return sample

    def checkpoint_text(self, sample: Sample) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(sample.time))
        return CHECKPOINT_TEXT.format(
            percent=sample.percent,
            window=sample.window,
            used=sample.used,
            threshold=self.threshold,
            when=when,
        )

    def write_checkpoint(self, sample: Sample) -> None:
        if self.checkpoint_path:
            self.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
            self.checkpoint_path.write_text(self.checkpoint_text(sample), encoding="utf-8")


def read_samples(path: str | Path) -> list[Sample]:
    """Samples of a budget JSONL file; lines that are not samples are skipped."""
    out = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(Sample(**json.loads(line)))
        except (ValueError, TypeError, RecursionError):  # RecursionError: nested too deeply
            continue
    return out


def _last_sample(path: Path) -> Sample | None:
    if not path.is_file():
        return None
    with path.open("rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
        tail = f.read().decode("utf-8", "replace").splitlines()
    for line in reversed(tail):
        try:
            return Sample(**json.loads(line))
        except (ValueError, TypeError, RecursionError):
            continue
    return None


@dataclass
class BudgetReport:
    count: int
    max_percent: float
    last_percent: float
    crossings: int
    over: int  # samples at or over the line


def report(samples: Iterable[Sample]) -> BudgetReport:
    samples = list(samples)
    if not samples:
        return BudgetReport(0, 0.0, 0.0, 0, 0)
    return BudgetReport(
        count=len(samples),
        max_percent=max(s.percent for s in samples),
        last_percent=samples[-1].percent,
        crossings=sum(s.crossed for s in samples),
        over=sum(s.over for s in samples),
    )


def plot(samples: list[Sample], threshold: float, out: str | Path) -> Path:
    """A trend plot of the occupancy (PNG, matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    xs = range(1, len(samples) + 1)
    ax.plot(xs, [s.percent for s in samples], marker=".", lw=1.2, label="context used")
    ax.axhline(threshold, color="tab:red", ls="--", lw=1, label=f"threshold {threshold:g}%")
    for x, s in enumerate(samples, start=1):
        if s.crossed:
            ax.axvline(x, color="tab:orange", lw=0.8, alpha=0.6)
    ax.set_xlabel("sample")
    ax.set_ylabel("% of window")
    ax.set_ylim(0, max(100.0, math.ceil(max((s.percent for s in samples), default=0))))
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out)
    plt.close(fig)
    return out
