"""Leave-one-source-out evaluation and what it fits: figures, temperature, must-keep threshold,
the teacher's embedding cache, and a tiny end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from winnow.data.schema import CATEGORIES, CATEGORY_INDEX, MUST_KEEP, Unit

pytest.importorskip("sklearn")

from winnow.training.by_source import (  # noqa: E402
    calibrate,
    decide,
    fit_role_scaling,
    fit_temperature,
    fit_threshold,
)
from winnow.training.evaluate import probability_metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "classifier" / "sessions.jsonl"
K = [CATEGORY_INDEX[c] for c in sorted(MUST_KEEP)]
S = CATEGORY_INDEX["status"]


def _probs(rows: list[dict[str, float]]) -> np.ndarray:
    out = np.full((len(rows), len(CATEGORIES)), 1e-6)
    for i, r in enumerate(rows):
        for c, p in r.items():
            out[i, CATEGORY_INDEX[c]] = p
    return out / out.sum(1, keepdims=True)


def test_probability_metrics_on_a_known_ranking():
    gold = ["decision", "status", "requirement", "status"]
    probs = _probs(
        [{"decision": 0.9, "status": 0.1}, {"status": 0.8, "decision": 0.2},
         {"requirement": 0.6, "status": 0.4}, {"status": 0.3, "decision": 0.7}]
    )  # fmt: skip
    m = probability_metrics(gold, probs)
    # must-keep scores 0.9, 0.6 vs 0.2, 0.7: three of four pairs ordered right
    assert m["must_keep_auc"] == pytest.approx(0.75)
    assert m["must_keep_recall_at_5fk"] == pytest.approx(0.5)
    assert 0 <= m["ece"] <= 1 and 0 <= m["must_keep_ece"] <= 1


def test_temperature_recovers_a_known_sharpening():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4000, len(CATEGORIES))) * 2
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    gold = np.array([rng.choice(len(CATEGORIES), p=row) for row in p])
    overconfident = calibrate(p, 0.5)  # logits x 2
    t = fit_temperature(np.log(overconfident), gold)
    assert t == pytest.approx(2.0, rel=0.1)
    before = probability_metrics([CATEGORIES[g] for g in gold], overconfident)["ece"]
    after = probability_metrics([CATEGORIES[g] for g in gold], calibrate(overconfident, t))["ece"]
    assert after < before / 2


def test_threshold_reaches_the_recall_and_decide_applies_it():
    # four must-keep units: two argmax must-keep, two with must-keep mass 0.3 and 0.2
    probs = _probs(
        [{"decision": 0.9, "status": 0.1}, {"requirement": 0.7, "status": 0.3},
         {"decision": 0.3, "status": 0.7}, {"decision": 0.2, "status": 0.8},
         {"decision": 0.1, "status": 0.9}]
    )  # fmt: skip
    gold = np.array([K[1], K[3], K[1], K[1], S])
    tau = fit_threshold(probs, gold, 0.75)
    assert tau == pytest.approx(0.3, abs=1e-3)
    pred = decide(probs, tau)
    assert [CATEGORIES[p] for p in pred] == [
        "decision",
        "requirement",
        "decision",
        "status",
        "status",
    ]
    assert list(decide(probs, None)) == list(probs.argmax(1))


def test_role_rule_weighs_the_mass_by_what_units_of_that_role_turn_out_to_be():
    """A harness notice (role system) with 20% must-keep mass is must-keep far less often
    than a user's text with as much: the "role" rule flips the user's text and leaves the
    notice, where one threshold on the mass flips both or neither."""
    rng = np.random.default_rng(0)
    n = 400
    roles = np.array(["user"] * n + ["system"] * n)
    mass = rng.uniform(0.02, 0.6, 2 * n)
    # must-keep: a user's text at its mass, a system notice a tenth as often
    keep = rng.uniform(size=2 * n) < np.where(roles == "user", mass * 1.5, mass * 0.1)
    probs = np.full((2 * n, len(CATEGORIES)), 1e-6)
    probs[:, K[2]] = mass
    probs[:, S] = 1 - mass
    gold = np.where(keep, K[2], S)
    scaling = fit_role_scaling(probs, gold, roles)
    assert set(scaling) == {"*", "user", "system"}
    tau = fit_threshold(probs, gold, 0.9, "role", roles, scaling)
    both = _probs([{"requirement": 0.25, "status": 0.75}] * 2)
    pred = decide(both, tau, "role", roles=np.array(["user", "system"]), scaling=scaling)
    assert [CATEGORIES[p] for p in pred] == ["requirement", "status"]
    # same recall on the data it was fitted on, fewer units flipped than by the mass alone
    tau_mass = fit_threshold(probs, gold, 0.9, "mass")
    by_role = decide(probs, tau, "role", roles=roles, scaling=scaling)
    by_mass = decide(probs, tau_mass, "mass")
    recall = lambda pred: np.isin(pred[keep], K).mean()  # noqa: E731
    assert recall(by_role) >= 0.9 and recall(by_mass) >= 0.9
    assert np.isin(by_role[~keep], K).sum() < np.isin(by_mass[~keep], K).sum()
    # a role the fit never saw takes the all-roles map
    other = decide(both[:1], tau, "role", roles=np.array(["tool"]), scaling=scaling)
    alone = decide(both[:1], tau, "role", roles=None, scaling=scaling)
    assert list(other) == list(alone)


@pytest.mark.slow
def test_tiny_leave_one_source_out_run():
    """Three sessions as three 'sources': every fold trains on the other two."""
    pytest.importorskip("torch")
    from winnow.classifier.config import BagModelConfig
    from winnow.classifier.ngrams import BagSpec
    from winnow.training.bag_trainer import BagTrainConfig
    from winnow.training.by_source import BagRecipe, Prepared, evaluate_by_source
    from winnow.training.corpus import Corpus

    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    units = [
        Unit.from_dict({k: v for k, v in r.items() if k not in ("category", "hand_label")})
        for r in rows
    ]
    corpus = Corpus(
        units,
        np.array([CATEGORY_INDEX[r["category"]] for r in rows]),
        np.array([bool(r["hand_label"]) for r in rows]),
        ["hand" if r["hand_label"] else "lf:x" for r in rows],
        [u.session_id[:8] for u in units],
    )
    spec = BagSpec(buckets=1 << 10)
    config = BagTrainConfig(model=BagModelConfig(buckets=1 << 10, hidden=16), spec=spec, epochs=3)
    report = evaluate_by_source(
        Prepared(corpus, spec), [BagRecipe("tiny", config, targets="heuristic")], seeds=(0, 1)
    )
    assert set(report.sources) == {u.session_id[:8] for u in units if corpus.hand[units.index(u)]}
    for key in ("tiny/batch", "tiny/online", "tiny/batch/argmax"):
        per = report.results[key]
        assert set(per) == {*report.sources, "mean"}
        for m in ("accuracy", "macro_f1", "must_keep_recall", "must_keep_auc", "ece"):
            assert m in per["mean"]
        assert 0 <= per["mean"]["accuracy"] <= 1
    assert set(report.spread["tiny/batch"]) >= {"accuracy"}
    assert report.temperatures["tiny/batch"] > 0
    json.dumps(report.to_dict())  # the model card and --json write it


def test_teacher_embeddings_are_cached_by_text(tmp_path, monkeypatch):
    from winnow.training.teacher import SentenceEncoder

    model_dir = tmp_path / "enc"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    calls: list[list[str]] = []

    class Stub:
        def encode(self, texts, **kw):
            calls.append(list(texts))
            return np.array([[len(t), 1.0] for t in texts], np.float32)

    enc = SentenceEncoder(model_dir, tmp_path / "cache")
    monkeypatch.setattr(enc, "_load", lambda: Stub())
    first = enc.embed(["a", "bb", "a"])
    assert calls == [["a", "bb"]]
    again = SentenceEncoder(model_dir, tmp_path / "cache")  # a new run reads the disk cache
    monkeypatch.setattr(again, "_load", lambda: pytest.fail("nothing should be embedded"))
    np.testing.assert_array_equal(again.embed(["bb", "a"]), first[[1, 0]])
    assert set(again.files) == {"config.json"} and len(again.digest) == 16


def _fixture_corpus():
    """The classifier fixture as a corpus: its 20 heuristic units, one settled by a tier-3
    rule, as many sources as sessions."""
    from winnow.training.corpus import Corpus

    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    units = [
        Unit.from_dict({k: v for k, v in r.items() if k not in ("category", "hand_label")})
        for r in rows
    ]
    hand = np.array([bool(r["hand_label"]) for r in rows])
    lsrc = ["hand" if h else "lf:x" for h in hand]
    lsrc[int(np.flatnonzero(~hand)[0])] = "lf:slash_command"  # tier 3: as sure as a hand label
    labels = np.array([CATEGORY_INDEX[r["category"]] for r in rows])
    return Corpus(units, labels, hand, lsrc, [u.session_id[:8] for u in units])


def test_transformer_targets_heuristic_gold_teacher():
    pytest.importorskip("torch")
    from winnow.training.by_source import Prepared, TransformerRecipe

    corpus = _fixture_corpus()
    data = Prepared(corpus)
    train = np.arange(len(corpus))
    fake = np.random.default_rng(0).dirichlet(np.ones(len(CATEGORIES)), len(corpus))
    data._teacher[("held", 0)] = fake  # the teacher's probabilities, as fitted for this fold
    settled = corpus.hand | np.array([s == "lf:slash_command" for s in corpus.label_source])
    labelled = [CATEGORIES[i] for i in corpus.labels]

    for targets in ("heuristic", "gold"):
        rows = TransformerRecipe(targets=targets).training_rows(data, "held", train, 0)
        assert [r["category"] for r in rows] == labelled
        assert [r["hand_label"] for r in rows] == list(corpus.hand)
        assert not any("soft_target" in r for r in rows)

    rows = TransformerRecipe(targets="teacher").training_rows(data, "held", train, 0)
    for i, r in enumerate(rows):
        if settled[i]:  # hand labels and tier-3 rules keep their label
            assert "soft_target" not in r and r["category"] == labelled[i]
        else:  # the rest learn the teacher's distribution
            np.testing.assert_allclose(r["soft_target"], fake[i], rtol=1e-6)
            assert r["category"] == CATEGORIES[int(fake[i].argmax())]
    assert sum("soft_target" in r for r in rows) == int((~settled).sum()) > 0
    with pytest.raises(ValueError, match="unknown targets"):
        TransformerRecipe(targets="silver").training_rows(data, "held", train, 0)


def test_trainer_rows_at_heuristic_weight_zero_give_context_only(classifier_rows):
    pytest.importorskip("torch")
    from winnow.classifier.tokenizer import UnitEncoder, train_tokenizer
    from winnow.training.trainer import _encode

    rows = [dict(r) for r in classifier_rows]
    rows[0]["soft_target"] = [1.0 / len(CATEGORIES)] * len(CATEGORIES)
    encoder = UnitEncoder(train_tokenizer((r["text"] or "" for r in rows), 400), 32)
    full = _encode(rows, encoder, 0.3)
    gold = _encode(rows, encoder, 0.0)
    keep = np.flatnonzero(full.hand)
    assert 0 < len(keep) < len(rows) and len(gold) == len(keep) and gold.hand.all()
    # the kept units' features still see their unlabelled neighbours
    np.testing.assert_array_equal(gold.features, full.features[keep])
    assert full.soft is not None and gold.soft is not None
    np.testing.assert_allclose(full.soft[0], 1.0 / len(CATEGORIES))
    np.testing.assert_array_equal(full.soft[1:].argmax(1), full.labels[1:])  # one-hot elsewhere
    assert _encode(classifier_rows, encoder, 0.3).soft is None


@pytest.mark.slow
def test_trainer_learns_soft_targets():
    """Units whose target is half decision, half status end up predicted about half and half;
    the same units with a hard decision label lean decision."""
    torch = pytest.importorskip("torch")
    from rich.console import Console

    from winnow.classifier.model import ModelConfig, UnitClassifier
    from winnow.training.config import TrainConfig
    from winnow.training.trainer import Encoded, Trainer, predict_logits

    d, s, n = CATEGORY_INDEX["decision"], CATEGORY_INDEX["status"], 32
    soft = np.zeros((n, len(CATEGORIES)), np.float32)
    soft[:, [d, s]] = 0.5
    labels = np.array([d, s] * (n // 2))  # both classes seen: both get a class weight
    ids = [[5 + i % 7, 9] for i in range(n)]
    feats = np.zeros((n, ModelConfig().n_features), np.float32)

    def fit(soft_targets: np.ndarray | None) -> np.ndarray:
        torch.manual_seed(0)
        data = Encoded(ids, feats, labels if soft_targets is not None else np.full(n, d),
                       np.ones(n, np.float32), np.ones(n, bool), soft_targets)  # fmt: skip
        model = UnitClassifier(
            ModelConfig(vocab_size=32, max_len=8, d_model=16, d_ff=32, n_layers=1, n_heads=2)
        )
        cfg = TrainConfig(batch_size=n, label_smoothing=0.0)
        trainer = Trainer(cfg, console=Console(quiet=True))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        class_w = torch.ones(len(CATEGORIES))
        torch.set_num_threads(1)  # as the Trainer does: tiny batches, threads only contend
        for _ in range(40):
            trainer._epoch(model, opt, sched, data, class_w, None, "t")
        z = predict_logits(model, data)
        return (np.exp(z) / np.exp(z).sum(1, keepdims=True)).mean(0)

    p = fit(soft)
    assert abs(p[d] - 0.5) < 0.1 and abs(p[s] - 0.5) < 0.1
    hard = fit(None)
    assert hard[d] > 0.9


def test_cli_recipes_transformer_gold_and_teacher(capsys):
    from winnow.cli import main

    args = ["evaluate", "--by-source", "--recipes", "transformer-gold,transformer-teacher"]
    assert main(args) != 0
    assert "the transformer-teacher recipe needs --teacher DIR" in capsys.readouterr().err
    assert main(["evaluate", "--by-source", "--recipes", "transformer-silver"]) != 0
    assert "transformer-gold, transformer-teacher" in capsys.readouterr().err


def test_ngram_v2_recipe_encodes_with_its_own_spec():
    """`--recipes ngram,ngram-v2` in one run: each recipe hashes the corpus its own way."""
    pytest.importorskip("torch")
    from winnow.classifier.ngrams import BagSpec
    from winnow.training.by_source import Prepared
    from winnow.training.commands import _recipes
    from winnow.training.corpus import Corpus

    (v1,) = _recipes(["ngram"], teacher=False)
    (v2,) = _recipes(["ngram-v2"], teacher=False)
    assert v1.config is None and v2.config.spec.version == 2
    unit = Unit(id="s:0", session_id="s", index=0, role="assistant", kind="text",
                text="I’m checking /home/dev/app/src/main.py now.")  # fmt: skip
    data = Prepared(Corpus([unit], np.array([0]), np.array([True]), ["hand"], ["s"]))
    old, new = data.inputs(True), data.inputs(True, spec=v2.config.spec)
    assert data.inputs(True, spec=BagSpec()) is old  # the default spec is v1, cached once
    assert not np.array_equal(old.ids, new.ids)
