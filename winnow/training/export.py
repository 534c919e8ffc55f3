"""Writing a trained classifier as a model directory the torch-free serving path loads.

A model directory holds:

    model.onnx      the network (one file, no external data), softmax probabilities out
    tokenizer.json  the subword tokenizer (`tokenizers` JSON)
    config.json     labels, input spec, feature spec, model shape, training summary
    metrics.json    validation (and, from `release`, test) figures
    MODEL_CARD.md   data, labels, metrics, intended use, limits
    SHA256SUMS      sha256 of every file above (`sha256sum -c` format), checked on load

No pickles: weights live only in the ONNX file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from winnow.classifier.features import CLIP_HEAD, CLIP_TAIL, FEATURE_NAMES, FEATURE_VERSION
from winnow.classifier.manifest import CHECKSUMS, FORMAT_VERSION
from winnow.classifier.tokenizer import PAD_ID, PREFIX_LEN
from winnow.data.schema import CATEGORIES, DEFAULT_STRATEGIES, DROPPABLE, MUST_KEEP

if TYPE_CHECKING:
    from winnow.classifier.model import UnitClassifier
    from winnow.training.trainer import TrainResult


def export_onnx(model: UnitClassifier, path: str | Path) -> Path:
    """Write `model` (eval mode) as one ONNX file: the fused graph of winnow.training.graph."""
    import onnx

    from winnow.training.graph import build_graph

    path = Path(path)
    onnx.save(build_graph(model.eval()), str(path))
    return path


def quantize_int8(src: str | Path, dst: str | Path) -> Path:
    """Dynamic int8 quantisation of the MatMul/Gemm weights (onnxruntime.quantization)."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # ONNX shape inference does not know the com.microsoft ops: name the tensors' type.
    quantize_dynamic(
        str(src),
        str(dst),
        weight_type=QuantType.QInt8,
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
    )
    return Path(dst)


def sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_checksums(model_dir: str | Path) -> dict[str, str]:
    """Write SHA256SUMS over every other file of the directory; returns {name: sha256}."""
    model_dir = Path(model_dir)
    sums = {
        p.name: sha256(p)
        for p in sorted(model_dir.iterdir())
        if p.is_file() and p.name != CHECKSUMS and not p.name.startswith(".")
    }
    (model_dir / CHECKSUMS).write_text("".join(f"{h}  {n}\n" for n, h in sums.items()))
    return sums


def model_card(config: dict[str, Any], metrics: dict[str, Any]) -> str:
    """MODEL_CARD.md text from a model's config.json and metrics.json."""
    tr = config.get("training", {})
    m = config["model"]
    seeds = tr.get("seeds_validation_macro_f1") or {}
    tried = ", ".join(f"{k} ({v:.3f})" for k, v in seeds.items())
    seed_line = (
        [
            f"- seed {tr.get('config', {}).get('seed')}: the best of seeds {tried} by validation macro-F1"
        ]
        if len(seeds) > 1
        else []
    )
    lines = [
        f"# {config['name']} {config['version']}",
        "",
        "Classifies one unit of an LLM coding-agent transcript (a text block, thinking block, tool",
        "call or tool result; see SCHEMA.md) into one of the 11 importance categories of",
        "TAXONOMY.md, so that a compressor can keep, condense or drop it.",
        "",
        "## Model",
        "",
        f"- transformer encoder: {m['n_layers']} layer(s), d_model {m['d_model']}, {m['n_heads']} heads, "
        f"max {m['max_len']} tokens (role/kind/tool prefix + head and tail of the unit)",
        f"- tokenizer: BPE, {m['vocab_size']:,} tokens, trained on the training transcripts",
        f"- hand features: {len(config['features']['names'])} (feature spec v{config['features']['version']}): "
        "role, kind, tool bucket, is_error, length, position in session, text cues",
        f"- must-keep logit bias {tr.get('must_keep_bias', 0.0):.2f}: added to the four must-keep "
        "categories' logits, the smallest that reaches validation must-keep recall "
        f"{tr.get('config', {}).get('must_keep_recall_target', 0):.0%} within "
        f"{tr.get('config', {}).get('must_keep_max_accuracy_cost', 0):.0%} of validation accuracy",
        "- runtime: ONNX Runtime on CPU, no torch",
        *seed_line,
        "",
        "## Data",
        "",
        f"- {tr.get('train_units', 0):,} training units ({tr.get('train_hand_units', 0):,} hand-labelled, "
        f"the rest labelled by winnow's heuristic labeller at loss weight {tr.get('heuristic_weight', '?')})",
        f"- {tr.get('validation_units', 0):,} validation units; splits are by session",
        f"- source: {tr.get('source', 'real public agent transcripts (see shared/traces/SOURCES.md)')}",
        "",
        "## Labels",
        "",
        "| category | default strategy |",
        "|---|---|",
        *(f"| {c} | {DEFAULT_STRATEGIES[c]} |" for c in CATEGORIES),
        "",
        "## Metrics",
        "",
    ]
    for split, r in metrics.items():
        if not isinstance(r, dict) or "n" not in r:
            continue
        lines += [
            f"### {split} ({r.get('n', 0):,} units, against {r.get('gold', '?')} labels)",
            "",
            f"accuracy {r['accuracy']:.3f}, macro-F1 {r['macro_f1']:.3f}, must-keep recall "
            f"{r['must_keep_recall']:.3f}, must-keep predicted droppable {r['must_keep_droppable']:.2%}",
            "",
        ]
        for name, b in (r.get("baselines") or {}).items():
            lines.append(
                f"- {name}: accuracy {b['accuracy']:.3f}, macro-F1 {b['macro_f1']:.3f}, "
                f"must-keep recall {b['must_keep_recall']:.3f}"
            )
        if r.get("baselines"):
            lines.append("")
    lines += [
        "## Intended use",
        "",
        "Ranking and compressing the context of coding agents (Claude Code, Codex, Copilot, Gemini",
        "CLI, SWE-agent, OpenHands, Aider transcripts): what to keep verbatim, what to summarise,",
        "what to drop. Scores are softmax probabilities; `winnow.serving.ImportanceClassifier`",
        "runs it.",
        "",
        "## Limits",
        "",
        "- Trained on a few hundred public sessions of a handful of projects; other languages, agents",
        "  and domains will be weaker. Most training labels are heuristic: figures against",
        "  heuristic labels measure agreement with the labeller, not truth.",
        "- Rare categories (constraint, acknowledgment, architecture) have few examples.",
        "- A unit is judged from its own text (head and tail when long), its place in the session",
        "  and the kinds of its neighbours, not from what the conversation said before it.",
        f"- Must-keep ({', '.join(sorted(MUST_KEEP))}) mistakes cost the most. The must-keep logit",
        "  bias trades a little accuracy for must-keep recall; a compressor that drops units",
        f"  predicted {', '.join(sorted(DROPPABLE))} should keep them when that prediction is unsure.",
        "",
    ]
    return "\n".join(lines)


