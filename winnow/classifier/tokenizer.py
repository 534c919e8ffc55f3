"""Turning units into token ids: a small subword tokenizer trained on transcripts, a prefix of
role / kind / tool-bucket tokens, and a head + tail cut of long units.

Torch-free: the serving classifier uses exactly this code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from winnow.classifier.features import TOOL_BUCKETS, clip_text, tool_bucket
from winnow.data.schema import KINDS, ROLES, Unit

PAD, UNK, CUT = "[PAD]", "[UNK]", "[CUT]"
PREFIX_TOKENS = (
    *(f"[role:{r}]" for r in ROLES),
    *(f"[kind:{k}]" for k in KINDS),
    *(f"[tool:{b}]" for b in TOOL_BUCKETS),
)
SPECIAL_TOKENS = (PAD, UNK, CUT, *PREFIX_TOKENS)
PREFIX_LEN = 3  # role, kind, tool bucket
PAD_ID = 0
# Characters kept per token of budget before tokenizing (head and tail alike): a little
# over the ~3.5 characters a token covers in transcripts, so a 50 kB tool result costs what
# a 250-character one does.
CHARS_PER_TOKEN = 4


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096) -> Tokenizer:
    """Train a lower-cased BPE over words and punctuation runs (`\\w+|[^\\w\\s]+`).

    A plain word/punctuation split: finer pre-tokenizers (single digits, single punctuation
    marks) cost ~2x the encoding time and the serving budget is ~0.1 ms per unit.
    """
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=3,
        special_tokens=list(SPECIAL_TOKENS),
        limit_alphabet=300,
        show_progress=False,
    )
    tok.train_from_iterator((clip_text(t) for t in texts), trainer=trainer)
    return tok


class UnitEncoder:
    """Encode units as `[role][kind][tool] head-tokens [CUT] tail-tokens`, at most `max_len` ids.

    Thread-safe: the wrapped tokenizer is never reconfigured after construction.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        max_len: int = 64,
        tail_share: float = 0.33,
        chars_per_token: int = CHARS_PER_TOKEN,
    ):
        missing = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
        if missing or tokenizer.token_to_id(PAD) != PAD_ID:
            raise ValueError(f"tokenizer lacks winnow's special tokens: {missing or [PAD]}")
        self.tokenizer = tokenizer
        self.max_len = max_len
        budget = max_len - PREFIX_LEN
        self._tail = max(1, int(budget * tail_share))
        self._head = budget - self._tail - 1  # one slot for [CUT]
        self.chars_per_token = chars_per_token
        self._head_chars = self._head * chars_per_token
        self._tail_chars = self._tail * chars_per_token
        self._cut = tokenizer.token_to_id(CUT)
        self._prefix = {t: tokenizer.token_to_id(t) for t in PREFIX_TOKENS}

    @classmethod
    def from_file(
        cls, path: str | Path, max_len: int = 64, chars_per_token: int = CHARS_PER_TOKEN
    ) -> UnitEncoder:
        return cls(Tokenizer.from_file(str(path)), max_len, chars_per_token=chars_per_token)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def clip(self, text: str) -> str:
        """The characters worth tokenizing: the head and tail the token budget can hold."""
        return clip_text(text, self._head_chars, self._tail_chars)

    def _prefix_ids(self, role: Any, kind: Any, tool: Any) -> tuple[int, int, int]:
        p = self._prefix
        return (
            p.get(f"[role:{role}]", 1),
            p.get(f"[kind:{kind}]", 1),
            p[f"[tool:{tool_bucket(tool)}]"],
        )

    def _fit(self, ids: list[int]) -> list[int]:
        if len(ids) > self._head + 1 + self._tail:
            return ids[: self._head] + [self._cut] + ids[-self._tail :]
        return ids

    def encode_one(self, unit: Unit | dict[str, Any]) -> np.ndarray:
        """One unit as a [1, n] int64 array (no padding)."""
        if isinstance(unit, dict):
            role, kind, tool, text = (
                unit.get("role"),
                unit.get("kind"),
                unit.get("tool_name"),
                unit.get("text") or "",
            )
        else:
            role, kind, tool, text = unit.role, unit.kind, unit.tool_name, unit.text or ""
        ids = self.tokenizer.encode(self.clip(text), add_special_tokens=False).ids
        return np.array([[*self._prefix_ids(role, kind, tool), *self._fit(ids)]], dtype=np.int64)

    def encode(self, units: Sequence[Unit | dict[str, Any]]) -> list[list[int]]:
        """Each unit's ids, unpadded (lengths differ; see `pad`)."""
        rows = []
        texts = []
        for u in units:
            if isinstance(u, dict):
                rows.append(self._prefix_ids(u.get("role"), u.get("kind"), u.get("tool_name")))
                texts.append(self.clip(u.get("text") or ""))
            else:
                rows.append(self._prefix_ids(u.role, u.kind, u.tool_name))
                texts.append(self.clip(u.text or ""))
        encs = self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [[*p, *self._fit(e.ids)] for p, e in zip(rows, encs)]

    @staticmethod
    def pad(seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """Right-pad id lists with PAD_ID into one [n, longest] int64 array."""
        out = np.full((len(seqs), max(map(len, seqs), default=1)), PAD_ID, dtype=np.int64)
        for i, s in enumerate(seqs):
            out[i, : len(s)] = s
        return out


__all__ = ["PAD_ID", "PREFIX_LEN", "SPECIAL_TOKENS", "UnitEncoder", "train_tokenizer"]
