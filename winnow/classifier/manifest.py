"""The model directory's manifest (`config.json`): one typed record that export writes and
serving reads, validated field by field so that a damaged directory is one clear line.

    manifest = read_manifest(model_dir)          # ModelError naming the file and field
    manifest.kind, manifest.labels, manifest.calibration.temperature

Format versions: 2 is the transformer of winnow 0.1 (read as is); 3 adds `kind`,
`calibration` and `provenance` and the n-gram model.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from winnow.classifier.features import FEATURE_NAMES, FEATURE_VERSIONS
from winnow.classifier.ngrams import NGRAM_VERSIONS
from winnow.data.cues import excluded_categories
from winnow.data.schema import CATEGORIES, MUST_KEEP, Unit

FORMAT_VERSION = 3
READS = (2, 3)
KINDS = ("transformer", "ngram")
# What a must-keep threshold is compared with (`must_keep_score`).
MUST_KEEP_RULES = ("mass", "ratio", "role")
CHECKSUMS = "SHA256SUMS"
MANIFEST = "config.json"
REQUIRED_FILES = {
    "transformer": ("model.onnx", "tokenizer.json", MANIFEST),
    "ngram": ("model.onnx", MANIFEST),
}


class ModelError(ValueError):
    """A model directory that is missing, corrupt or made for another winnow."""


@dataclass(frozen=True)
class Calibration:
    """How scores and decisions are made from the network's logits. `temperature` is baked
    into the graph (scores come out calibrated); `must_keep_threshold`: a unit whose summed
    must-keep probability reaches it is given its likeliest must-keep category."""

    temperature: float = 1.0
    must_keep_threshold: float | None = None
    # what the threshold is compared with (`must_keep_score`): "mass" (the summed must-keep
    # probability), "ratio" (that sum over the likeliest other category's probability) or
    # "role" (the mass mapped, per unit role, to the share of such units that are must-keep)
    must_keep_rule: str = "mass"
    # "role": role -> (a, b) of sigmoid(a * logit(mass) + b); "*" for any other role
    must_keep_scaling: dict[str, tuple[float, float]] = field(default_factory=dict)
    fitted_on: str = ""
    ece_before: float | None = None
    ece_after: float | None = None


def must_keep_score(
    mass: np.ndarray,
    top_other: np.ndarray | None,
    rule: str = "mass",
    roles: Any = None,
    scaling: dict[str, tuple[float, float]] | None = None,
) -> np.ndarray:
    """How strongly each unit leans must-keep, given its summed must-keep probability `mass`
    and its likeliest other category's `top_other`: "mass", the mass itself; "ratio",
    mass / top_other (a confident boilerplate unit with 7% must-keep mass scores 0.1, an
    unsure status one 0.6); "role", sigmoid(a * logit(mass) + b) with (a, b) of the unit's
    role in `scaling` (its "*" entry for another role, or when `roles` is None): the chance
    that a unit of that role and that mass is must-keep, fitted on held-out predictions. A
    harness's notice (role system) is must-keep in 1% of the hand labels, a user's text in
    80%: one threshold on the mass alone flips harness notices of an agent never seen."""
    if rule == "mass":
        return mass
    if rule == "ratio":
        if top_other is None:
            raise ValueError("the ratio rule needs each unit's likeliest other probability")
        return mass / np.maximum(top_other, 1e-9)
    if rule != "role":
        raise ValueError(f"unknown must-keep rule {rule!r}; one of {', '.join(MUST_KEEP_RULES)}")
    scaling = scaling or {}
    default = scaling.get("*", (1.0, 0.0))
    p = np.clip(mass, 1e-6, 1 - 1e-6)
    z = np.log(p / (1 - p))
    if roles is None:
        a = np.full(len(z), default[0])
        b = np.full(len(z), default[1])
    else:
        ab = np.array([scaling.get(r, default) for r in roles], np.float64).reshape(-1, 2)
        a, b = ab[:, 0], ab[:, 1]
    return 1.0 / (1.0 + np.exp(-(a * z + b)))


def exclude_categories(
    probs: np.ndarray, units: Sequence[Unit], labels: Sequence[str] = CATEGORIES
) -> np.ndarray:
    """[n, labels] probabilities with the categories TAXONOMY.md rules out for each of the n
    units (`cues.excluded_categories`: an assistant's text is never requirement) set to 0;
    `probs` itself when no unit has any.

    The mass taken away goes to the unit's other must-keep categories in proportion (evenly
    when they hold none): the model's "this must stay" is kept, only its "because the user
    asked" is ruled out, so the must-keep sum, the fitted must-keep scaling and the threshold
    mean what they meant before."""
    index = {c: k for k, c in enumerate(labels)}
    groups: dict[frozenset[str], list[int]] = {}
    for i, u in enumerate(units):
        ruled = excluded_categories(u)
        if ruled:
            groups.setdefault(ruled, []).append(i)
    if not groups:
        return probs
    out = np.array(probs, dtype=np.float32, copy=True)
    for ruled, rows in groups.items():  # one vectorized pass per set of ruled-out categories
        cols = [index[c] for c in ruled if c in index]
        rest = [index[c] for c in labels if c in MUST_KEEP and c not in ruled]
        if not cols:
            continue
        if len(rows) == 1:  # the live path's one unit: numpy's per-call cost would dominate
            out[rows[0]] = _rule_out(out[rows[0]].tolist(), cols, rest)
            continue
        block = out[rows]
        gone = block[:, cols].sum(1, keepdims=True)
        block[:, cols] = 0.0
        if rest:
            held = block[:, rest]
            total = held.sum(1, keepdims=True)
            share = np.where(total > 0, held / np.maximum(total, 1e-12), 1.0 / len(rest))
            block[:, rest] = held + gone * share
        else:
            block /= np.maximum(block.sum(1, keepdims=True), 1e-12)
        out[rows] = block
    return out


def _rule_out(row: list[float], cols: list[int], rest: list[int]) -> list[float]:
    """`exclude_categories` on one row, in plain Python."""
    gone = sum(row[k] for k in cols)
    for k in cols:
        row[k] = 0.0
    total = sum(row[k] for k in rest)
    if rest:
        for k in rest:
            row[k] += gone * (row[k] / total if total > 0 else 1.0 / len(rest))
    else:
        norm = max(sum(row), 1e-12)
        row = [v / norm for v in row]
    return row


@dataclass(frozen=True)
class Provenance:
    """Where the model came from."""

    code_revision: str = ""
    traces_digest: str = ""
    label_files: dict[str, str] = field(default_factory=dict)  # name -> sha256
    libraries: dict[str, str] = field(default_factory=dict)
    teacher: dict[str, Any] = field(default_factory=dict)  # name, files' sha256


@dataclass(frozen=True)
class Manifest:
    """Everything serving needs to know about a model directory."""

    format_version: int
    kind: str
    name: str
    version: str
    labels: tuple[str, ...]
    feature_version: int
    feature_names: tuple[str, ...]
    model: dict[str, Any]
    bag: dict[str, int] = field(default_factory=dict)  # ngram: winnow.classifier.ngrams.BagSpec
    max_len: int = 0  # transformer: tokens per unit
    chars_per_token: int = 4
    calibration: Calibration = field(default_factory=Calibration)
    provenance: Provenance = field(default_factory=Provenance)
    training: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # other fields, kept as written

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["labels"] = list(self.labels)
        d["features"] = {"version": d.pop("feature_version"), "names": list(d.pop("feature_names"))}
        return {**d.pop("extra"), **d}

    @property
    def required_files(self) -> tuple[str, ...]:
        return REQUIRED_FILES[self.kind]


class _Check:
    """Field checks that raise one ModelError line naming the file and the field."""

    def __init__(self, where: Path):
        self.where = where

    def fail(self, name: str, want: str, got: Any) -> ModelError:
        shown = json.dumps(got)[:60] if _jsonable(got) else type(got).__name__
        return ModelError(f"{self.where}: field '{name}' must be {want}, not {shown}")

    def int_(self, d: dict, name: str, default: Any = ..., low: int | None = None) -> int:
        v = d.get(name, default)
        if v is ... or isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(name, "an integer", v if v is not ... else None)
        if low is not None and v < low:
            raise self.fail(name, f"an integer >= {low}", v)
        return v

    def float_(self, d: dict, name: str, default: Any = ..., positive: bool = False) -> float:
        v = d.get(name, default)
        if v is ... or isinstance(v, bool) or not isinstance(v, int | float) or v != v:
            raise self.fail(name, "a number", v if v is not ... else None)
        if positive and not 0 < v < float("inf"):
            raise self.fail(name, "a positive number", v)
        return float(v)

    def str_(self, d: dict, name: str, default: Any = ...) -> str:
        v = d.get(name, default)
        if not isinstance(v, str):
            raise self.fail(name, "a string", v if v is not ... else None)
        return v

    def dict_(self, d: dict, name: str, default: Any = ...) -> dict:
        v = d.get(name, default)
        if not isinstance(v, dict):
            raise self.fail(name, "an object", v if v is not ... else None)
        return v

    def strs(self, d: dict, name: str) -> tuple[str, ...]:
        v = d.get(name)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.fail(name, "a list of strings", v)
        return tuple(v)


def _jsonable(x: Any) -> bool:
    try:
        json.dumps(x)
        return True
    except (TypeError, ValueError):
        return False


def parse_manifest(d: Any, where: Path) -> Manifest:
    """Validate a config.json object; ModelError (one line) on the first bad field."""
    ck = _Check(where)
    if not isinstance(d, dict):
        raise ModelError(f"{where}: must hold a JSON object, not {type(d).__name__}")
    version = ck.int_(d, "format_version", 0)
    if version not in READS:
        hint = "upgrade winnow" if version > FORMAT_VERSION else "rebuild it with `winnow release`"
        raise ModelError(
            f"{where}: model format v{version}, but this winnow reads "
            f"v{', v'.join(map(str, READS))}; {hint}"
        )
    kind = ck.str_(d, "kind", "transformer")
    if kind not in KINDS:
        raise ck.fail("kind", f"one of {', '.join(KINDS)}", kind)
    if version == 2 and kind != "transformer":
        raise ck.fail("kind", "transformer in format v2", kind)
    labels = ck.strs(d, "labels")
    if sorted(labels) != sorted(CATEGORIES):
        raise ck.fail("labels", f"the {len(CATEGORIES)} categories of TAXONOMY.md", list(labels))
    feats = ck.dict_(d, "features")
    fck = _Check(where)
    feature_version = fck.int_(feats, "version")
    names = fck.strs(feats, "names")
    # Specs 3 and 4 share their names (v4 computes `exit_nonzero` another way); serving
    # computes the model's own.
    if feature_version not in FEATURE_VERSIONS or names != FEATURE_NAMES:
        raise ModelError(
            f"{where}: trained on feature spec v{feature_version} but this winnow computes "
            f"v{', v'.join(map(str, FEATURE_VERSIONS))}; retrain the model or use a matching "
            "winnow"
        )
    model = ck.dict_(d, "model")
    bag: dict[str, int] = {}
    max_len = 0
    if kind == "ngram":
        raw = ck.dict_(d, "bag")
        bck = _Check(where)
        bag = {
            k: bck.int_(raw, k, low=1)
            for k in ("buckets", "head_chars", "tail_chars", "neighbour_words", "version")
        }
        if bag["buckets"] & (bag["buckets"] - 1):
            raise ck.fail("bag.buckets", "a power of two", bag["buckets"])
        # Another version hashes other tokens: the model would run, silently wrong.
        if bag["version"] not in NGRAM_VERSIONS:
            raise ModelError(
                f"{where}: trained on n-gram spec v{bag['version']} but this winnow hashes "
                f"v{', v'.join(map(str, NGRAM_VERSIONS))}; retrain the model or use a "
                "matching winnow"
            )
        for k in ("hidden", "n_dense", "n_labels"):
            _Check(where).int_(model, k, low=1)
    else:
        max_len = ck.int_(d, "max_len", low=4)
        for k in ("d_model", "n_heads", "n_layers", "vocab_size"):
            _Check(where).int_(model, k, low=1)
    cal_raw = ck.dict_(d, "calibration", {})
    cck = _Check(where)
    threshold = cal_raw.get("must_keep_threshold")
    scaling_raw = cck.dict_(cal_raw, "must_keep_scaling", {})
    scaling: dict[str, tuple[float, float]] = {}
    for role, ab in scaling_raw.items():
        if not (
            isinstance(ab, list)
            and len(ab) == 2
            and all(not isinstance(x, bool) and isinstance(x, int | float) for x in ab)
            and all(math.isfinite(x) for x in ab)
        ):
            raise cck.fail(f"must_keep_scaling.{role}", "a list of two numbers", ab)
        scaling[role] = (float(ab[0]), float(ab[1]))
    calibration = Calibration(
        temperature=cck.float_(cal_raw, "temperature", 1.0, positive=True),
        must_keep_threshold=None
        if threshold is None
        else cck.float_(cal_raw, "must_keep_threshold"),
        must_keep_rule=cck.str_(cal_raw, "must_keep_rule", "mass"),
        must_keep_scaling=scaling,
        fitted_on=cck.str_(cal_raw, "fitted_on", ""),
        ece_before=None if cal_raw.get("ece_before") is None else cck.float_(cal_raw, "ece_before"),
        ece_after=None if cal_raw.get("ece_after") is None else cck.float_(cal_raw, "ece_after"),
    )
    if calibration.must_keep_rule not in MUST_KEEP_RULES:
        raise cck.fail("must_keep_rule", " or ".join(MUST_KEEP_RULES), calibration.must_keep_rule)
    if calibration.must_keep_rule == "role" and "*" not in scaling:
        raise cck.fail("must_keep_scaling", 'an object with a "*" entry (rule role)', scaling_raw)
    prov_raw = ck.dict_(d, "provenance", {})
    pck = _Check(where)
    provenance = Provenance(
        code_revision=pck.str_(prov_raw, "code_revision", ""),
        traces_digest=pck.str_(prov_raw, "traces_digest", ""),
        label_files=pck.dict_(prov_raw, "label_files", {}),
        libraries=pck.dict_(prov_raw, "libraries", {}),
        teacher=pck.dict_(prov_raw, "teacher", {}),
    )
    known = set(Manifest.__dataclass_fields__) | {"features"}
    return Manifest(
        format_version=version,
        kind=kind,
        name=ck.str_(d, "name", where.parent.name),
        version=ck.str_(d, "version", "0"),
        labels=labels,
        feature_version=feature_version,
        feature_names=names,
        model=model,
        bag=bag,
        max_len=max_len,
        chars_per_token=ck.int_(d, "chars_per_token", 4, low=1),
        calibration=calibration,
        provenance=provenance,
        training=ck.dict_(d, "training", {}),
        created=ck.str_(d, "created", ""),
        extra={k: v for k, v in d.items() if k not in known},
    )


def read_manifest(model_dir: Path) -> Manifest:
    """The validated manifest of a model directory."""
    path = model_dir / MANIFEST
    if not path.is_file():
        raise ModelError(f"{model_dir}: no {MANIFEST}; not a winnow model directory")
    try:
        d = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        where = f":{e.lineno}" if isinstance(e, json.JSONDecodeError) else ""
        raise ModelError(f"{path}{where}: invalid JSON ({getattr(e, 'msg', e)})") from None
    except OSError as e:
        raise ModelError(f"{path}: unreadable ({e.strerror or e})") from None
    return parse_manifest(d, path)


def verify_checksums(model_dir: Path, required: tuple[str, ...] = (MANIFEST,)) -> dict[str, str]:
    """Check every file SHA256SUMS lists (names inside the directory only); returns
    {name: sha256}."""
    sums_file = model_dir / CHECKSUMS
    if not sums_file.is_file():
        raise ModelError(f"{model_dir}: no {CHECKSUMS}; not a winnow model directory")
    root = model_dir.resolve()
    sums: dict[str, str] = {}
    try:
        text = sums_file.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ModelError(f"{sums_file}: unreadable ({e})") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64:
            raise ModelError(f"{sums_file}:{lineno}: not a `<sha256>  <file>` line")
        name = parts[1].lstrip("*")
        p = Path(name)
        if p.is_absolute() or ".." in p.parts or len(p.parts) != 1:
            raise ModelError(f"{sums_file}:{lineno}: {name!r} is not a file of the model directory")
        sums[name] = parts[0].lower()
    for name in required:
        if name not in sums:
            raise ModelError(f"{sums_file}: {name} is not listed")
    for name, want in sums.items():
        path = model_dir / name
        if not path.is_file() or path.resolve().parent != root:
            raise ModelError(f"{path}: listed in {CHECKSUMS} but missing")
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        got = h.hexdigest()
        if got != want:
            raise ModelError(
                f"{path}: sha256 {got[:12]}... does not match {CHECKSUMS} ({want[:12]}...); "
                "the file is corrupt or was changed"
            )
    return sums


__all__ = [
    "exclude_categories",
    "CHECKSUMS",
    "FORMAT_VERSION",
    "MUST_KEEP_RULES",
    "Calibration",
    "Manifest",
    "ModelError",
    "Provenance",
    "must_keep_score",
    "parse_manifest",
    "read_manifest",
    "verify_checksums",
]
