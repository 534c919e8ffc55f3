"""Categorizers: what labels units for the compressor, the runtime and the CLI.

    categorizer = load_categorizer()                   # the shipped model, else the heuristic
    categorizer.add(unit)                              # a model: one live unit (online view)
    categorizer = load_categorizer("models/my-model", fallback=None)   # that model or an error
    for p in categorizer.predict(units):
        p.category, p.scores                           # scores: category -> probability

A `Categorizer` is anything with `predict(units) -> list[Prediction]`, one prediction per unit,
in order. The compressor weighs a unit's value by `scores` as given, so a model whose
probabilities are calibrated gets the allocation it deserves; a categorizer that only knows a
category (the heuristic labeller) gives that category probability 1.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from winnow.data.schema import CATEGORIES, Unit

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Prediction:
    """A unit's category and the probability of every category."""

    category: str
    scores: dict[str, float]

    @property
    def confidence(self) -> float:
        return self.scores[self.category]


@runtime_checkable
class Categorizer(Protocol):
    """Anything with `predict(units) -> list[Prediction]` (one per unit, in order)."""

    def predict(self, units: Sequence[Unit]) -> list[Prediction]: ...


class HeuristicCategorizer:
    """The heuristic labelling functions (winnow.data.labeling) as a categorizer: no model,
    no scores beyond the category it picks (probability 1)."""

    name = "heuristic labeller"

    def __init__(self, labeler: Any = None):
        if labeler is None:
            from winnow.data.labeling import Labeler

            labeler = Labeler()
        self.labeler = labeler

    def predict(self, units: Sequence[Unit]) -> list[Prediction]:
        return [one_hot(lab.category) for lab in self.labeler.label(units)]


def one_hot(category: str) -> Prediction:
    """A prediction that only knows the category."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}")
    return Prediction(category, {category: 1.0})


def as_categorizer(obj: Any) -> Categorizer:
    """A Categorizer from what callers pass: a categorizer, or an object with `label(units)`
    (the Labeler) or a `predict` that returns category names."""
    if isinstance(obj, HeuristicCategorizer):
        return obj
    predict = getattr(obj, "predict", None)
    if predict is None and hasattr(obj, "label"):
        return HeuristicCategorizer(obj)
    if predict is None:
        raise TypeError(f"{type(obj).__name__} has no predict(units) method")
    return _Adapted(obj)


class _Adapted:
    """Wraps a `predict` that may return category names or prediction-like objects."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = type(inner).__name__

    def predict(self, units: Sequence[Unit]) -> list[Prediction]:
        out = []
        for p in self.inner.predict(units):
            if isinstance(p, str):
                out.append(one_hot(p))
            elif isinstance(p, Prediction):
                out.append(p)
            else:
                scores = getattr(p, "scores", None)
                out.append(Prediction(p.category, dict(scores)) if scores else one_hot(p.category))
        return out


def load_categorizer(
    model: str | Path | None = None, fallback: str | Categorizer | None = "heuristic"
) -> Categorizer:
    """The classifier in `model` (None: the shipped default model), as a `SessionClassifier`:
    `predict(units)` labels whole sessions (the batch view, both neighbours), and `add(unit)`
    labels a live session unit by unit (the online view, at a constant cost per unit).

    When it cannot be loaded (no model installed, no onnxruntime, a corrupt directory), return
    `fallback`: "heuristic" (the labelling functions), a Categorizer of your own, or None to
    raise the loading error instead. A model named explicitly never falls back silently: the
    warning names the error.
    """
    try:
        from winnow.serving.session import SessionClassifier

        return SessionClassifier.load(model)
    except Exception as e:  # noqa: BLE001 - missing model, module or runtime: the fallback decides
        if fallback is None:
            raise
        error = str(e).splitlines()[0] if str(e) else type(e).__name__
    chosen = HeuristicCategorizer() if fallback == "heuristic" else fallback
    if isinstance(chosen, str):
        raise ValueError(f"fallback must be 'heuristic', a Categorizer or None, not {chosen!r}")
    log.warning(
        "no classifier (%s); categories from %s",
        error,
        getattr(chosen, "name", type(chosen).__name__),
    )
    return chosen


def categorizer_name(categorizer: Any) -> str:
    """A short name for reports: the model's name, or the class."""
    info = getattr(categorizer, "info", None)
    if isinstance(info, dict) and info.get("name"):
        return f"{type(categorizer).__name__} ({info['name']})"
    return getattr(categorizer, "name", None) or type(categorizer).__name__


__all__ = [
    "Categorizer",
    "HeuristicCategorizer",
    "Prediction",
    "as_categorizer",
    "categorizer_name",
    "load_categorizer",
    "one_hot",
]
