"""The n-gram classifier's network (torch; training and export only):

    hashed n-gram ids ── EmbeddingBag(sum, weighted) ──┐
                                                       + ── ReLU ── Linear ── logits
    dense features (unit, previous, next) ── Linear ───┘

Serving runs the ONNX graph that winnow.training.bag_export writes from its weights.
"""

from __future__ import annotations

import torch
from torch import nn

from winnow.classifier.config import BagModelConfig


class BagClassifier(nn.Module):
    """Logits over CATEGORIES for flat ids, bag offsets [B] and per-id weights (EmbeddingBag's
    1-D form) and dense features [B, n_dense]."""

    def __init__(self, config: BagModelConfig):
        super().__init__()
        self.config = c = config
        self.bag = nn.EmbeddingBag(c.buckets, c.hidden, mode="sum", sparse=True)
        nn.init.normal_(self.bag.weight, std=0.02)
        self.dense = nn.Linear(c.n_dense, c.hidden)
        self.head = nn.Sequential(nn.ReLU(), nn.Dropout(c.dropout), nn.Linear(c.hidden, c.n_labels))

    def forward(
        self, ids: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor, dense: torch.Tensor
    ) -> torch.Tensor:
        h = self.bag(ids, offsets, per_sample_weights=weights) + self.dense(dense)
        return self.head(h)


__all__ = ["BagClassifier", "BagModelConfig"]
