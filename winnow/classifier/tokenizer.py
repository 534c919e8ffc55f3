"""Turning units into token ids: a small subword tokenizer trained on transcripts, a prefix of
role / kind / tool-bucket tokens, and a head + tail cut of long units.

Torch-free: the serving classifier uses exactly this code.

Encoding goes word by word, through a cache. The tokenizer lower-cases, cuts the text into
`\\w+` and `[^\\w\\s]+` runs and runs BPE inside each run, so no token spans whitespace: a
text's ids are its whitespace-separated words' ids, one word after another. Transcripts
repeat their words, and a cached word costs a dict lookup where the tokenizer costs ~1 us a
token. tests/test_tokenizer.py holds the result to the tokenizer's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain, compress, count
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
# Words remembered per encoder (~300 bytes each, so ~20 MB full); a full cache starts afresh.
WORD_CACHE_SIZE = 1 << 16

# Unseen words per text handed to the tokenizer: a text per word costs ~3 us of overhead
# each, and one very long text is several times slower per token than many short ones.
_WORDS_PER_TEXT = 64


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

    Thread-safe: the wrapped tokenizer is never reconfigured after construction; the word
    caches are dicts that are only added to, or swapped for a new one when full.
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
        cut = tokenizer.token_to_id(CUT)
        if cut is None:
            raise ValueError(f"the tokenizer has no {CUT} token: not one winnow trained")
        self._cut: int = cut
        # Prefix tokens it lacks read as id 1 (unknown), like a role it never saw.
        self._prefix: dict[str, int] = {
            t: i for t in PREFIX_TOKENS if (i := tokenizer.token_to_id(t)) is not None
        }
        self._by_word = _encodes_word_by_word(tokenizer)
        self._words: dict[str, tuple[int, ...]] = {}  # word as written -> ids

    @classmethod
    def from_file(
        cls, path: str | Path, max_len: int = 64, chars_per_token: int = CHARS_PER_TOKEN
    ) -> UnitEncoder:
        return cls(Tokenizer.from_file(str(path)), max_len, chars_per_token=chars_per_token)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def clip_chars(self) -> int:
        """The most characters of a unit's text that `clip` keeps."""
        return self._head_chars + self._tail_chars

    def clip(self, text: str) -> str:
        """The characters worth tokenizing: the head and tail the token budget can hold."""
        return clip_text(text, self._head_chars, self._tail_chars)

    def _prefix_ids(self, role: Any, kind: Any, tool: Any) -> tuple[int, int, int]:
        p = self._prefix
        return (
            p.get(f"[role:{role}]", 1),
            p.get(f"[kind:{kind}]", 1),
            p.get(f"[tool:{tool_bucket(tool)}]", 1),
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
        ids = self._ids([self.clip(text)])[0]
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
        return [[*p, *self._fit(ids)] for p, ids in zip(rows, self._ids(texts))]

    def _ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's `tokenizer.encode(text, add_special_tokens=False).ids`."""
        out: list[list[int]] = []
        unseen: dict[int, list[str]] = {}  # texts with a word not in the cache: their words
        whole: list[int] = []
        get = self._words.__getitem__
        for i, text in enumerate(texts):
            out.append([])
            if not (self._by_word and _splits_as_tokenizer(text)):
                whole.append(i)
                continue
            words = text.split()
            try:
                out[i] = list(chain.from_iterable(map(get, words)))
            except KeyError:
                unseen[i] = words
        if unseen:
            get = self._learn(unseen.values()).__getitem__
            for i, words in unseen.items():
                out[i] = list(chain.from_iterable(map(get, words)))
        if whole:
            encs = self.tokenizer.encode_batch_fast(
                [texts[i] for i in whole], add_special_tokens=False
            )
            for i, e in zip(whole, encs):
                out[i] = e.ids
        return out

    def _learn(self, word_lists: Iterable[list[str]]) -> dict[str, tuple[int, ...]]:
        """Cache the ids of every word in `word_lists`; return a table that holds them all."""
        known = self._words
        needed = set(chain.from_iterable(word_lists))
        new = self._encode_words(needed.difference(known))
        if len(known) + len(new) <= WORD_CACHE_SIZE:
            known.update(new)
            return known
        # Full: start afresh with the words in use. `known` is only ever added to, so it
        # still holds the needed words it held above, whatever `self._words` is by now.
        table = {w: known[w] for w in needed.difference(new)}
        table.update(new)
        if len(table) <= WORD_CACHE_SIZE:
            self._words = table
        return table

    def _encode_words(self, words: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """Each word's ids, as the tokenizer encodes it alone.

        The words go to the tokenizer `_WORDS_PER_TEXT` to a text, joined by " [CUT] ":
        the tokenizer takes special tokens out before anything else, so each word encodes
        as it would alone and one [CUT] id stands between two words. A text where a word
        gives a [CUT] id of its own is encoded word by word.
        """
        words = list(words)
        groups = [words[i : i + _WORDS_PER_TEXT] for i in range(0, len(words), _WORDS_PER_TEXT)]
        encs = self.tokenizer.encode_batch_fast(
            [f" {CUT} ".join(g) for g in groups], add_special_tokens=False
        )
        out: dict[str, tuple[int, ...]] = {}
        cut = self._cut
        for group, enc in zip(groups, encs):
            ids = enc.ids
            ends = [*compress(count(), map(cut.__eq__, ids)), len(ids)]
            if len(ends) != len(group):
                alone = self.tokenizer.encode_batch_fast(group, add_special_tokens=False)
                out.update((w, tuple(e.ids)) for w, e in zip(group, alone))
                continue
            spans = map(slice, [0, *(e + 1 for e in ends[:-1])], ends)
            out.update(zip(group, map(tuple, map(ids.__getitem__, spans))))
        return out

    @staticmethod
    def pad(seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """Right-pad id lists with PAD_ID into one [n, longest] int64 array."""
        out = np.full((len(seqs), max(map(len, seqs), default=1)), PAD_ID, dtype=np.int64)
        for i, s in enumerate(seqs):
            out[i, : len(s)] = s
        return out


def _splits_as_tokenizer(text: str) -> bool:
    """Whether str.split() cuts `text` only where the tokenizer does: str.split() also cuts at
    the ASCII separators \\x1c-\\x1f, the tokenizer's `\\s` does not."""
    return not ("\x1c" in text or "\x1d" in text or "\x1e" in text or "\x1f" in text)


def _encodes_word_by_word(tok: Tokenizer) -> bool:
    """Whether `tok` is winnow's pipeline (Lowercase, Whitespace, BPE without dropout, nothing
    after; [CUT] a special token), so that `UnitEncoder` may encode word by word."""
    added = tok.get_added_tokens_decoder().values()
    return (
        isinstance(tok.normalizer, normalizers.Lowercase)
        and isinstance(tok.pre_tokenizer, pre_tokenizers.Whitespace)
        and isinstance(tok.model, models.BPE)
        and tok.model.dropout is None
        and tok.post_processor is None
        and tok.truncation is None
        and tok.padding is None
        and CUT in {t.content for t in added}
        and not any(c.isspace() for t in added for c in t.content)
    )


__all__ = ["PAD_ID", "PREFIX_LEN", "SPECIAL_TOKENS", "UnitEncoder", "train_tokenizer"]
