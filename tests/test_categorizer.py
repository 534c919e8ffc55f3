"""Contract C2: the Categorizer protocol, load_categorizer and its fallback."""

from __future__ import annotations

import pytest

from winnow.data.schema import CATEGORIES, Unit
from winnow.serving.categorizer import (
    Categorizer,
    HeuristicCategorizer,
    Prediction,
    as_categorizer,
    load_categorizer,
)

UNITS = [
    Unit("s:0", "s", 0, "user", "text", "Add rate limiting to the login endpoint, max 5 a minute"),
    Unit("s:1", "s", 1, "assistant", "text", "Let me look at the tests."),
    Unit("s:2", "s", 2, "user", "text", "ok thanks"),
]


def test_the_shipped_model_is_a_categorizer() -> None:
    clf = load_categorizer()
    assert isinstance(clf, Categorizer)
    preds = clf.predict(UNITS)
    assert len(preds) == len(UNITS)
    for p in preds:
        assert isinstance(p, Prediction) and p.category in CATEGORIES
        assert abs(sum(p.scores.values()) - 1) < 1e-3 and p.confidence == p.scores[p.category]


def test_a_model_that_cannot_load_falls_back_or_raises(tmp_path, caplog) -> None:
    fallback = load_categorizer(tmp_path / "no-model")
    assert isinstance(fallback, HeuristicCategorizer)
    assert "no classifier" in caplog.text
    preds = fallback.predict(UNITS)
    assert [p.category for p in preds][0] == "requirement"
    assert all(p.scores == {p.category: 1.0} for p in preds)
    with pytest.raises(Exception, match="no-model"):
        load_categorizer(tmp_path / "no-model", fallback=None)

    class Mine:
        def predict(self, units):
            return [Prediction("status", {"status": 1.0}) for _ in units]

    mine = Mine()
    assert load_categorizer(tmp_path / "no-model", fallback=mine) is mine


def test_adapters_for_older_classifiers() -> None:
    class Names:
        def predict(self, units):
            return ["acknowledgment" for _ in units]

    assert [p.category for p in as_categorizer(Names()).predict(UNITS)] == ["acknowledgment"] * 3
    from winnow.data.labeling import Labeler

    assert isinstance(as_categorizer(Labeler()), HeuristicCategorizer)
    with pytest.raises(TypeError, match="no predict"):
        as_categorizer(object())


def test_the_compressor_labels_as_the_session_classifier() -> None:
    """The default categorizer is a `SessionClassifier`: the compressor's categories and
    scores are its batch view of the whole session (point 3 of issue 13)."""
    from pathlib import Path

    from winnow.data.readers import read_paths
    from winnow.serving.compressor import SemanticCompressor
    from winnow.serving.session import SessionClassifier

    clf = load_categorizer(fallback=None)
    assert isinstance(clf, SessionClassifier)
    units = list(read_paths([Path(__file__).parent / "fixtures" / "demo_session.jsonl"]))
    want = SessionClassifier.load().predict(units)
    compressor = SemanticCompressor()
    assert compressor.categorize(units) == [p.category for p in want]
    got = compressor._labels(units)
    for (_, scores), p in zip(got, want, strict=True):
        assert scores == p.scores
    # the online view differs from the batch one somewhere: the compressor is not using it
    online = clf.predict(units, online=True)
    assert any(a.scores != b.scores for a, b in zip(online, want, strict=True))