def update_metrics(model_dir: str | Path, metrics: dict[str, Any]) -> None:
    """Merge `metrics` into metrics.json, rewrite MODEL_CARD.md and SHA256SUMS."""
    model_dir = Path(model_dir)
    path = model_dir / "metrics.json"
    merged = {**(json.loads(path.read_text()) if path.exists() else {}), **metrics}
    path.write_text(json.dumps(merged, indent=1) + "\n")
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "MODEL_CARD.md").write_text(model_card(config, merged))
    write_checksums(model_dir)


def save_model(
    result: TrainResult,
    out_dir: str | Path,
    name: str | None = None,
    version: str | None = None,
    metrics: dict[str, Any] | None = None,
    extra_training: dict[str, Any] | None = None,
) -> Path:
    """Write `result` as a model directory, replacing `out_dir` only once all is written."""
    from winnow import __version__

    out_dir = Path(out_dir)
    name = name or out_dir.name
    stage = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    export_onnx(result.model, stage / "model.onnx")
    result.encoder.tokenizer.save(str(stage / "tokenizer.json"))
    mcfg = result.config.model.to_dict()
    config = {
        "format_version": FORMAT_VERSION,
        "name": name,
        "version": version or __version__,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "labels": list(CATEGORIES),
        "inputs": {
            "input_ids": "int32 [batch, seq]: [role][kind][tool] + head and tail tokens, "
            f"seq <= max_len, right-padded with {PAD_ID}",
            "lengths": "int32 [batch]: tokens before the padding",
            "pool": "float32 [batch, 1, seq]: 1/length on tokens, 0 on padding",
            "features": f"float32 [batch, 1, {len(FEATURE_NAMES)}]: winnow.classifier.features",
        },
        "output": "probs: float32 [batch, 1, labels], softmax",
        "max_len": mcfg["max_len"],
        "prefix_len": PREFIX_LEN,
        "chars_per_token": result.encoder.chars_per_token,
        "features": {
            "version": FEATURE_VERSION,
            "names": list(FEATURE_NAMES),
            "clip_chars": [CLIP_HEAD, CLIP_TAIL],
        },
        "model": mcfg,
        "training": {
            **result.data_summary,
            "heuristic_weight": result.config.heuristic_weight,
            "best_epoch": result.best_epoch,
            "epochs_run": len(result.history),
            "seconds": round(result.seconds, 1),
            "config": result.config.to_dict(),
            **(extra_training or {}),
        },
    }
    (stage / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    metrics = {"validation": result.validation, "history": result.history, **(metrics or {})}
    update_metrics(stage, metrics)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    stage.rename(out_dir)
    return out_dir


__all__ = [
    "CHECKSUMS",
    "FORMAT_VERSION",
    "export_onnx",
    "model_card",
    "quantize_int8",
    "save_model",
    "sha256",
    "update_metrics",
    "write_checksums",
]
