"""The classifier's shape as a dataclass (torch-free, so the CLI can show its defaults)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from winnow.classifier.features import N_FEATURES
from winnow.data.schema import CATEGORIES


@dataclass
class ModelConfig:
    """Shape of the network, sized for the serving latency budget (scripts/bench_classifier.py
    measures it: 494 us p50 per 1,000-char unit here, against a 300 us goal)."""

    vocab_size: int = 4096
    max_len: int = 64
    d_model: int = 48
    n_heads: int = 2
    n_layers: int = 1
    d_ff: int = 96
    n_features: int = N_FEATURES
    d_features: int = 32
    d_hidden: int = 96
    n_labels: int = len(CATEGORIES)
    dropout: float = 0.1

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


__all__ = ["ModelConfig"]
