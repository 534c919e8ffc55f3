"""The classifier's shape as a dataclass (torch-free, so the CLI can show its defaults)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from winnow.classifier.features import N_FEATURES
from winnow.data.schema import CATEGORIES


@dataclass
class ModelConfig:
    """Shape of the network, sized for the serving latency budget. Measured on the release
    data (scripts/bench_classifier.py, test split): d_model 48 / 64 tokens ran ONNX batches
    at ~9k units/s on one core; 32 / 48 tokens at ~17k, with test accuracy 0.802 vs 0.791 and
    must-keep recall 0.921 vs 0.955 (one seed each)."""

    vocab_size: int = 4096
    max_len: int = 48
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 1
    d_ff: int = 64
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


@dataclass
class BagModelConfig:
    """Shape of the n-gram classifier: an embedding bag of hashed n-grams (`BagSpec`) and a
    linear map of the dense features, summed into one hidden layer, then the labels."""

    buckets: int = 1 << 14
    n_dense: int = 3 * N_FEATURES
    hidden: int = 128
    n_labels: int = len(CATEGORIES)
    dropout: float = 0.2

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BagModelConfig:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


__all__ = ["BagModelConfig", "ModelConfig"]
