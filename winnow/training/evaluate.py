"""Scoring a classifier on a labelled split, beside the heuristic labeller and a kind/tool rule.

    report = evaluate_model("models/winnow-small", "data/dataset")   # the test split
    report.print()                                                    # rich tables
    report.save_confusion("confusion.png")

The model is scored through the serving classifier (the shipped ONNX file, not the torch
weights), so the figures are those of what users run. When any unit of the split carries a
hand label only hand-labelled units are scored (`report.gold` says which).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from winnow.classifier.features import tool_bucket
from winnow.data.schema import CATEGORIES, DROPPABLE, MUST_KEEP, Unit


def rule_baseline(unit: Unit | dict[str, Any]) -> str:
    """A plain kind / tool rule: what a classifier must beat to be worth its cost."""
    get = unit.get if isinstance(unit, dict) else lambda k: getattr(unit, k)
    kind = get("kind")
    if kind == "tool_call":
        return "code" if tool_bucket(get("tool_name")) in ("edit", "write") else "status"
    if kind == "tool_result":
        return "error" if get("is_error") else "tool_output"
    return "requirement" if get("role") == "user" else "explanation"


def classification_metrics(gold: Sequence[str], pred: Sequence[str]) -> dict[str, Any]:
    """Accuracy, macro-F1 (over categories present in gold), per-category P/R/F1 and the
    two safety figures: must-keep recall (a must-keep unit predicted as any must-keep
    category) and the share of must-keep units predicted droppable."""
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    gold, pred = list(gold), list(pred)
    present = [c for c in CATEGORIES if c in set(gold)]
    p, r, f, s = precision_recall_fscore_support(
        gold, pred, labels=list(CATEGORIES), zero_division=0
    )
    keep = [i for i, g in enumerate(gold) if g in MUST_KEEP]
    per = {
        c: {
            "precision": float(p[i]),
            "recall": float(r[i]),
            "f1": float(f[i]),
            "support": int(s[i]),
        }
        for i, c in enumerate(CATEGORIES)
    }
    return {
        "n": len(gold),
        "accuracy": float(np.mean([g == q for g, q in zip(gold, pred)])) if gold else 0.0,
        "macro_f1": float(np.mean([per[c]["f1"] for c in present])) if present else 0.0,
        "must_keep_n": len(keep),
        "must_keep_recall": float(np.mean([pred[i] in MUST_KEEP for i in keep])) if keep else 1.0,
        "must_keep_droppable": float(np.mean([pred[i] in DROPPABLE for i in keep]))
        if keep
        else 0.0,
        "per_category": per,
        "confusion": confusion_matrix(gold, pred, labels=list(CATEGORIES)).tolist(),
    }


def _ece(conf: np.ndarray, hit: np.ndarray, bins: int = 15) -> float:
    """Expected calibration error: |accuracy - confidence| per equal-width bin, weighted."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(conf, edges[1:-1]), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        m = which == b
        if m.any():
            total += m.sum() * abs(float(hit[m].mean()) - float(conf[m].mean()))
    return total / max(1, len(conf))


def must_keep_probability(probs: np.ndarray) -> np.ndarray:
    """Summed probability of the must-keep categories, per row of [n, CATEGORIES] probs."""
    keep = np.array([c in MUST_KEEP for c in CATEGORIES])
    return probs[:, keep].sum(1)


def probability_metrics(gold: Sequence[str], probs: np.ndarray) -> dict[str, float]:
    """Ranking and calibration figures of [n, CATEGORIES] probabilities against gold:
    must-keep AUC and average precision (must-keep vs the rest, scored by the summed
    must-keep probability), must-keep recall at 5% and 10% false-keep (the share of
    not-must-keep units ranked above the cut), top-label ECE and must-keep ECE."""
    from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

    y = np.array([g in MUST_KEEP for g in gold])
    score = must_keep_probability(probs)
    out: dict[str, float] = {}
    if y.any() and not y.all():
        out["must_keep_auc"] = float(roc_auc_score(y, score))
        out["must_keep_ap"] = float(average_precision_score(y, score))
        fpr, tpr, _ = roc_curve(y, score)
        for at in (0.05, 0.10):
            out[f"must_keep_recall_at_{int(at * 100)}fk"] = float(tpr[fpr <= at + 1e-12].max())
    else:
        out |= dict.fromkeys(
            (
                "must_keep_auc",
                "must_keep_ap",
                "must_keep_recall_at_5fk",
                "must_keep_recall_at_10fk",
            ),
            float("nan"),
        )
    gold_idx = np.array([CATEGORIES.index(g) for g in gold])
    top = probs.argmax(1)
    out["ece"] = _ece(probs.max(1), top == gold_idx)
    out["must_keep_ece"] = _ece(score, y.astype(float)) if len(y) else float("nan")
    return out


