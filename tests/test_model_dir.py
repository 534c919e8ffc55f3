"""A damaged model directory is one clear line, never a traceback: the manifest validated field
by field, checksums only for files inside the directory, unreadable or truncated files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from winnow.classifier.manifest import ModelError, parse_manifest, read_manifest
from winnow.serving.classifier import ImportanceClassifier, default_model_path
from winnow.training.export import write_checksums

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "classifier" / "sessions.jsonl"


@pytest.fixture
def model(tmp_path) -> Path:
    out = tmp_path / "m"
    shutil.copytree(default_model_path(), out)
    return out


def _edit(model_dir: Path, changes: dict | None = None, **kw) -> None:
    changes = {**(changes or {}), **kw}
    model = model_dir
    config = json.loads((model / "config.json").read_text())
    for key, value in changes.items():
        target = config
        *path, last = key.split("__")
        for p in path:
            target = target[p]
        target[last] = value
    (model / "config.json").write_text(json.dumps(config))
    write_checksums(model)


def test_the_shipped_manifest_reads():
    m = read_manifest(default_model_path())
    assert m.labels and m.kind in ("ngram", "transformer")
    again = parse_manifest(json.loads(json.dumps(m.to_dict())), Path("x/config.json"))
    assert again == m


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("format_version", "3", "field 'format_version' must be an integer"),
        ("format_version", 99, "model format v99, but this winnow reads"),
        ("kind", 5, "field 'kind' must be a string"),
        ("kind", "lstm", "field 'kind' must be one of"),
        ("labels", "requirement", "field 'labels' must be a list of strings"),
        ("labels", ["requirement"], "field 'labels' must be the 11 categories"),
        ("features", [], "field 'features' must be an object"),
        ("features__names", None, "field 'names' must be a list of strings"),
        ("features__version", 999, "feature spec v999"),
        ("model", "big", "field 'model' must be an object"),
        ("calibration", {"temperature": 0}, "field 'temperature' must be a positive number"),
        ("calibration", {"temperature": "hot"}, "field 'temperature' must be a number"),
        (
            "calibration",
            {"must_keep_threshold": [1]},
            "field 'must_keep_threshold' must be a number",
        ),
        (
            "calibration",
            {"must_keep_rule": "vibes"},
            "field 'must_keep_rule' must be mass or ratio or role",
        ),
        (
            "calibration",
            {"must_keep_rule": "role", "must_keep_scaling": {"user": [1, 0]}},
            "field 'must_keep_scaling' must be an object with a \"\\*\" entry",
        ),
        (
            "calibration",
            {"must_keep_rule": "role", "must_keep_scaling": {"*": [1, "x"]}},
            r"field 'must_keep_scaling.\*' must be a list of two numbers",
        ),
        ("provenance", 1, "field 'provenance' must be an object"),
        ("name", 3, "field 'name' must be a string"),
    ],
)
def test_wrong_types_are_one_line(model, field, value, message):
    _edit(model, {field: value})
    with pytest.raises(ModelError, match=message) as e:
        ImportanceClassifier.load(model)
    assert "\n" not in str(e.value) and str(model / "config.json") in str(e.value)


def test_kind_specific_fields(model):
    kind = read_manifest(model).kind
    if kind == "ngram":
        _edit(model, bag__buckets=1000)
        with pytest.raises(ModelError, match="field 'bag.buckets' must be a power of two"):
            ImportanceClassifier.load(model)
        _edit(model, bag__buckets="many")
        with pytest.raises(ModelError, match="field 'buckets' must be an integer"):
            ImportanceClassifier.load(model)
        _edit(model, bag__buckets=1 << 14, bag__version=99)  # hashes other tokens
        with pytest.raises(ModelError, match="trained on n-gram spec v99"):
            ImportanceClassifier.load(model)
    else:
        _edit(model, max_len="48")
        with pytest.raises(ModelError, match="field 'max_len' must be an integer"):
            ImportanceClassifier.load(model)


def test_not_json_and_not_an_object(model):
    (model / "config.json").write_text("{oops")
    write_checksums(model)
    with pytest.raises(ModelError, match=r"config.json:1: invalid JSON"):
        ImportanceClassifier.load(model)
    (model / "config.json").write_text("[1, 2]")
    write_checksums(model)
    with pytest.raises(ModelError, match="must hold a JSON object, not list"):
        ImportanceClassifier.load(model)


def test_truncated_onnx_is_one_line(model):
    data = (model / "model.onnx").read_bytes()
    (model / "model.onnx").write_bytes(data[: len(data) // 3])
    write_checksums(model)
    with pytest.raises(ModelError, match=r"model.onnx: not a loadable ONNX model") as e:
        ImportanceClassifier.load(model)
    assert "\n" not in str(e.value)


def test_missing_file(model):
    (model / "model.onnx").unlink()
    with pytest.raises(ModelError, match="model.onnx: listed in SHA256SUMS but missing"):
        ImportanceClassifier.load(model)
    with pytest.raises(ModelError, match="model.onnx: missing"):
        ImportanceClassifier.load(model, verify=False)


@pytest.mark.parametrize("name", ["../outside.txt", "/etc/hostname", "sub/../../x", "a/b"])
def test_checksums_name_only_files_inside(model, tmp_path, name):
    (tmp_path / "outside.txt").write_text("x")
    sums = (model / "SHA256SUMS").read_text()
    (model / "SHA256SUMS").write_text(sums + f"{'0' * 64}  {name}\n")
    with pytest.raises(ModelError, match="is not a file of the model directory"):
        ImportanceClassifier.load(model)


def test_a_symlink_out_of_the_directory_is_refused(model, tmp_path):
    (tmp_path / "secret").write_text("x")
    (model / "link").symlink_to(tmp_path / "secret")
    write_checksums(model)
    with pytest.raises(ModelError, match="link: listed in SHA256SUMS but missing"):
        ImportanceClassifier.load(model)


def test_cli_commands_print_one_line(model):
    _edit(model, labels="x")
    for argv in (
        ["classify", str(FIXTURE), "--model", str(model)],
        ["evaluate", str(model), str(FIXTURE)],
    ):
        p = subprocess.run(
            [sys.executable, "-m", "winnow.cli", *argv], capture_output=True, text=True, timeout=120
        )
        assert p.returncode == 1, argv
        assert "Traceback" not in p.stderr
        lines = [line for line in p.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "field 'labels'" in lines[0], p.stderr
