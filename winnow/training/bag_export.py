"""Writing the n-gram classifier as a model directory the torch-free serving path loads.

model.onnx      the network with its calibration temperature (winnow.training.bag_graph)
config.json     the manifest (winnow.classifier.manifest): labels, feature and n-gram
                spec, model shape, calibration, provenance, training summary
metrics.json    leave-one-source-out figures and the rest of what release measured
MODEL_CARD.md   data, labels, metrics, intended use, limits
SHA256SUMS      sha256 of every file above, checked on load
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from winnow.classifier.features import FEATURE_NAMES, FEATURE_VERSION
from winnow.classifier.manifest import FORMAT_VERSION, Calibration, Manifest, Provenance
from winnow.classifier.ngrams import BagSpec
from winnow.data.schema import CATEGORIES, DEFAULT_STRATEGIES, DROPPABLE, MUST_KEEP

if TYPE_CHECKING:
    from winnow.classifier.bag_model import BagClassifier


def code_revision(repo: Path) -> str:
    """`git describe --always --dirty` of the source tree, or "" outside a checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def library_versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for name in ("winnow", "numpy", "onnxruntime", "onnx", "torch", "scikit-learn"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def save_bag_model(
    model: BagClassifier,
    out_dir: str | Path,
    spec: BagSpec,
    calibration: Calibration,
    provenance: Provenance,
    training: dict[str, Any],
    metrics: dict[str, Any] | None = None,
    name: str | None = None,
    version: str | None = None,
) -> Path:
    """Write the model directory, replacing `out_dir` only once all is written."""
    import onnx

    from winnow import __version__
    from winnow.training.bag_graph import build_bag_graph
    from winnow.training.export import write_checksums

    out_dir = Path(out_dir)
    stage = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    onnx.save(build_bag_graph(model.eval(), calibration.temperature), str(stage / "model.onnx"))
    manifest = Manifest(
        format_version=FORMAT_VERSION,
        kind="ngram",
        name=name or out_dir.name,
        version=version or __version__,
        labels=tuple(CATEGORIES),
        feature_version=FEATURE_VERSION,
        feature_names=tuple(FEATURE_NAMES),
        model=model.config.to_dict(),
        bag=spec.to_dict(),
        calibration=calibration,
        provenance=provenance,
        training=training,
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        extra={
            "inputs": {
                "ids": "int64 [batch, seq]: hashed n-gram ids (winnow.classifier.ngrams), 0-padded",
                "weights": "float32 [batch, 1, seq]: each id's weight, 0 on padding",
                "dense": f"float32 [batch, {model.config.n_dense}]: hand features of the unit, "
                "its previous and its next unit (winnow.classifier.bag)",
            },
            "output": "probs: float32 [batch, labels], softmax at the calibration temperature",
        },
    )
    (stage / "config.json").write_text(json.dumps(manifest.to_dict(), indent=1) + "\n")
    metrics = metrics or {}
    (stage / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    (stage / "MODEL_CARD.md").write_text(bag_model_card(manifest, metrics))
    write_checksums(stage)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    stage.rename(out_dir)
    return out_dir


def update_bag_metrics(model_dir: str | Path, metrics: dict[str, Any]) -> None:
    """Merge `metrics` into metrics.json, rewrite MODEL_CARD.md and SHA256SUMS."""
    from winnow.classifier.manifest import read_manifest
    from winnow.training.export import write_checksums

    model_dir = Path(model_dir)
    path = model_dir / "metrics.json"
    merged = {**(json.loads(path.read_text()) if path.exists() else {}), **metrics}
    path.write_text(json.dumps(merged, indent=1) + "\n")
    (model_dir / "MODEL_CARD.md").write_text(bag_model_card(read_manifest(model_dir), merged))
    write_checksums(model_dir)


def _by_source_table(report: dict[str, Any], key: str) -> list[str]:
    from winnow.training.by_source import SHORT, TABLE_METRICS, _fmt

    per = report["results"][key]
    head = ["held-out source", "units", *(SHORT[m] for m in TABLE_METRICS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for src in [*report["sources"], "mean"]:
        n = report["counts"].get(src, sum(report["counts"].values()))
        cells = [_fmt(m, per[src].get(m, float("nan"))) for m in TABLE_METRICS]
        lines.append(f"| {src} | {n} | " + " | ".join(cells) + " |")
    return lines


def bag_model_card(m: Manifest, metrics: dict[str, Any]) -> str:
    """MODEL_CARD.md text of an n-gram model directory."""
    tr = m.training
    cal = m.calibration
    spec = BagSpec.from_dict(m.bag)
    teacher = m.provenance.teacher
    lines = [
        f"# {m.name} {m.version}",
        "",
        "Classifies one unit of an LLM coding-agent transcript (a text block, thinking block, tool",
        "call or tool result; see [SCHEMA.md](../../docs/SCHEMA.md)) into one of the 11 importance",
        "categories of [TAXONOMY.md](../../docs/TAXONOMY.md), so that a compressor can keep,",
        "condense or drop it.",
        "",
        "## Model",
        "",
        f"- hashed word 1-2-grams of the unit (first {spec.head_chars:,} and last "
        f"{spec.tail_chars:,} characters) and its tool name, plus the first "
        f"{spec.neighbour_words} words of the previous and the next unit, in "
        f"{spec.buckets:,} buckets (crc32); an embedding bag of width {m.model.get('hidden')}",
        f"- hand features: {len(m.feature_names)} (feature spec v{m.feature_version}) of the unit "
        "and of each neighbour: role, kind, tool bucket, is_error, length, position, text cues",
        "- one hidden layer (ReLU), softmax over the 11 categories; ONNX Runtime on CPU, no torch",
        "- two views of a session: batch (both neighbours) and online (only the units before, as "
        "in live use); trained on both, `SessionClassifier` gives the online view unit by unit",
        f"- calibration: temperature {cal.temperature:.3f} fitted on {cal.fitted_on or 'held-out predictions'}"
        + (
            f" (top-label ECE {cal.ece_before:.3f} -> {cal.ece_after:.3f})"
            if cal.ece_before is not None and cal.ece_after is not None
            else ""
        ),
        (
            "- decision: the most probable category, unless the must-keep "
            + {
                "mass": "probabilities sum",
                "ratio": "probabilities, summed and divided by the likeliest other category's, "
                "come",
                "role": "probabilities' sum, mapped per unit role to the chance that such a "
                "unit is must-keep (fitted on out-of-fold predictions), comes",
            }[cal.must_keep_rule]
            + f" to at least {cal.must_keep_threshold:.3f}: then the likeliest must-keep category "
            "(the threshold that kept the target must-keep recall on out-of-fold predictions)"
            if cal.must_keep_threshold is not None
            else "- decision: the most probable category"
        ),
        "",
        "## Data",
        "",
        f"- {tr.get('units', 0):,} units of {tr.get('sessions', 0):,} sessions from "
        f"{len(tr.get('sources', []))} sources (trace folder + format), "
        f"{tr.get('hand_units', 0):,} hand-labelled (data/labels)",
        (
            f"- distilled: units without a hand label learn the teacher's probabilities at loss "
            f"weight {tr.get('weak_weight')}; teacher: {teacher.get('name', '?')} (frozen sentence "
            "encoder) + logistic regression over its embeddings of the unit and its neighbours "
            "and the hand features, trained on the hand labels"
            if teacher
            else f"- units without a hand label: {tr.get('targets', 'not used')}"
        ),
        f"- code {m.provenance.code_revision or '?'}, traces digest "
        f"{m.provenance.traces_digest[:16] or '?'}",
    ]
    if teacher.get("files"):
        lines += ["", "Teacher files (sha256):", ""]
        lines += [f"- `{k}` {v}" for k, v in teacher["files"].items()]
    lines += ["", "## Labels", "", "| category | default strategy |", "|---|---|"]
    lines += [f"| {c} | {DEFAULT_STRATEGIES[c]} |" for c in CATEGORIES]
    lines += ["", "## Metrics", ""]
    by_source = metrics.get("by_source")
    if by_source:
        lines += [
            "Leave-one-source-out (`winnow evaluate --by-source`): trained on every source but one,",
            "scored on the held-out source's hand labels; calibration and threshold fitted on the",
            f"other folds. Mean over seeds {by_source.get('seeds')}; spread in metrics.json.",
            "",
        ]
        for key in by_source["results"]:
            lines += [f"### {key}", "", *_by_source_table(by_source, key), ""]
    lines += [
        "## Intended use",
        "",
        "Ranking and compressing the context of coding agents (Claude Code, Codex, Copilot, Gemini",
        "CLI, SWE-agent, OpenHands, Aider, Cursor transcripts): what to keep verbatim, what to",
        "summarise, what to drop. Scores are calibrated probabilities;",
        "`winnow.serving.ImportanceClassifier` and `winnow.serving.SessionClassifier` run it.",
        "",
        "## Limits",
        "",
        "- Trained on a few hundred public sessions of about ten projects; other languages,",
        "  agents and domains will be weaker (the figures above are on held-out projects).",
        "- Rare categories (constraint, acknowledgment, architecture) have few examples.",
        "- A unit is judged from its own text (head and tail when long), its neighbours' first",
        "  words and features, and its place in the session, not the whole conversation.",
        f"- Must-keep ({', '.join(sorted(MUST_KEEP))}) mistakes cost the most; a compressor that",
        f"  drops units predicted {', '.join(sorted(DROPPABLE))} should keep them when unsure.",
        "",
    ]
    return "\n".join(lines)


__all__ = [
    "bag_model_card",
    "code_revision",
    "library_versions",
    "save_bag_model",
    "update_bag_metrics",
]
