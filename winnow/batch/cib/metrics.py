"""Scores of the benchmark: SQuAD's token-F1 and exact match, and bootstrap intervals.

f1("the Velt Dynamics", ["Velt Dynamics"])    # 1.0: articles and punctuation do not count
lo, hi = bootstrap_ci([1.0, 0.0, 0.5], seed=0)  # 95% interval of the mean
"""

from __future__ import annotations

import hashlib
import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
BOOTSTRAP_SAMPLES = 2000


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def _f1(prediction: str, gold: str) -> float:
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if not common:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, answers: Sequence[str]) -> float:
    """Token-F1 against the best-matching gold answer."""
    return max(_f1(prediction, a) for a in answers)


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer."""
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(a) for a in answers))


def clean_prediction(reply: str | None) -> str:
    """The answer in a reply: after any <think> block, the first non-empty line, without an
    'Answer:' label or a closing full stop."""
    text = reply or ""
    end = text.rfind("</think>")
    if end >= 0:
        text = text[end + len("</think>") :]
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if line.lower().startswith("answer:"):
        line = line[len("answer:") :].strip()
    return line.rstrip(".").strip()


def bootstrap_ci(
    values: Sequence[float], seed: int | str = 0, samples: int = BOOTSTRAP_SAMPLES
) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of the mean; the same values and seed always give
    the same interval."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(_seed(seed))
    means = x[rng.integers(0, x.size, size=(samples, x.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def _seed(seed: int | str) -> int:
    if isinstance(seed, int):
        return seed
    return int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=8).digest(), "big")


__all__ = [
    "BOOTSTRAP_SAMPLES",
    "bootstrap_ci",
    "clean_prediction",
    "exact_match",
    "f1",
    "normalize_answer",
]
