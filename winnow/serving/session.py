"""Classifying a live session one unit at a time, at constant cost per unit.

    clf = SessionClassifier.load()                 # the shipped model
    for unit in stream:
        p = clf.add(unit)                          # sees this unit and those before it
    clf.predict(units)                             # whole sessions, batch view (both sides)

`add` gives exactly what `ImportanceClassifier.predict(units, online=True)` gives for the
same units (same category; scores equal up to float rounding of a batch of one): each unit
is hashed and featurized once and what the next unit needs of it (its hand features, its
first words) is carried forward, so the n-th unit costs what the first did. Sessions are
kept apart by `session_id`, so units of several sessions may be interleaved.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from winnow.classifier.features import Context, unit_features
from winnow.data.cues import Settler
from winnow.data.schema import Unit
from winnow.serving.classifier import ImportanceClassifier, Prediction, to_unit

# Sessions remembered at once; the least recently fed is forgotten first (its next unit is
# then classified as the first of its session would be).
MAX_SESSIONS = 4096


class SessionClassifier:
    """An `ImportanceClassifier` with per-session state for incremental (online) use. It is
    also a `Categorizer` (`predict(units)`), for the compressor and the runtime."""

    def __init__(self, classifier: ImportanceClassifier, max_sessions: int = MAX_SESSIONS):
        self.classifier = classifier
        self.labels = classifier.labels
        self.max_sessions = max_sessions
        self._state: OrderedDict[str, Any] = OrderedDict()

    @classmethod
    def load(cls, path: str | Path | None = None, threads: int = 1) -> SessionClassifier:
        """Load a model directory (None: the shipped default); `ModelError` on a bad one."""
        return cls(ImportanceClassifier.load(path, threads=threads))

    @property
    def info(self) -> dict[str, Any]:
        return self.classifier.info

    def add(self, unit: Unit | dict[str, Any]) -> Prediction:
        """Classify the next unit of its session, seeing only the units fed before it."""
        unit = to_unit(unit)
        clf = self.classifier
        sid = unit.session_id
        seen, settle = self._state.pop(sid, (None, None))
        settle = settle or Settler()
        if clf.kind == "ngram":
            ids, weights, dense, seen = clf.bag.step(seen, unit)
            probs = clf.run_bag(ids, weights, dense)
        else:
            context = Context(int(unit.index or 0) + 1, seen, None)
            single = clf._single()
            feats = single.features[0, 0]
            feats.fill(0.0)
            unit_features(unit, context, feats, clf.feature_version)
            probs = single.run(clf.encoder.encode_one(unit)).copy()
            seen = unit
        self._state[sid] = (seen, settle)
        if len(self._state) > self.max_sessions:
            self._state.popitem(last=False)
        return clf._predictions(np.asarray(probs)[None], [unit], settle)[0]

    def extend(self, units: Iterable[Unit | dict[str, Any]]) -> list[Prediction]:
        """`add` each unit in turn."""
        return [self.add(u) for u in units]

    def reset(self, session_id: str | None = None) -> None:
        """Forget one session (None: all)."""
        if session_id is None:
            self._state.clear()
        else:
            self._state.pop(session_id, None)

    def predict(
        self, units: Sequence[Unit | dict[str, Any]], online: bool = False
    ) -> list[Prediction]:
        """Whole sessions at once (the batch view by default); leaves the live state alone."""
        return self.classifier.predict(units, online=online)

    def predict_proba(
        self, units: Sequence[Unit | dict[str, Any]], online: bool = False
    ) -> np.ndarray:
        return self.classifier.predict_proba(units, online=online)


__all__ = ["MAX_SESSIONS", "SessionClassifier"]
