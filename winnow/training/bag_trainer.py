"""Training the n-gram classifier (`BagClassifier`) on encoded units and soft targets.

    model = BagTrainer(BagTrainConfig()).fit(inputs, targets, weights)
    probs = predict_proba(model, inputs)

Targets are probability rows over CATEGORIES: one-hot (smoothed) for hand labels, a
teacher's probabilities for units it labelled. A fixed number of epochs: the settings are
chosen by leave-one-source-out figures (`winnow evaluate --by-source`), not by a validation
split of the sources the model trains on. Seeded and deterministic on CPU.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from winnow.classifier.bag_model import BagClassifier
from winnow.classifier.config import BagModelConfig
from winnow.classifier.ngrams import BagInputs, BagSpec, concat_inputs


@dataclass
class BagTrainConfig:
    """Optimisation settings of the n-gram classifier; `model` and `spec` are its shape."""

    model: BagModelConfig = field(default_factory=BagModelConfig)
    spec: BagSpec = field(default_factory=BagSpec)
    epochs: int = 10
    batch_size: int = 256
    lr: float = 5e-3
    weight_decay: float = 0.0
    class_weight_power: float = 0.5  # class weight = (1 / frequency) ** power
    class_weight_cap: float = 4.0  # ... at most this many times the mean
    label_smoothing: float = 0.05
    # Units without a hand label (teacher or heuristic targets) drawn afresh each epoch, at
    # most: bounds an epoch's cost whatever the corpus size; hand-labelled units are all
    # seen every epoch.
    weak_per_epoch: int = 6000
    seed: int = 0
    threads: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BagTrainConfig:
        d = dict(d)
        model = BagModelConfig.from_dict(d.pop("model", {}))
        spec = BagSpec.from_dict(d.pop("spec", {}))
        known = set(cls.__dataclass_fields__) - {"model", "spec"}
        return cls(model=model, spec=spec, **{k: v for k, v in d.items() if k in known})


def _tensors(inputs: BagInputs, rows: np.ndarray) -> tuple[torch.Tensor, ...]:
    """(flat ids, offsets, weights, dense) of `rows`: EmbeddingBag's 1-D form, no padding (a
    padded batch sends every padding slot through the sparse gradient too)."""
    o = inputs.offsets
    spans = [slice(o[r], o[r + 1]) for r in rows.tolist()]
    lengths = o[rows + 1] - o[rows]
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    ids = np.concatenate([inputs.ids[s] for s in spans]) if spans else inputs.ids[:0]
    w = np.concatenate([inputs.weights[s] for s in spans]) if spans else inputs.weights[:0]
    return (
        torch.from_numpy(ids),
        torch.from_numpy(offsets),
        torch.from_numpy(w),
        torch.from_numpy(inputs.dense[rows]),
    )


def predict_logits(model: BagClassifier, inputs: BagInputs, batch_size: int = 1024) -> np.ndarray:
    """[len(inputs), labels] logits."""
    model.eval()
    out = np.zeros((len(inputs), model.config.n_labels), np.float32)
    with torch.no_grad():
        for s in range(0, len(inputs), batch_size):
            rows = np.arange(s, min(len(inputs), s + batch_size))
            out[rows] = model(*_tensors(inputs, rows)).numpy()
    return out


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    z = logits / temperature
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


class BagTrainer:
    """Fits a `BagClassifier` on soft targets with per-unit loss weights."""

    def __init__(self, config: BagTrainConfig | None = None):
        self.config = config or BagTrainConfig()

    def fit(
        self,
        inputs: BagInputs | Sequence[BagInputs],
        targets: np.ndarray,
        weights: np.ndarray,
        hand: np.ndarray | None = None,
    ) -> BagClassifier:
        """Fit on `targets` [N, labels] at loss `weights` [N]. `inputs`: the units' inputs, or
        several views of them (same N, e.g. online and batch): each epoch a unit is seen in
        one view drawn at random. `hand` [N] marks hand-labelled units (default: all); the
        others are subsampled per epoch (`weak_per_epoch`)."""
        cfg = self.config
        views = [inputs] if isinstance(inputs, BagInputs) else list(inputs)
        both = concat_inputs(views) if len(views) > 1 else views[0]
        n = len(views[0])
        torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        rng = random.Random(cfg.seed)
        model = BagClassifier(cfg.model)
        n_labels = cfg.model.n_labels
        smooth = cfg.label_smoothing
        targets = targets * (1 - smooth) + smooth / n_labels
        mass = (targets * weights[:, None]).sum(0)
        freq = np.maximum(mass, 1e-9) / mass.sum()
        class_w = np.where(mass > 0, freq**-cfg.class_weight_power, 0.0)
        class_w = np.minimum(class_w / class_w[mass > 0].mean(), cfg.class_weight_cap)
        unit_w = weights * (targets @ class_w)
        keep = np.flatnonzero(unit_w > 0)
        hand = np.ones(n, bool) if hand is None else np.asarray(hand, bool)
        strong, weak = keep[hand[keep]], keep[~hand[keep]]
        per_epoch = len(strong) + min(len(weak), cfg.weak_per_epoch)
        # The embedding table's gradient is sparse (the rows a batch touched): SparseAdam
        # updates those rows only, ~20x faster per step than a dense AdamW over the table.
        dense_params = [p for n, p in model.named_parameters() if not n.startswith("bag.")]
        opts = [
            torch.optim.SparseAdam(list(model.bag.parameters()), lr=cfg.lr),
            torch.optim.AdamW(dense_params, lr=cfg.lr, weight_decay=cfg.weight_decay),
        ]
        steps = cfg.epochs * math.ceil(per_epoch / cfg.batch_size)
        scheds = [
            torch.optim.lr_scheduler.LambdaLR(o, lambda s: max(0.0, 1 - s / max(1, steps)))
            for o in opts
        ]
        t_all = torch.from_numpy(targets.astype(np.float32))
        w_all = torch.from_numpy(unit_w.astype(np.float32))
        for _ in range(cfg.epochs):
            model.train()
            drawn = list(weak)
            rng.shuffle(drawn)
            order = np.concatenate([strong, np.array(drawn[: cfg.weak_per_epoch], np.int64)])
            perm = list(range(len(order)))
            rng.shuffle(perm)  # the same swaps as shuffling `order` itself: seeds still hold
            order = order[perm]
            view = np.array([rng.randrange(len(views)) for _ in range(len(order))], np.int64)
            for s in range(0, len(order), cfg.batch_size):
                rows = order[s : s + cfg.batch_size]
                logits = model(*_tensors(both, rows + n * view[s : s + cfg.batch_size]))
                idx = torch.from_numpy(rows)
                per = -(t_all[idx] * F.log_softmax(logits, -1)).sum(-1)
                w = w_all[idx]
                loss = (per * w).sum() / w.sum()
                for o in opts:
                    o.zero_grad(set_to_none=True)
                loss.backward()
                for o, sc in zip(opts, scheds):
                    o.step()
                    sc.step()
        model.eval()
        return model


__all__ = ["BagTrainConfig", "BagTrainer", "predict_logits", "softmax"]
