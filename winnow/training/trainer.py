"""Training the importance classifier on a data set folder (`winnow dataset` output).

    result = Trainer(TrainConfig(epochs=20)).fit("data/dataset")
    result.save("models/my-model")          # ONNX + tokenizer + config + metrics + model card

Hand labels train at full weight, heuristic labels at `heuristic_weight`; classes are
re-weighted by inverse frequency; the epoch with the best validation macro-F1 (on hand
labels when the validation split has any) is kept. Seeded and deterministic on CPU.
"""

from __future__ import annotations

import copy
import math
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from winnow.classifier.features import Context, batch_features, session_context
from winnow.classifier.model import UnitClassifier
from winnow.classifier.tokenizer import UnitEncoder, train_tokenizer
from winnow.data.schema import CATEGORIES, CATEGORY_INDEX, MUST_KEEP
from winnow.training.config import TrainConfig
from winnow.training.evaluate import classification_metrics, load_split


@dataclass
class Encoded:
    """A split ready for the network: token ids (unpadded), features, labels, loss weights."""

    ids: list[list[int]]
    features: np.ndarray
    labels: np.ndarray
    weights: np.ndarray
    hand: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def batches(self, batch_size: int, rng: random.Random | None = None):
        """Index batches of similar length (little padding); shuffled when `rng` is given."""
        order = list(range(len(self)))
        if rng is not None:
            rng.shuffle(order)
        chunk = batch_size * 32
        out = []
        for s in range(0, len(order), chunk):
            part = sorted(order[s : s + chunk], key=lambda i: len(self.ids[i]))
            out += [part[j : j + batch_size] for j in range(0, len(part), batch_size)]
        if rng is not None:
            rng.shuffle(out)
        return out

    def subset(self, idx: np.ndarray) -> Encoded:
        return Encoded(
            [self.ids[i] for i in idx], self.features[idx], self.labels[idx],
            self.weights[idx], self.hand[idx],
        )  # fmt: skip

    def tensors(self, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.from_numpy(UnitEncoder.pad([self.ids[i] for i in idx]))
        return ids, torch.from_numpy(self.features[idx])


@dataclass
class TrainResult:
    """The trained network, its tokenizer and what happened during training."""

    model: UnitClassifier
    encoder: UnitEncoder
    config: TrainConfig
    history: list[dict[str, Any]]
    best_epoch: int
    data_summary: dict[str, Any]
    validation: dict[str, Any]
    seconds: float

    def save(self, out_dir: str | Path, name: str | None = None, **kw: Any) -> Path:
        """Export to a model directory (see `winnow.training.export.save_model`)."""
        from winnow.training.export import save_model

        return save_model(self, out_dir, name=name, **kw)


def _encode(
    rows: list[dict[str, Any]],
    encoder: UnitEncoder,
    heuristic_weight: float,
    live_share: float = 0.0,
    rng: random.Random | None = None,
) -> Encoded:
    hand = np.array([bool(r.get("hand_label")) for r in rows])
    contexts = session_context(rows)
    if live_share and rng is not None:
        # The live view: the unit is the latest of its session, nothing after it yet.
        contexts = [
            Context(int(r["index"]) + 1, c.prev, None) if rng.random() < live_share else c
            for r, c in zip(rows, contexts)
        ]
    features = batch_features(rows, contexts)
    return Encoded(
        ids=encoder.encode(rows),
        features=features,
        labels=np.array([CATEGORY_INDEX[r["category"]] for r in rows], dtype=np.int64),
        weights=_label_weights(rows, hand, heuristic_weight),
        hand=hand,
    )


def _label_weights(rows: list[dict[str, Any]], hand: np.ndarray, heuristic: float) -> np.ndarray:
    """Hand labels weigh 1; heuristic ones `heuristic`, except those a tier-3 rule settled
    (a housekeeping command, an empty result, a failed call: facts TAXONOMY.md states
    outright), which are as sure as a hand label and rare enough to be drowned otherwise."""
    from winnow.data.labeling import LFS

    rules = {f"lf:{f.name}" for f in LFS if f.tier == 3}
    ruled = np.array([r.get("label_source") in rules for r in rows])
    return np.where(hand | ruled, 1.0, heuristic).astype(np.float32)


def predict_logits(model: UnitClassifier, data: Encoded, batch_size: int = 256) -> np.ndarray:
    """Logits for every unit of `data`, in order."""
    model.eval()
    out = np.zeros((len(data), model.config.n_labels), np.float32)
    with torch.no_grad():
        for idx in data.batches(batch_size):
            out[idx] = model(*data.tensors(idx)).numpy()
    return out


def _scored(data: Encoded) -> tuple[np.ndarray, str]:
    """Indices to score and the label kind: hand labels when the split has any."""
    if data.hand.any():
        return np.flatnonzero(data.hand), "hand"
    return np.arange(len(data)), "heuristic"


class Trainer:
    """Fits a `UnitClassifier` on the train split of a data set folder."""

    def __init__(self, config: TrainConfig | None = None, console=None):
        self.config = config or TrainConfig()
        from rich.console import Console

        self.console = console or Console(stderr=True)

    def fit(self, data_dir: str | Path) -> TrainResult:
        cfg = self.config
        start = time.perf_counter()
        torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        torch.use_deterministic_algorithms(True)
        rng = random.Random(cfg.seed)

        train_rows, _ = load_split(data_dir, "train")
        val_rows, _ = load_split(data_dir, "validation")
        if not train_rows or not val_rows:
            raise ValueError(f"{data_dir}: the train and validation splits must not be empty")
        tokenizer = train_tokenizer((r["text"] or "" for r in train_rows), cfg.model.vocab_size)
        mcfg = replace(cfg.model, vocab_size=tokenizer.get_vocab_size())
        encoder = UnitEncoder(tokenizer, mcfg.max_len)
        train = _encode(train_rows, encoder, cfg.heuristic_weight, cfg.live_share, rng)
        val = _encode(val_rows, encoder, cfg.heuristic_weight)
        val_idx, val_gold = _scored(val)

        counts = np.bincount(train.labels, minlength=len(CATEGORIES))
        summary = {
            "train_units": len(train),
            "train_hand_units": int(train.hand.sum()),
            "validation_units": len(val),
            "validation_hand_units": int(val.hand.sum()),
            "train_categories": {c: int(counts[i]) for i, c in enumerate(CATEGORIES)},
        }
        self.console.print(
            f"training on {len(train):,} units ({int(train.hand.sum()):,} hand-labelled), "
            f"validating on {len(val_idx):,} {val_gold}-labelled units"
        )
        model = UnitClassifier(mcfg)
        val_gold_labels = [CATEGORIES[i] for i in val.labels[val_idx]]
        history: list[dict[str, Any]] = []
        best: tuple[float, int, dict] = (-1.0, 0, {})

        def validate(stage: str, epoch: int, total: int, loss: float, seconds: float) -> bool:
            """Record an epoch; True when it is the best so far."""
            nonlocal best
            pred = [CATEGORIES[i] for i in predict_logits(model, val)[val_idx].argmax(1)]
            m = classification_metrics(val_gold_labels, pred)
            n = len(history) + 1
            history.append(
                {
                    "epoch": n,
                    "stage": stage,
                    "loss": loss,
                    "val_macro_f1": m["macro_f1"],
                    "val_accuracy": m["accuracy"],
                }
            )
            better = m["macro_f1"] > best[0]
            if better:
                best = (m["macro_f1"], n, copy.deepcopy(model.state_dict()))
            self.console.print(
                f"{stage} {epoch:2d}/{total}  loss {loss:.4f}  val macro-F1 {m['macro_f1']:.4f}  "
                f"acc {m['accuracy']:.4f}  ({seconds:.1f} s){' *' if better else ''}",
                highlight=False,
            )
            return better

        self._stage("epoch", model, train, cfg.epochs, cfg.lr, rng, validate, cfg.patience)
        hand = np.flatnonzero(train.hand)
        if cfg.finetune_epochs and len(hand):
            model.load_state_dict(best[2])
            tuned = train.subset(hand)
            tuned.weights = np.ones(len(tuned), np.float32)
            self._stage(
                "fine-tune", model, tuned, cfg.finetune_epochs, cfg.finetune_lr, rng, validate
            )
        model.load_state_dict(best[2])
        model.eval()
        bias = self._must_keep_bias(model, val, val_idx)
        logits = predict_logits(model, val)
        validation = classification_metrics(
            [CATEGORIES[i] for i in val.labels[val_idx]],
            [CATEGORIES[i] for i in logits[val_idx].argmax(1)],
        )
        validation["gold"] = val_gold
        summary["must_keep_bias"] = bias
        return TrainResult(
            model, encoder, replace(cfg, model=mcfg),
            history, best[1], summary, validation, time.perf_counter() - start,
        )  # fmt: skip

    def _must_keep_bias(self, model: UnitClassifier, val: Encoded, idx: np.ndarray) -> float:
        """Pick and apply (to the output bias) the must-keep logit bias; returns it."""
        cfg = self.config
        if cfg.must_keep_max_accuracy_cost <= 0:
            return 0.0
        logits = predict_logits(model, val)[idx]
        gold = val.labels[idx]
        keep = np.array([c in MUST_KEEP for c in CATEGORIES])
        gold_keep = keep[gold]

        def scores(delta: float) -> tuple[float, float]:
            pred = (logits + keep * delta).argmax(1)
            recall = float(keep[pred][gold_keep].mean()) if gold_keep.any() else 1.0
            return float((pred == gold).mean()), recall

        base, _ = scores(0.0)
        chosen, best = 0.0, scores(0.0)[1]
        for delta in np.arange(0.25, 4.01, 0.25):
            acc, recall = scores(float(delta))
            if base - acc > cfg.must_keep_max_accuracy_cost + 1e-9:
                break
            if recall > best + 1e-9:
                chosen, best = float(delta), recall
            if best >= cfg.must_keep_recall_target:
                break
        out = model.head[-1]
        assert isinstance(out, torch.nn.Linear)  # UnitClassifier's head ends in its logits
        with torch.no_grad():
            out.bias[torch.from_numpy(keep)] += chosen
        acc, recall = scores(chosen)
        self.console.print(
            f"must-keep logit bias {chosen:.2f}: validation must-keep recall {recall:.3f}, "
            f"accuracy {acc:.3f} ({acc - base:+.3f})"
        )
        return chosen

    def _stage(
        self, name, model, data: Encoded, epochs: int, lr: float, rng, validate, patience=None
    ):
        """Epochs of AdamW with warm-up and linear decay; stops after `patience` epochs
        without a better validation macro-F1."""
        cfg = self.config
        counts = np.bincount(data.labels, minlength=len(CATEGORIES)).astype(np.float64)
        freq = np.maximum(counts, 1.0) / counts.sum()
        raw_w = np.where(counts > 0, freq**-cfg.class_weight_power, 0.0)
        raw_w = np.minimum(raw_w / raw_w[counts > 0].mean(), cfg.class_weight_cap)
        class_w = torch.tensor(raw_w, dtype=torch.float32)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=cfg.weight_decay)
        steps = epochs * math.ceil(len(data) / cfg.batch_size)
        warm = max(1, int(steps * cfg.warmup_share))
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm)))
        )
        since_best = 0
        for epoch in range(1, epochs + 1):
            t0 = time.perf_counter()
            loss = self._epoch(model, opt, sched, data, class_w, rng, f"{name} {epoch}")
            since_best = (
                0
                if validate(name, epoch, epochs, loss, time.perf_counter() - t0)
                else since_best + 1
            )
            if patience and since_best >= patience:
                self.console.print(f"no better validation macro-F1 for {patience} epochs: stopping")
                break

    def _epoch(self, model, opt, sched, data: Encoded, class_w, rng, label: str) -> float:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        model.train()
        batches = data.batches(self.config.batch_size, rng)
        total, weight = 0.0, 0.0
        with Progress(
            TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            console=self.console, transient=True,
        ) as progress:  # fmt: skip
            task = progress.add_task("train", total=len(batches))
            for idx in batches:
                ids, feats = data.tensors(idx)
                y = torch.from_numpy(data.labels[idx])
                w = torch.from_numpy(data.weights[idx])
                per = F.cross_entropy(
                    model(ids, feats), y, weight=class_w, reduction="none",
                    label_smoothing=self.config.label_smoothing,
                )  # fmt: skip
                loss = (per * w).sum() / w.sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                total += loss.item() * float(w.sum())
                weight += float(w.sum())
                progress.advance(task)
        return total / max(weight, 1e-9)


__all__ = ["Encoded", "TrainConfig", "TrainResult", "Trainer", "predict_logits"]
