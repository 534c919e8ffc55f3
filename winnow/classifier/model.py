"""The importance classifier: a small transformer over unit tokens plus a hand-feature branch.

    token ids ── embedding + positions ── TransformerEncoderLayer x n ── masked mean ──┐
                                                                                      ├─ MLP ─ logits
    hand features (winnow.classifier.features) ── Linear ── GELU ─────────────────────┘

Imports torch: only training and export use this module; serving runs the ONNX export.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
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

    def forward_lean(self, input_ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """`forward` in eval mode, with each encoder layer written out in plain tensor ops.

        Exported, nn.TransformerEncoderLayer becomes ~85 ONNX nodes of reshapes and shape
        arithmetic around a few matmuls; this is the same math in about half as many, and at
        a few microseconds per node that is most of the single-unit latency. Same weights,
        same result (tests/test_model.py checks both paths agree).
        """
        pad = input_ids == PAD_ID
        h = self.tok(input_ids) + self.pos.weight[: input_ids.shape[1]]
        bias = pad[:, None, None, :].to(h.dtype) * -1e9  # [B, 1, 1, T] over the keys
        for layer in self.layers:
            h = h + self._attention(layer.self_attn, layer.norm1(h), bias)
            h = h + layer.linear2(F.gelu(layer.linear1(layer.norm2(h))))
        return self._classify(h, pad, features)

    def _attention(self, attn: nn.MultiheadAttention, x: torch.Tensor, bias: torch.Tensor):
        heads, d = attn.num_heads, x.shape[-1]
        q, k, v = F.linear(x, attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
        if heads == 1:  # no head axis: ten fewer reshape / transpose nodes
            w = torch.softmax(q @ k.transpose(-1, -2) * d**-0.5 + bias[:, 0], dim=-1)
            return attn.out_proj(w @ v)
        q, k, v = (t.unflatten(-1, (heads, d // heads)).transpose(1, 2) for t in (q, k, v))
        w = torch.softmax(q @ k.transpose(-1, -2) * (d // heads) ** -0.5 + bias, dim=-1)
        return attn.out_proj((w @ v).transpose(1, 2).flatten(-2))

    def _classify(self, h: torch.Tensor, pad: torch.Tensor, features: torch.Tensor):
        h = self.norm(h)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.head(torch.cat([pooled, self.feat(features)], dim=-1))


class ExportHead(nn.Module):
    """The exported graph: the lean forward, returning softmax probabilities."""

    def __init__(self, model: UnitClassifier):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.model.forward_lean(input_ids, features), dim=-1)


__all__ = ["ExportHead", "ModelConfig", "UnitClassifier"]
