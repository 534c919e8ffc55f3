"""The torch-free importance classifier: ONNX Runtime + numpy (+ tokenizers for the
transformer kind).

    from winnow.serving import ImportanceClassifier
    clf = ImportanceClassifier.load()                  # the shipped winnow-small
    clf.predict_one({"role": "user", "kind": "text", "text": "Add rate limiting"}).category
    preds = clf.predict(units)                         # whole sessions: best features
    preds = clf.predict(units, online=True)            # each unit sees only those before it

Units are SCHEMA.md dicts or `Unit`s (converted once, here at the edge). Features that depend
on the session (relative position, neighbouring units) are computed from the units passed
together, so pass whole sessions when you have them; a lone unit is taken as the latest of
its session, as in live use. `winnow.serving.session.SessionClassifier` classifies a live
session one unit at a time, at constant cost per unit.

Two kinds of model directory (`config.json` says which; `winnow.classifier.manifest`):
"ngram" (hashed word n-grams of the unit and its neighbours + hand features, an MLP) and
"transformer" (winnow 0.1's small transformer). Scores are calibrated probabilities (the
temperature is in the graph); the category is the argmax, or the likeliest must-keep category
when the must-keep probabilities reach the manifest's threshold.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from winnow.classifier.features import (
    FEATURE_VERSION,
    N_FEATURES,
    Context,
    batch_features,
    session_context,
    unit_features,
)
from winnow.classifier.manifest import (
    CHECKSUMS,
    FORMAT_VERSION,
    Manifest,
    ModelError,
    exclude_categories,
    must_keep_score,
    read_manifest,
    verify_checksums,
)
from winnow.data.cues import Settler
from winnow.data.schema import CATEGORIES, MUST_KEEP, Unit
from winnow.serving.categorizer import Prediction  # the Categorizer protocol's result type

_Part = TypeVar("_Part")  # one part of a batch run: unit indices, as a list or an array

DEFAULT_MODEL = "winnow-small"
REQUIRED_FILES = ("model.onnx", "config.json")
_KEEP = np.array([c in MUST_KEEP for c in CATEGORIES])


def to_unit(x: Unit | dict[str, Any]) -> Unit:
    """A Unit from a Unit or a SCHEMA.md dict; fields a classifier does not need may be missing
    (a lone `{"role", "kind", "text"}` is a unit of its own session at index 0)."""
    if isinstance(x, Unit):
        return x
    get = x.get
    return Unit(
        id=str(get("id") or ""),
        session_id=str(get("session_id") or ""),
        index=int(get("index") or 0),
        role=get("role") or "",
        kind=get("kind") or "",
        text=get("text") or "",
        tool_name=get("tool_name"),
        call_id=get("call_id"),
        is_error=get("is_error"),
    )


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
    real = ids != 0  # winnow.classifier.tokenizer.PAD_ID
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


class ImportanceClassifier:
    """Predicts the importance category (TAXONOMY.md) of transcript units.

    Thread-safe: the ONNX Runtime session and the encoders are only read after `load` (their
    caches are only added to or swapped).
    """

    # The hand-feature spec computed for the model: its manifest's (`load`), so a model is
    # served with the features it was trained on.
    feature_version: int = FEATURE_VERSION

    def __init__(
        self,
        model_dir: Path,
        manifest: Manifest | dict[str, Any],
        sha256: dict[str, str],
        threads: int = 1,
    ):
        import onnxruntime as ort

        if isinstance(manifest, dict):
            from winnow.classifier.manifest import parse_manifest

            manifest = parse_manifest(manifest, model_dir / "config.json")
        self.model_dir = model_dir
        self.manifest = manifest
        self.config = manifest.to_dict()
        self.sha256 = sha256
        self.labels: tuple[str, ...] = tuple(manifest.labels)
        self.kind = manifest.kind
        self.feature_version = manifest.feature_version
        self.threads = threads
        cal = manifest.calibration
        self.must_keep_threshold = cal.must_keep_threshold
        self.must_keep_rule = cal.must_keep_rule
        self.must_keep_scaling = cal.must_keep_scaling
        self._keep = np.array([c in MUST_KEEP for c in self.labels])
        self._label_index = {c: i for i, c in enumerate(self.labels)}
        self._keep_idx = np.flatnonzero(self._keep)
        opts = ort.SessionOptions()
        # The graphs are fused by hand (winnow.training.graph / bag_graph); ORT's extended
        # fusions would put back the SkipLayerNormalization the transformer avoids, and cost
        # ~8% of a one-unit call.
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        onnx_path = model_dir / "model.onnx"
        try:
            self.session = ort.InferenceSession(
                str(onnx_path), opts, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # ORT raises its own types (InvalidProtobuf, Fail, ...)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"{onnx_path}: not a loadable ONNX model ({first[:160]})") from None
        self._output = [manifest.extra.get("output_name", "probs")]
        self._local = threading.local()
        if self.kind == "ngram":
            from winnow.classifier.bag import BagEncoder
            from winnow.classifier.ngrams import BagSpec

            self.bag = BagEncoder(BagSpec.from_dict(manifest.bag), manifest.feature_version)
            names = {i.name for i in self.session.get_inputs()}
            if names != {"ids", "weights", "segments", "dense"}:
                raise ModelError(f"{onnx_path}: inputs {sorted(names)} are not an n-gram graph's")
        else:
            from winnow.classifier.tokenizer import UnitEncoder

            try:
                self.encoder = UnitEncoder.from_file(
                    model_dir / "tokenizer.json", manifest.max_len, manifest.chars_per_token
                )
            except (ValueError, OSError, Exception) as e:  # tokenizers raises a bare Exception
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ModelError(
                    f"{model_dir / 'tokenizer.json'}: unreadable ({first[:160]})"
                ) from None

    @classmethod
    def load(
        cls, path: str | Path | None = None, threads: int = 1, verify: bool = True
    ) -> ImportanceClassifier:
        """Load a model directory (None: the shipped default), checking every file's sha256.
        Any problem with the directory is a `ModelError` of one line."""
        model_dir = Path(path).expanduser() if path is not None else default_model_path()
        manifest = read_manifest(model_dir)
        required = tuple(f for f in manifest.required_files if f != "tokenizer.json" or verify)
        sums = verify_checksums(model_dir, (*required,)) if verify else {}
        for name in manifest.required_files:
            if not (model_dir / name).is_file():
                raise ModelError(f"{model_dir / name}: missing")
        return cls(model_dir, manifest, sums, threads)

    @property
    def info(self) -> dict[str, Any]:
        """Name, version, kind, labels, path, sha256 of each file, calibration, training."""
        m = self.manifest
        return {
            "name": m.name,
            "version": m.version,
            "kind": m.kind,
            "labels": list(self.labels),
            "path": str(self.model_dir),
            "sha256": dict(self.sha256),
            "max_len": m.max_len or None,
            "calibration": {
                "temperature": m.calibration.temperature,
                "must_keep_threshold": m.calibration.must_keep_threshold,
            },
            "training": {k: v for k, v in m.training.items() if k != "config"},
        }

    # --- decisions ----------------------------------------------------------------------

    def decide(
        self,
        probs: np.ndarray,
        units: Sequence[Unit] | None = None,
        settle: Settler | None = None,
    ) -> np.ndarray:
        """Category index per row of [n, labels] probabilities: the argmax, or the likeliest
        must-keep category when the must-keep score reaches the model's threshold. The score
        (`winnow.classifier.manifest.must_keep_score`) is the summed must-keep probability
        ("mass" rule), that sum over the likeliest other category's probability ("ratio"), or
        the chance a unit of its role with that sum is must-keep ("role"; without `units`, the
        all-roles map). With `units`, a unit TAXONOMY.md itself settles
        (`cues.Settler`, fed the units in order; `settle` carries one on from earlier
        units) takes that category: a /clear the model gives 81% boilerplate and 9%
        must-keep would otherwise cross the threshold."""
        pred = probs.argmax(1)
        tau = self.must_keep_threshold
        if tau is not None and len(probs):
            keep = self._keep_idx
            rule = self.must_keep_rule
            score = must_keep_score(
                probs[:, keep].sum(1),
                probs[:, ~self._keep].max(1) if rule == "ratio" else None,
                rule,
                [u.role for u in units] if units is not None and rule == "role" else None,
                self.must_keep_scaling,
            )
            flip = (score >= tau) & ~self._keep[pred]
            pred = np.where(flip, keep[probs[:, keep].argmax(1)], pred)
        if units is not None:
            settle = settle or Settler()
            for i, u in enumerate(units):
                settled = self._label_index.get(settle(u) or "")
                if settled is not None:
                    pred[i] = settled
        return pred

    def _predictions(
        self, probs: np.ndarray, units: Sequence[Unit], settle: Settler | None = None
    ) -> list[Prediction]:
        labels = self.labels
        probs = exclude_categories(probs, units, labels)  # the single and live paths' too
        return [
            Prediction(labels[b], dict(zip(labels, p)))
            for b, p in zip(self.decide(probs, units, settle).tolist(), probs.tolist())
        ]

    # --- one unit -----------------------------------------------------------------------

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
        return batch_features([to_unit(u) for u in units], contexts, self.feature_version)

    def predict_one(
        self, unit: Unit | dict[str, Any], context: Context | None = None
    ) -> Prediction:
        """One unit, lowest latency. `context`: its session length and neighbours (None: it is
        the latest unit of its session, as in live use)."""
        unit = to_unit(unit)
        if self.kind == "ngram":
            probs = self._bag_one(unit, context)
        else:
            single = self._single()
            feats = single.features[0, 0]
            feats.fill(0.0)
            unit_features(unit, context, feats, self.feature_version)
            probs = single.run(self.encoder.encode_one(unit))
        return self._predictions(probs[None], [unit])[0]

    def _bag_one(self, unit: Unit, context: Context | None) -> np.ndarray:
        """The n-gram inputs of one unit, its neighbours taken from `context`."""
        from winnow.classifier.bag import NEIGHBOUR_MASK
        from winnow.classifier.ngrams import group_weights, is_prose

        h = self.bag.hasher
        own, _, _ = h.unit_ids(unit.text or "", unit.tool_name)
        groups = [own]
        dense = np.zeros(3 * N_FEATURES, np.float32)
        dense[:N_FEATURES] = unit_features(unit, context, version=self.feature_version)
        for slot, (side, other) in enumerate(
            (
                ("prev", context.prev if context else None),
                ("next", context.next if context else None),
            ),
            1,
        ):
            if other is not None:
                other = to_unit(other)
                hashed = h.unit_ids(other.text or "", other.tool_name)
                groups.append(hashed[1] if side == "prev" else hashed[2])
                dense[slot * N_FEATURES : (slot + 1) * N_FEATURES] = (
                    unit_features(other, version=self.feature_version) * NEIGHBOUR_MASK
                )
        groups.append(h.cue_ids(unit.text or "", is_prose(unit.role, unit.kind)))
        ids, weights = group_weights(groups)
        return self.run_bag(ids, weights, dense)

    def run_bag(self, ids: np.ndarray, weights: np.ndarray, dense: np.ndarray) -> np.ndarray:
        """Probabilities [labels] of one unit's n-gram inputs (`BagEncoder.step`)."""
        if not len(ids):
            ids, weights = np.zeros(1, np.int64), np.zeros(1, np.float32)
        out = self.session.run(
            self._output,
            {
                "ids": ids.astype(np.int64, copy=False),
                "weights": weights.astype(np.float32, copy=False)[:, None],
                "segments": np.zeros((len(ids), 1), np.int64),
                "dense": dense[None].astype(np.float32, copy=False),
            },
        )[0]
        return out[0]

    # --- many units ---------------------------------------------------------------------

    def predict(
        self,
        units: Sequence[Unit | dict[str, Any]],
        batch_size: int = 1024,
        online: bool = False,
    ) -> list[Prediction]:
        """One Prediction per unit, in order. `online`: each unit sees only the units before
        it (what a live classifier can know); otherwise both sides."""
        units = [to_unit(u) for u in units]
        if len(units) == 1 and not online:
            return [self.predict_one(units[0])]
        return self.predict_batch(units, batch_size, online=online)

    def predict_batch(
        self,
        units: Sequence[Unit | dict[str, Any]],
        batch_size: int = 1024,
        chunk: int = 1024,
        online: bool = False,
    ) -> list[Prediction]:
        """Many units: length-bucketed batches, features computed beside the network."""
        us = [to_unit(u) for u in units]
        return self._predictions(self._calibrated(us, batch_size, chunk, online), us)

    def predict_proba(
        self,
        units: Sequence[Unit | dict[str, Any]],
        batch_size: int = 1024,
        chunk: int = 1024,
        online: bool = False,
    ) -> np.ndarray:
        """[len(units), len(labels)] calibrated probabilities; a category TAXONOMY.md rules out
        for a unit (`cues.excluded_categories`: an assistant's text is never requirement) is 0."""
        us = [to_unit(u) for u in units]
        return exclude_categories(self._calibrated(us, batch_size, chunk, online), us, self.labels)

    def _calibrated(self, us: list[Unit], batch_size: int, chunk: int, online: bool) -> np.ndarray:
        """The graph's calibrated probabilities, nothing ruled out yet (`_predictions` does)."""
        if not us:
            return np.zeros((0, len(self.labels)), np.float32)
        if self.kind == "ngram":
            return self._bag_proba(us, batch_size, online)
        return self._transformer_proba(us, batch_size, chunk, online)

    def _bag_proba(self, units: list[Unit], batch_size: int, online: bool) -> np.ndarray:
        """Encoding is mostly Python (GIL-bound) and the network is ONNX Runtime (outside the
        GIL): sessions are encoded in parts on a helper thread while the network runs the
        previous part."""
        out = np.zeros((len(units), len(self.labels)), np.float32)
        groups: dict[str, list[int]] = {}
        for i, u in enumerate(units):
            groups.setdefault(u.session_id, []).append(i)
        parts: list[list[int]] = [[]]
        for members in groups.values():
            if parts[-1] and len(parts[-1]) + len(members) > 2048:
                parts.append([])
            parts[-1].extend(members)

        def prepare(part: list[int]) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
            bags = self.bag.encode([units[i] for i in part], online=online)
            o = bags.offsets
            batches = []
            for s in range(0, len(part), batch_size):
                e = min(len(part), s + batch_size)
                seg = np.repeat(np.arange(e - s), np.diff(o[s : e + 1]))
                feeds = {
                    "ids": bags.ids[o[s] : o[e]],
                    "weights": bags.weights[o[s] : o[e], None],
                    "segments": seg[:, None],
                    "dense": bags.dense[s:e],
                }
                batches.append((np.asarray(part[s:e]), feeds))
            return batches

        self._score_pipelined(parts, prepare, out, squeeze=False)
        return out

    def _transformer_proba(
        self, units: list[Unit], batch_size: int, chunk: int, online: bool
    ) -> np.ndarray:
        """Work goes in chunks through two threads: while ONNX Runtime (outside the GIL) scores
        one chunk, the other thread prepares the next (hand features, token ids and padded,
        length-sorted batches: mostly Python). Chunks hold units of about the same length, one
        batch each by default: each ORT call must win the GIL back from that thread (up to
        5 ms), and batches of 1024 ran 11.8k units/s where batches of 128 ran 9.9k.
        """
        from winnow.classifier.tokenizer import UnitEncoder

        out = np.zeros((len(units), len(self.labels)), np.float32)
        contexts = session_context(units)
        if online:
            contexts = [
                Context(int(u.index or 0) + 1, c.prev, None) for u, c in zip(units, contexts)
            ]
        # Chunks of units of about the same length (characters the encoder keeps: a close
        # proxy of their token count), so a chunk pads little as one or two batches.
        span = self.encoder.clip_chars
        by_length = np.argsort([min(len(u.text or ""), span) for u in units], kind="stable")

        def prepare(part: np.ndarray) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
            chunk_units = [units[i] for i in part]
            feats = batch_features(chunk_units, [contexts[i] for i in part], self.feature_version)
            ids = self.encoder.encode(chunk_units)
            order = np.argsort([len(i) for i in ids], kind="stable")
            return [
                (part[idx], graph_inputs(UnitEncoder.pad([ids[i] for i in idx]), feats[idx]))
                for idx in (order[s : s + batch_size] for s in range(0, len(order), batch_size))
            ]

        parts = [by_length[lo : lo + chunk] for lo in range(0, len(units), chunk)]
        self._score_pipelined(parts, prepare, out, squeeze=True)
        return out

    def _score_pipelined(
        self,
        parts: Sequence[_Part],
        prepare: Callable[[_Part], list[tuple[np.ndarray, dict[str, np.ndarray]]]],
        out: np.ndarray,
        squeeze: bool,
    ) -> None:
        """Score each part's batches into `out` while one thread prepares the next part (ONNX
        Runtime runs outside the GIL). `squeeze`: the graph's output has a middle axis of 1."""
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(prepare, parts[0])
            for k in range(len(parts)):
                batches = pending.result()
                if k + 1 < len(parts):
                    pending = pool.submit(prepare, parts[k + 1])
                for idx, feeds in batches:
                    scores = self.session.run(self._output, feeds)[0]
                    out[idx] = scores[:, 0] if squeeze else scores


__all__ = [
    "CHECKSUMS",
    "FORMAT_VERSION",
    "ImportanceClassifier",
    "ModelError",
    "Prediction",
    "default_model_path",
    "graph_inputs",
    "to_unit",
]
