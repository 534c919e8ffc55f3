"""The torch-free importance classifier: ONNX Runtime + tokenizers + numpy.

    from winnow.serving import ImportanceClassifier
    clf = ImportanceClassifier.load()                  # the shipped winnow-small
    clf.predict_one({"role": "user", "kind": "text", "text": "Add rate limiting"}).category
    preds = clf.predict(units)                         # whole sessions: best features

Units are SCHEMA.md dicts or `Unit`s. Features that depend on the session (relative
position, neighbouring units) are computed from the units passed together, so pass whole
sessions when you have them; a lone unit is taken as the latest of its session, as in live use.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from winnow.classifier.features import (
    FEATURE_NAMES,
    FEATURE_VERSION,
    N_FEATURES,
    Context,
    batch_features,
    session_context,
    unit_features,
)
from winnow.classifier.tokenizer import CHARS_PER_TOKEN, PAD_ID, UnitEncoder
from winnow.data.schema import Unit
from winnow.serving.categorizer import Prediction  # the Categorizer protocol's result type

DEFAULT_MODEL = "winnow-small"
# Of the model directory layout (winnow.training.export writes it). v2: the fused graph of
# winnow.training.graph, with `lengths` and `pool` inputs.
FORMAT_VERSION = 2
CHECKSUMS = "SHA256SUMS"
REQUIRED_FILES = ("model.onnx", "tokenizer.json", "config.json")


class ModelError(ValueError):
    """A model directory that is missing, corrupt or made for another winnow."""


def default_model_path() -> Path:
    """The shipped default model: in the installed package, else in the source tree."""
    try:
        p = Path(str(resources.files("winnow.models") / DEFAULT_MODEL))
        if (p / "config.json").is_file():
            return p
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parents[2] / "models" / DEFAULT_MODEL


def _text(unit: Unit | dict[str, Any]) -> str:
    return (unit.get("text") if isinstance(unit, dict) else unit.text) or ""


def graph_inputs(ids: np.ndarray, features: np.ndarray) -> dict[str, np.ndarray]:
    """The model graph's inputs (winnow.training.graph) for right-padded token ids
    [batch, seq] and hand features [batch, n_features]."""
    real = ids != PAD_ID
    lengths = real.sum(1, dtype=np.int32)
    pool = real / np.maximum(lengths, 1)[:, None].astype(np.float32)
    return {
        "input_ids": ids.astype(np.int32, copy=False),
        "lengths": lengths,
        "pool": pool[:, None, :].astype(np.float32, copy=False),
        "features": np.ascontiguousarray(features, dtype=np.float32)[:, None, :],
    }


class _Single:
    """One thread's buffers for one-unit calls: an IOBinding per sequence length, bound once,
    so that a call only writes ids and features in place (ORT's per-call conversion of
    numpy inputs costs ~25 us of a ~200 us run)."""

    def __init__(self, session: Any, n_features: int, n_labels: int, output: str):
        self.session = session
        self.features = np.zeros((1, 1, n_features), np.float32)
        self.probs = np.zeros((1, 1, n_labels), np.float32)
        self.output = output
        # seq length -> (binding, its inputs): the bound arrays must live as long as it
        self.bound: dict[int, tuple[Any, dict[str, np.ndarray]]] = {}

    def bind(self, n: int) -> tuple[Any, dict[str, np.ndarray]]:
        inputs = {
            "input_ids": np.zeros((1, n), np.int32),
            "lengths": np.array([n], np.int32),
            "pool": np.full((1, 1, n), 1.0 / n, np.float32),
            "features": self.features,
        }
        binding = self.session.io_binding()
        for name, value in inputs.items():
            binding.bind_cpu_input(name, value)
        p = self.probs
        binding.bind_output(self.output, "cpu", 0, np.float32, p.shape, p.ctypes.data)
        self.bound[n] = (binding, inputs)
        return binding, inputs

    def run(self, ids: np.ndarray) -> np.ndarray:
        """Probabilities for one unit's ids [1, n]; `self.features` must hold its features."""
        binding, inputs = self.bound.get(ids.shape[1]) or self.bind(ids.shape[1])
        inputs["input_ids"][0] = ids[0]
        self.session.run_with_iobinding(binding)
        return self.probs[0, 0]


