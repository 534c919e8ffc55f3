"""The torch model and trainer: shapes, padding, determinism, a tiny fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from winnow.classifier.model import ModelConfig, UnitClassifier  # noqa: E402
from winnow.classifier.tokenizer import PAD_ID  # noqa: E402
from winnow.data.schema import CATEGORIES  # noqa: E402

SMALL = ModelConfig(vocab_size=300, max_len=32, d_model=32, n_heads=2, d_ff=64, n_layers=2)


def batch(config: ModelConfig, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, config.vocab_size, (4, config.max_len), generator=g)
    ids[1, 5:] = PAD_ID
    ids[2, 1:] = PAD_ID  # a one-token unit
    return ids, torch.rand(4, config.n_features, generator=g)


def test_logits_shape():
    model = UnitClassifier(SMALL).eval()
    assert model(*batch(SMALL)).shape == (4, len(CATEGORIES))


def test_padding_does_not_change_a_unit():
    torch.manual_seed(0)
    model = UnitClassifier(SMALL).eval()
    ids, feats = batch(SMALL)
    short = ids[1:2, :5]
    with torch.no_grad():
        alone = model(short, feats[1:2])
        padded = model(ids[1:2], feats[1:2])
    torch.testing.assert_close(alone, padded, atol=1e-5, rtol=1e-4)


def _write_dataset(tmp: Path, rows: list[dict]) -> Path:
    """A data set folder from the fixture: one session per split (shape of `winnow dataset`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp.mkdir(parents=True, exist_ok=True)
    sessions = list(dict.fromkeys(r["session_id"] for r in rows))
    parts = {"train": sessions[:2], "validation": sessions[2:3], "test": sessions[3:]}
    for name, sids in parts.items():
        part = [r for r in rows if r["session_id"] in sids]
        pq.write_table(pa.Table.from_pylist(part), tmp / f"{name}.parquet")
    return tmp


@pytest.mark.slow
def test_tiny_fit_is_deterministic_and_learns(tmp_path, classifier_rows):
    from rich.console import Console

    from winnow.training.config import TrainConfig
    from winnow.training.trainer import Trainer

    data = _write_dataset(tmp_path, classifier_rows)
    config = TrainConfig(
        model=ModelConfig(vocab_size=400, max_len=32, d_model=32, d_ff=64), epochs=3, patience=3
    )
    quiet = Console(quiet=True)
    a = Trainer(config, console=quiet).fit(data)
    b = Trainer(config, console=quiet).fit(data)
    assert [h["loss"] for h in a.history] == [h["loss"] for h in b.history]
    assert a.history[-1]["loss"] < a.history[0]["loss"]
    for pa_, pb in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(pa_, pb)
    assert a.data_summary["train_hand_units"] > 0
    assert a.validation["gold"] == "hand"
    assert 1 <= a.best_epoch <= 3
    assert np.isfinite(a.validation["macro_f1"])


def test_cli_evaluate_reports_model_and_baselines(tmp_path, capsys, classifier_rows):
    pytest.importorskip("sklearn")
    from winnow.cli import main

    data = _write_dataset(tmp_path, classifier_rows)
    png, out = tmp_path / "cm.png", tmp_path / "eval.json"
    assert (
        main(["evaluate", "default", str(data), "--confusion", str(png), "--json", str(out)]) == 0
    )
    text = capsys.readouterr().out
    assert "hand-labelled units of test" in text
    for label in ("must-keep recall", "heuristic", "kind/tool rule", "macro-F1"):
        assert label in text
    res = json.loads(out.read_text())
    assert res["gold"] == "hand" and set(res["results"]) == {"model", "heuristic", "kind/tool rule"}
    assert png.stat().st_size > 1000


def test_rule_baseline():
    from winnow.training.evaluate import rule_baseline

    assert (
        rule_baseline({"role": "assistant", "kind": "tool_call", "tool_name": "Edit", "text": ""})
        == "code"
    )
    assert (
        rule_baseline({"role": "assistant", "kind": "tool_call", "tool_name": "Read", "text": ""})
        == "status"
    )
    assert (
        rule_baseline({"role": "tool", "kind": "tool_result", "is_error": True, "text": ""})
        == "error"
    )
    assert rule_baseline({"role": "tool", "kind": "tool_result", "text": ""}) == "tool_output"
    assert rule_baseline({"role": "user", "kind": "text", "text": "hi"}) == "requirement"
    assert rule_baseline({"role": "assistant", "kind": "thinking", "text": "hm"}) == "explanation"


def test_must_keep_metrics():
    from winnow.training.evaluate import classification_metrics

    m = classification_metrics(
        ["requirement", "decision", "status", "code"], ["constraint", "status", "status", "code"]
    )
    assert m["must_keep_recall"] == 0.5  # requirement -> constraint still kept
    assert m["must_keep_droppable"] == 0.5  # decision -> status would be dropped
    assert m["accuracy"] == 0.5


@pytest.mark.slow
def test_cli_train_writes_a_loadable_model(tmp_path, classifier_rows, capsys):
    from winnow.cli import main
    from winnow.serving.classifier import ImportanceClassifier

    data = _write_dataset(tmp_path / "data", classifier_rows)
    out = tmp_path / "model"
    argv = [
        "train",
        str(data),
        "-o",
        str(out),
        "--epochs",
        "1",
        "--d-model",
        "32",
        "--max-len",
        "32",
        "--vocab-size",
        "400",
    ]
    assert main(argv) == 0
    # the epoch line and the summary give two macro-F1s: the summary says which is which
    err = capsys.readouterr().err
    assert "after the must-keep bias" in err and "epoch  1/1" in err
    clf = ImportanceClassifier.load(out)
    assert clf.info["name"] == "model" and clf.info["max_len"] == 32
    assert len(clf.predict([{"role": "user", "kind": "text", "text": "hello", "index": 0}])) == 1
