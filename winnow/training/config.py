"""Training settings as a dataclass (torch-free, so the CLI can show its defaults)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from winnow.classifier.config import ModelConfig


@dataclass
class TrainConfig:
    """Optimisation and data settings; `model` is the network's shape."""

    model: ModelConfig = field(default_factory=ModelConfig)
    epochs: int = 20
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_share: float = 0.05
    # Loss weight of a heuristically labelled unit (hand = 1; 0: hand labels only).
    heuristic_weight: float = 0.3
    # Share of training units whose features see the session cut just after them, as a live
    # classifier does (a lone unit is the latest of its session): robust to both views.
    live_share: float = 0.25
    class_weight_power: float = 0.5  # class weight = (1 / frequency) ** power
    # ... at most this many times the mean weight: a category with 3 examples would otherwise
    # weigh ~30x and be predicted for anything odd (architecture for a /clear command).
    class_weight_cap: float = 4.0
    label_smoothing: float = 0.05
    patience: int = 5  # epochs without a better validation macro-F1 before stopping
    # Then a few epochs on the hand-labelled units alone (when there are any), at a lower
    # rate: the mixed stage learns the bulk from heuristic labels, this one unlearns their
    # systematic mistakes.
    finetune_epochs: int = 4
    finetune_lr: float = 1e-3
    # Losing a must-keep unit costs more than keeping a droppable one, and the compressor's
    # contract is must-keep recall: the must-keep logits get the smallest bias (from a grid)
    # that reaches this validation must-keep recall, within the accuracy budget (else the
    # best recall the budget allows). It is baked into the exported network; a budget of 0
    # turns it off.
    must_keep_recall_target: float = 0.95
    must_keep_max_accuracy_cost: float = 0.03
    seed: int = 0
    # One thread: with a padded batch, two OpenMP threads on a busy 2-core machine ran a
    # step 15x slower than one (712 ms vs 47 ms), spinning against each other.
    threads: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        d = dict(d)
        model = ModelConfig.from_dict(d.pop("model", {}))
        known = set(cls.__dataclass_fields__) - {"model"}
        return cls(model=model, **{k: v for k, v in d.items() if k in known})


__all__ = ["ModelConfig", "TrainConfig"]