def _verify(model_dir: Path) -> dict[str, str]:
    import hashlib

    sums_file = model_dir / CHECKSUMS
    if not sums_file.is_file():
        raise ModelError(f"{model_dir}: no {CHECKSUMS}; not a winnow model directory")
    sums: dict[str, str] = {}
    for lineno, line in enumerate(sums_file.read_text().splitlines(), 1):
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64:
            raise ModelError(f"{sums_file}:{lineno}: not a `<sha256>  <file>` line")
        sums[parts[1].lstrip("*")] = parts[0]
    for name in REQUIRED_FILES:
        if name not in sums:
            raise ModelError(f"{sums_file}: {name} is not listed")
    for name, want in sums.items():
        path = model_dir / name
        if not path.is_file():
            raise ModelError(f"{path}: listed in {CHECKSUMS} but missing")
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        if got != want:
            raise ModelError(
                f"{path}: sha256 {got[:12]}... does not match {CHECKSUMS} ({want[:12]}...); "
                "the file is corrupt or was changed"
            )
    return sums


class ImportanceClassifier:
    """Predicts the importance category (TAXONOMY.md) of transcript units.

    Thread-safe: the ONNX Runtime session and the tokenizer are only read after `load`.
    """

    def __init__(
        self, model_dir: Path, config: dict[str, Any], sha256: dict[str, str], threads: int = 1
    ):
        import onnxruntime as ort

        self.model_dir = model_dir
        self.config = config
        self.sha256 = sha256
        self.labels: tuple[str, ...] = tuple(config["labels"])
        self.threads = threads
        opts = ort.SessionOptions()
        # The graph is fused by hand (winnow.training.graph); ORT's extended fusions would
        # put back the SkipLayerNormalization it avoids, and cost ~8% of a one-unit call.
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(
            str(model_dir / "model.onnx"), opts, providers=["CPUExecutionProvider"]
        )
        self.encoder = UnitEncoder.from_file(
            model_dir / "tokenizer.json",
            int(config["max_len"]),
            int(config.get("chars_per_token", CHARS_PER_TOKEN)),
        )
        self._output = [config.get("output_name", "probs")]
        self._local = threading.local()

    @classmethod
    def load(
        cls, path: str | Path | None = None, threads: int = 1, verify: bool = True
    ) -> ImportanceClassifier:
        """Load a model directory (None: the shipped default), checking every file's sha256."""
        model_dir = Path(path).expanduser() if path is not None else default_model_path()
        if not (model_dir / "config.json").is_file():
            raise ModelError(f"{model_dir}: no config.json; not a winnow model directory")
        sums = _verify(model_dir) if verify else {}
        try:
            config = json.loads((model_dir / "config.json").read_text())
        except json.JSONDecodeError as e:
            raise ModelError(
                f"{model_dir / 'config.json'}:{e.lineno}: invalid JSON ({e.msg})"
            ) from None
        version = int(config.get("format_version", 0))
        if version != FORMAT_VERSION:
            raise ModelError(
                f"{model_dir}: model format v{version}, but this winnow reads v{FORMAT_VERSION}; "
                + (
                    "upgrade winnow"
                    if version > FORMAT_VERSION
                    else "rebuild it with `winnow release` or `winnow train`"
                )
            )
        feats = config.get("features", {})
        if (
            feats.get("version") != FEATURE_VERSION
            or tuple(feats.get("names", ())) != FEATURE_NAMES
        ):
            raise ModelError(
                f"{model_dir}: trained on feature spec v{feats.get('version')} but this winnow "
                f"computes v{FEATURE_VERSION}; retrain the model or use a matching winnow"
            )
        return cls(model_dir, config, sums, threads)

    @property
    def info(self) -> dict[str, Any]:
        """Name, version, labels, path, sha256 of each file and training summary."""
        c = self.config
        return {
            "name": c.get("name"),
            "version": c.get("version"),
            "labels": list(self.labels),
            "path": str(self.model_dir),
            "sha256": dict(self.sha256),
            "max_len": c.get("max_len"),
            "training": {k: v for k, v in c.get("training", {}).items() if k != "config"},
        }

    def _single(self) -> _Single:
        single = getattr(self._local, "single", None)
        if single is None:
            single = self._local.single = _Single(
                self.session, N_FEATURES, len(self.labels), self._output[0]
            )
        return single

    def features(
        self, units: Sequence[Unit | dict[str, Any]], contexts: Sequence[Context] | None = None
    ) -> np.ndarray:
        """The [len(units), N_FEATURES] hand features the network sees; each unit's session
        context (length, neighbours) is taken from `units` unless given."""
        return batch_features(units, contexts)

    def predict_one(
        self, unit: Unit | dict[str, Any], context: Context | None = None
    ) -> Prediction:
        """One unit, lowest latency. `context`: its session length and neighbours (None: it is
        the latest unit of its session, as in live use)."""
        single = self._single()
        feats = single.features[0, 0]
        feats.fill(0.0)
        unit_features(unit, context, feats)
        probs = single.run(self.encoder.encode_one(unit))
        return Prediction(self.labels[int(probs.argmax())], dict(zip(self.labels, probs.tolist())))

    def predict(
        self, units: Sequence[Unit | dict[str, Any]], batch_size: int = 1024
    ) -> list[Prediction]:
        """One Prediction per unit, in order."""
        units = list(units)
        if len(units) == 1:
            return [self.predict_one(units[0])]
        return self.predict_batch(units, batch_size)

    def predict_batch(
        self, units: Sequence[Unit | dict[str, Any]], batch_size: int = 1024, chunk: int = 1024
    ) -> list[Prediction]:
        """Many units: length-bucketed batches, features computed beside the network."""
        probs = self.predict_proba(units, batch_size, chunk)
        labels = self.labels
        best = probs.argmax(1).tolist()
        return [Prediction(labels[b], dict(zip(labels, p))) for b, p in zip(best, probs.tolist())]

    def predict_proba(
        self, units: Sequence[Unit | dict[str, Any]], batch_size: int = 1024, chunk: int = 1024
    ) -> np.ndarray:
        """[len(units), len(labels)] probabilities.

        Work goes in chunks through two threads: while ONNX Runtime (outside the GIL) scores
        one chunk, the other thread prepares the next (hand features, token ids and padded,
        length-sorted batches: mostly Python). Chunks hold units of about the same length, one
        batch each by default: each ORT call must win the GIL back from that thread (up to
        5 ms), and batches of 1024 ran 11.8k units/s where batches of 128 ran 9.9k.
        """
        units = list(units)
        out = np.zeros((len(units), len(self.labels)), np.float32)
        if not units:
            return out
        contexts = session_context(units)
        # Chunks of units of about the same length (characters the encoder keeps: a close
        # proxy of their token count), so a chunk pads little as one or two batches.
        span = self.encoder.clip_chars
        by_length = np.argsort([min(len(_text(u)), span) for u in units], kind="stable")

        def prepare(part: np.ndarray) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
            chunk_units = [units[i] for i in part]
            feats = self.features(chunk_units, [contexts[i] for i in part])
            ids = self.encoder.encode(chunk_units)
            order = np.argsort([len(i) for i in ids], kind="stable")
            return [
                (part[idx], graph_inputs(UnitEncoder.pad([ids[i] for i in idx]), feats[idx]))
                for idx in (order[s : s + batch_size] for s in range(0, len(order), batch_size))
            ]

        parts = [by_length[lo : lo + chunk] for lo in range(0, len(units), chunk)]
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(prepare, parts[0])
            for k in range(len(parts)):
                batches = pending.result()
                if k + 1 < len(parts):
                    pending = pool.submit(prepare, parts[k + 1])
                for idx, inputs in batches:
                    out[idx] = self.session.run(self._output, inputs)[0][:, 0]
        return out


__all__ = [
    "ImportanceClassifier",
    "ModelError",
    "Prediction",
    "default_model_path",
    "graph_inputs",
]
