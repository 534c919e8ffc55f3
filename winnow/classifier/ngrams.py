"""Hashed word n-grams of a unit and its neighbours: the text input of the n-gram classifier.

Torch-free (numpy and the standard library): training and serving call the very same code.

A unit becomes a bag of hashed ids in `BagSpec.buckets` rows of one embedding table:

- its own text (head and tail when long), lower-cased, cut at whitespace and punctuation,
  digits folded to one token: word unigrams and bigrams;
- its tool name, as one token;
- the first `neighbour_words` words of the previous unit and of the next one, each salted by
  its side, so that "Let me run the tests" before a tool call and a question before a short
  user reply weigh on the unit itself. The next unit is left out in online mode (live use).

Each group of ids weighs 1/sqrt(its size), so a long unit does not drown its neighbours.
Hashes are crc32 of the word's UTF-8 bytes (stable across processes, unlike `hash`), mixed
by one 64-bit multiply; a word's hash is cached, so a session's repeated words cost a dict
lookup.
"""

from __future__ import annotations

import re
import string
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

NGRAM_VERSION = 1

_CUTS = ("".join(c for c in string.punctuation if c not in "'_") + "\x1c\x1d\x1e\x1f").encode()
_BYTE_SPLIT = bytes.maketrans(_CUTS, b" " * len(_CUTS))
_WIDE_SPACE = re.compile(r"[^\S\x00-\x7f]")
_MIX = np.uint64(0x9E3779B97F4A7C15)
_SHIFT = np.uint64(32)
# Salts keep the groups apart in the shared table.
_SALT = {
    "uni": np.uint64(0x51ED27),
    "bi": np.uint64(0xB16A3),
    "tool": np.uint64(0x7001),
    "prev": np.uint64(0x9EE4),
    "next": np.uint64(0x4E8D),
}
_NUM = zlib.crc32(b"<num>")
# Words remembered (bytes -> crc32); a full cache starts afresh.
_CACHE_SIZE = 1 << 17


@dataclass(frozen=True)
class BagSpec:
    """How a unit's text becomes hashed ids (recorded in the model manifest)."""

    buckets: int = 1 << 14
    head_chars: int = 1000
    tail_chars: int = 300
    neighbour_words: int = 24
    version: int = NGRAM_VERSION

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BagSpec:
        return cls(**{f.name: int(d[f.name]) for f in fields(cls) if f.name in d})


def words(text: str) -> list[bytes]:
    """Lower-cased words of `text`, cut at whitespace and punctuation other than ' and _."""
    low = text.lower()
    if not low.isascii():
        low = _WIDE_SPACE.sub(" ", low)
    return low.encode("utf-8", "surrogatepass").translate(_BYTE_SPLIT).split()