@dataclass
class EvalReport:
    """Metrics of the model and of the two baselines on the same units."""

    split: str
    gold: str  # "hand" or "heuristic": which labels the figures are measured against
    n: int
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> metrics

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "gold": self.gold, "n": self.n, "results": self.results}

    def print(self, console=None) -> None:
        from rich.console import Console
        from rich.table import Table

        console = console or Console()
        model = self.results["model"]
        t = Table(
            title=f"per category on {self.split} ({self.n:,} units, {self.gold} labels)", box=None
        )
        for col in ("category", "precision", "recall", "F1", "support"):
            t.add_column(col, justify="left" if col == "category" else "right")
        for c in CATEGORIES:
            m = model["per_category"][c]
            t.add_row(
                c,
                f"{m['precision']:.3f}",
                f"{m['recall']:.3f}",
                f"{m['f1']:.3f}",
                str(m["support"]),
            )
        console.print(t)
        s = Table(title="side by side", box=None)
        s.add_column("")
        for name in self.results:
            s.add_column(name, justify="right")
        rows = (
            ("accuracy", "accuracy", "{:.3f}"),
            ("macro-F1", "macro_f1", "{:.3f}"),
            ("must-keep recall", "must_keep_recall", "{:.3f}"),
            ("must-keep -> droppable", "must_keep_droppable", "{:.2%}"),
        )
        for label, key, fmt in rows:
            s.add_row(label, *(fmt.format(r[key]) for r in self.results.values()))
        console.print(s)

    def save_confusion(self, path: str | Path, name: str = "model") -> Path:
        """Write the confusion matrix (gold rows, predicted columns) as a PNG."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        cm = np.array(self.results[name]["confusion"], dtype=float)
        norm = cm / np.maximum(cm.sum(1, keepdims=True), 1)
        fig, ax = plt.subplots(figsize=(8, 7), dpi=100)
        ax.imshow(norm, cmap="Blues", vmin=0, vmax=1)
        ax.set_xticks(range(len(CATEGORIES)), CATEGORIES, rotation=45, ha="right")
        ax.set_yticks(range(len(CATEGORIES)), CATEGORIES)
        ax.set_xlabel("predicted")
        ax.set_ylabel(f"gold ({self.gold} labels)")
        for i in range(len(CATEGORIES)):
            for j in range(len(CATEGORIES)):
                if cm[i, j]:
                    color = "white" if norm[i, j] > 0.5 else "black"
                    ax.text(
                        j, i, str(int(cm[i, j])), ha="center", va="center", fontsize=7, color=color
                    )
        ax.set_title(f"{name} on {self.split}: {self.n:,} units")
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path)
        plt.close(fig)
        return path


def load_split(data: str | Path, split: str = "test") -> tuple[list[dict[str, Any]], str]:
    """Rows of a data set folder's split (or of one labelled Parquet file) and their name."""
    import pyarrow.parquet as pq

    data = Path(data)
    path = data / f"{split}.parquet" if data.is_dir() else data
    if not path.exists():
        raise FileNotFoundError(2, "no such split file", str(path))
    table = pq.read_table(path)
    if "category" not in table.column_names:
        raise ValueError(f"{path}: no `category` column (run `winnow label` first)")
    rows = table.to_pylist()
    for r in rows:  # extras (e.g. compaction flags) travel as one JSON column; restore them
        extra = r.pop("extra", None)
        if extra:
            r.update({k: v for k, v in json.loads(extra).items() if k not in r})
    return rows, (split if data.is_dir() else path.name)


def evaluate_model(
    model: str | Path | None, data: str | Path, split: str = "test", batch_size: int = 256
) -> EvalReport:
    """Score the model at `model` (None: the shipped default) and both baselines on `data`."""
    from winnow.data.labeling import Labeler
    from winnow.serving.classifier import ImportanceClassifier

    clf = ImportanceClassifier.load(model)  # first: a bad model is the error to report
    rows, name = load_split(data, split)
    hand = [bool(r.get("hand_label")) for r in rows]
    gold_kind = "hand" if any(hand) else "heuristic"
    # The heuristic labeller needs whole sessions, so it labels every row; scoring is on `keep`.
    keep = [i for i, h in enumerate(hand) if h] if any(hand) else list(range(len(rows)))
    gold = [rows[i]["category"] for i in keep]

    preds = clf.predict_batch(rows, batch_size=batch_size)
    heuristic = [lu.category for lu in Labeler().label(rows)]
    report = EvalReport(split=name, gold=gold_kind, n=len(keep))
    report.results["model"] = classification_metrics(gold, [preds[i].category for i in keep])
    report.results["heuristic"] = classification_metrics(gold, [heuristic[i] for i in keep])
    report.results["kind/tool rule"] = classification_metrics(
        gold, [rule_baseline(rows[i]) for i in keep]
    )
    return report


__all__ = [
    "EvalReport",
    "classification_metrics",
    "evaluate_model",
    "load_split",
    "must_keep_probability",
    "probability_metrics",
    "rule_baseline",
]
