"""The importance classifier: a small transformer over unit tokens plus a hand-feature branch.

    token ids ── embedding + positions ── TransformerEncoderLayer x n ── masked mean ──┐
                                                                                      ├─ MLP ─ logits
    hand features (winnow.classifier.features) ── Linear ── GELU ─────────────────────┘

Imports torch: only training and export use this module; serving runs the ONNX graph that
winnow.training.graph writes from its weights.
"""

from __future__ import annotations

import torch
from torch import nn

from winnow.classifier.config import ModelConfig
from winnow.classifier.tokenizer import PAD_ID


class UnitClassifier(nn.Module):
    """Logits over CATEGORIES for a batch of token ids [B, T] and hand features [B, F]."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = c = config
        self.tok = nn.Embedding(c.vocab_size, c.d_model, padding_idx=PAD_ID)
        self.pos = nn.Embedding(c.max_len, c.d_model)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                c.d_model, c.n_heads, c.d_ff, c.dropout, "gelu", batch_first=True, norm_first=True
            )
            for _ in range(c.n_layers)
        )
        self.norm = nn.LayerNorm(c.d_model)
        self.feat = nn.Sequential(nn.Linear(c.n_features, c.d_features), nn.GELU())
        self.head = nn.Sequential(
            nn.Dropout(c.dropout),
            nn.Linear(c.d_model + c.d_features, c.d_hidden),
            nn.GELU(),
            nn.Dropout(c.dropout),
            nn.Linear(c.d_hidden, c.n_labels),
        )

    def forward(self, input_ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        pad = input_ids == PAD_ID
        h = self.tok(input_ids) + self.pos.weight[: input_ids.shape[1]]
        for layer in self.layers:
            h = layer(h, src_key_padding_mask=pad)
        return self._classify(h, pad, features)

    def _classify(self, h: torch.Tensor, pad: torch.Tensor, features: torch.Tensor):
        h = self.norm(h)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.head(torch.cat([pooled, self.feat(features)], dim=-1))


__all__ = ["ModelConfig", "UnitClassifier"]