class Hasher:
    """Hashed n-gram ids of texts; thread-safe (the word cache is only added to or swapped)."""

    def __init__(self, spec: BagSpec | None = None):
        self.spec = spec or BagSpec()
        if self.spec.buckets & (self.spec.buckets - 1):
            raise ValueError(f"buckets must be a power of two, not {self.spec.buckets}")
        self._mask = np.uint64(self.spec.buckets - 1)
        self._cache: dict[bytes, int] = {}

    def clip(self, text: str) -> str:
        s = self.spec
        if len(text) <= s.head_chars + s.tail_chars:
            return text
        return text[: s.head_chars] + "\n" + text[-s.tail_chars :]

    def _hashes(self, ws: list[bytes]) -> np.ndarray:
        cache = self._cache
        hs = list(map(cache.get, ws))
        if None in hs:
            if len(cache) + len(ws) > _CACHE_SIZE:
                cache = self._cache = {}
            for j, (w, h) in enumerate(zip(ws, hs)):
                if h is None:
                    h = hs[j] = cache[w] = _NUM if w.isdigit() else zlib.crc32(w)
        return np.array(hs, np.uint64)

    def _mix(self, h: np.ndarray) -> np.ndarray:
        return ((h * _MIX) >> _SHIFT) & self._mask

    def unit_ids(
        self, text: str, tool_name: str | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """int64 ids of a unit: its own (unigrams, bigrams, tool name; repeats kept, as
        counts), and its first words as seen from the next unit ("prev") and from the
        previous one ("next")."""
        h = self._hashes(words(self.clip(text)))
        parts = [h ^ _SALT["uni"], ((h[:-1] * _MIX) ^ h[1:]) ^ _SALT["bi"]]
        if tool_name:
            parts.append(
                np.array([zlib.crc32(tool_name.lower().encode())], np.uint64) ^ _SALT["tool"]
            )
        head = h[: self.spec.neighbour_words]
        own = self._mix(np.concatenate(parts)).astype(np.int64)
        return (
            own,
            self._mix(head ^ _SALT["prev"]).astype(np.int64),
            self._mix(head ^ _SALT["next"]).astype(np.int64),
        )

    def batch_ids(
        self,
        texts: Sequence[str],
        tools: Sequence[str | None],
        prev: np.ndarray,
        nxt: np.ndarray,
    ) -> BagInputs:
        """Ids and weights of many units at once (dense left empty): unit i's own ids, then
        the first words of unit prev[i] and of unit nxt[i] (-1: none). Equal to
        `group_weights` over `unit_ids`, with the numpy work done once for all units."""
        n = len(texts)
        word_lists = [words(self.clip(t)) for t in texts]
        lengths = np.fromiter(map(len, word_lists), np.int64, n)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        flat_words: list[bytes] = [w for ws in word_lists for w in ws]
        h = self._hashes(flat_words)
        total = len(h)
        tool = np.array([zlib.crc32(t.lower().encode()) if t else 0 for t in tools], np.uint64)
        has_tool = np.array([bool(t) for t in tools], np.int64)
        source = self._mix(
            np.concatenate(
                [
                    h ^ _SALT["uni"],
                    ((h[:-1] * _MIX) ^ h[1:]) ^ _SALT["bi"],
                    tool ^ _SALT["tool"],
                    h ^ _SALT["prev"],
                    h ^ _SALT["next"],
                ]
            )
        ).astype(np.int64)
        bi0, tool0 = total, 2 * total - 1 if total else 0
        prev0, next0 = tool0 + n, tool0 + n + total
        head = np.minimum(lengths, self.spec.neighbour_words)
        has_p, has_n = prev >= 0, nxt >= 0
        p, q = np.where(has_p, prev, 0), np.where(has_n, nxt, 0)
        seg_start = np.stack(
            [starts, bi0 + starts, tool0 + np.arange(n), prev0 + starts[p], next0 + starts[q]], 1
        )
        own = lengths + np.maximum(lengths - 1, 0) + has_tool
        seg_len = np.stack(
            [
                lengths,
                np.maximum(lengths - 1, 0),
                has_tool,
                np.where(has_p, head[p], 0),
                np.where(has_n, head[q], 0),
            ],
            1,
        )
        inv = lambda k: np.where(k > 0, 1.0 / np.sqrt(np.maximum(k, 1)), 0.0)  # noqa: E731
        seg_w = np.stack([inv(own), inv(own), inv(own), inv(seg_len[:, 3]), inv(seg_len[:, 4])], 1)
        seg_start, seg_len, seg_w = seg_start.ravel(), seg_len.ravel(), seg_w.ravel()
        count = int(seg_len.sum())
        # Concatenated ranges [start, start + len) of every segment, unit by unit.
        first = np.concatenate([[0], np.cumsum(seg_len)[:-1]])
        idx = np.repeat(seg_start - first, seg_len) + np.arange(count)
        per_unit = seg_len.reshape(n, 5).sum(1)
        offsets = np.concatenate([[0], np.cumsum(per_unit)]).astype(np.int64)
        return BagInputs(
            source[idx] if count else np.zeros(0, np.int64),
            np.repeat(seg_w, seg_len).astype(np.float32),
            offsets,
            np.zeros((n, 0), np.float32),
        )


def group_weights(groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The ids of several groups concatenated, each id weighing 1/sqrt(its group's size)."""
    groups = [g for g in groups if len(g)]
    if not groups:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    w = [np.full(len(g), 1.0 / np.sqrt(len(g)), np.float32) for g in groups]
    return np.concatenate(groups), np.concatenate(w)


@dataclass
class BagInputs:
    """Model inputs of N units: the ids and weights of every unit, flat (unit i's are
    `[offsets[i]:offsets[i + 1]]`), and the dense matrix [N, 3F] (its hand features, then its
    previous and next unit's; zeros where there is none)."""

    ids: np.ndarray  # int64 [total]
    weights: np.ndarray  # float32 [total]
    offsets: np.ndarray  # int64 [N + 1]
    dense: np.ndarray  # float32 [N, 3F]

    @classmethod
    def from_lists(
        cls, ids: Sequence[np.ndarray], weights: Sequence[np.ndarray], dense: np.ndarray
    ) -> BagInputs:
        lengths = np.fromiter((len(i) for i in ids), np.int64, len(ids))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.concatenate(list(ids)) if len(ids) else np.zeros(0, np.int64)
        w = np.concatenate(list(weights)) if len(ids) else np.zeros(0, np.float32)
        return cls(flat.astype(np.int64), w.astype(np.float32), offsets, dense)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def subset(self, rows: np.ndarray) -> BagInputs:
        """The inputs of `rows`, in that order."""
        ids, w = self.padded(rows)
        keep = w != 0
        lengths = keep.sum(1)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return BagInputs(ids[keep], w[keep], offsets, self.dense[rows])

    def padded(self, rows: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """ids [n, longest] int64 and weights [n, longest] float32 of `rows`, right-padded with
        id 0 at weight 0."""
        rows = np.asarray(rows, np.int64)
        start = self.offsets[rows]
        lengths = self.offsets[rows + 1] - start
        width = max(1, int(lengths.max())) if len(rows) else 1
        col = np.arange(width)
        mask = col[None, :] < lengths[:, None]
        at = np.where(mask, start[:, None] + col[None, :], 0)
        if len(self.ids) == 0:
            return np.zeros(at.shape, np.int64), np.zeros(at.shape, np.float32)
        return np.where(mask, self.ids[at], 0), np.where(mask, self.weights[at], 0.0).astype(
            np.float32
        )


def concat_inputs(parts: Sequence[BagInputs]) -> BagInputs:
    """Several `BagInputs` one after another."""
    shift = np.cumsum([0] + [len(p.ids) for p in parts[:-1]])
    offsets = np.concatenate(
        [parts[0].offsets[:1]] + [p.offsets[1:] + s for p, s in zip(parts, shift)]
    )
    return BagInputs(
        np.concatenate([p.ids for p in parts]),
        np.concatenate([p.weights for p in parts]),
        offsets.astype(np.int64),
        np.concatenate([p.dense for p in parts]),
    )


__all__ = [
    "NGRAM_VERSION",
    "BagInputs",
    "BagSpec",
    "Hasher",
    "concat_inputs",
    "group_weights",
    "words",
]
