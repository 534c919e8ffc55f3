"""ONNX export: torch / ONNX Runtime parity on real units, model directory layout, checksums."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from winnow.classifier.manifest import exclude_categories  # noqa: E402
from winnow.classifier.model import ModelConfig, UnitClassifier  # noqa: E402
from winnow.classifier.tokenizer import UnitEncoder, train_tokenizer  # noqa: E402
from winnow.data.schema import CATEGORIES  # noqa: E402

pytestmark = pytest.mark.slow  # builds tokenizers and models


def _export(tmp_path_factory, rows: list[dict], heads: int):
    from winnow.training.export import export_onnx

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=600, max_len=48, d_model=32, d_ff=64, n_layers=2, n_heads=heads)
    encoder = UnitEncoder(train_tokenizer((r["text"] for r in rows), 600), config.max_len)
    config.vocab_size = encoder.vocab_size
    model = UnitClassifier(config).eval()
    with torch.no_grad():  # trained norms are not the identity: make the test see them
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    path = export_onnx(model, tmp_path_factory.mktemp("onnx") / "model.onnx")
    return rows, encoder, model, path


@pytest.fixture(scope="module", params=[2, 1], ids=["2 heads", "1 head"])
def exported(request, tmp_path_factory, classifier_rows):
    return _export(tmp_path_factory, classifier_rows, request.param)


def test_one_file_no_external_data(exported):
    _, _, _, path = exported
    assert [p.name for p in path.parent.iterdir()] == ["model.onnx"]


def test_parity_on_real_units_of_many_lengths(exported):
    from winnow.serving.classifier import ImportanceClassifier, graph_inputs

    rows, encoder, model, path = exported
    ids = encoder.encode(rows)
    assert len({len(i) for i in ids}) > 10, "the fixture should cover many lengths"
    serve = ImportanceClassifier.__new__(ImportanceClassifier)
    feats = serve.features(rows)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    # Batches of mixed lengths (padding) and single units (no padding).
    for lo, hi in [(0, len(rows)), (0, 1), (5, 6), (10, 40), (60, 61)]:
        x = UnitEncoder.pad(ids[lo:hi])
        got = session.run(None, graph_inputs(x, feats[lo:hi]))[0][:, 0]
        with torch.no_grad():
            want = torch.softmax(
                model(torch.from_numpy(x), torch.from_numpy(feats[lo:hi])), -1
            ).numpy()
        assert got.shape == (hi - lo, len(CATEGORIES))
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_model_directory(exported, tmp_path):
    from winnow.serving.classifier import ImportanceClassifier, to_unit
    from winnow.training.config import TrainConfig
    from winnow.training.export import save_model
    from winnow.training.trainer import TrainResult

    rows, encoder, model, _ = exported
    metrics = {
        "accuracy": 0.5,
        "macro_f1": 0.4,
        "must_keep_recall": 1.0,
        "must_keep_droppable": 0.0,
        "n": 3,
    }
    result = TrainResult(
        model,
        encoder,
        TrainConfig(model=model.config),
        [],
        1,
        {"train_units": 3},
        {**metrics, "gold": "hand"},
        1.0,
    )
    out = save_model(result, tmp_path / "m", name="test-model")
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [
            "model.onnx",
            "tokenizer.json",
            "config.json",
            "metrics.json",
            "MODEL_CARD.md",
            "SHA256SUMS",
        ]
    )
    assert not list(out.glob("*.pt")) and not list(out.glob("*.pkl"))
    config = json.loads((out / "config.json").read_text())
    assert config["labels"] == list(CATEGORIES) and config["name"] == "test-model"
    assert "accuracy 0.500" in (out / "MODEL_CARD.md").read_text()
    clf = ImportanceClassifier.load(out)
    assert clf.info["name"] == "test-model"
    assert set(clf.info["sha256"]) == set(names) - {"SHA256SUMS"}
    with torch.no_grad():
        ids = torch.from_numpy(UnitEncoder.pad(encoder.encode(rows[:8])))
        want = torch.softmax(model(ids, torch.from_numpy(clf.features(rows[:8]))), -1).numpy()
    # as served: the categories a unit cannot have (an assistant's text: requirement) ruled out
    want = exclude_categories(want, [to_unit(r) for r in rows[:8]])
    got = clf.predict_proba(rows[:8])
    np.testing.assert_allclose(got, want, atol=1e-4)
