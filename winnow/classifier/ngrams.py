"""Hashed word n-grams of a unit and its neighbours: the text input of the n-gram classifier.

Torch-free (numpy and the standard library): training and serving call the very same code.

A unit becomes a bag of hashed ids in `BagSpec.buckets` rows of one embedding table:

- its own text (head and tail when long), lower-cased, cut at whitespace and punctuation,
  digits folded to one token: word unigrams and bigrams;
- its tool name, as one token;
- the first `neighbour_words` words of the previous unit and of the next one, each salted by
  its side, so that "Let me run the tests" before a tool call and a question before a short
  user reply weigh on the unit itself. The next unit is left out in online mode (live use).

Version 2 (opt-in: `BagSpec(version=2)`; a model records its version and is hashed that
way) is meant to make the words carry over to projects and agents never seen:

- a harness header the text opens with (Codex's exec header, aider's thinking marker) is
  left out, and the exit code it states becomes a cue;
- typographic quotes fold to ASCII (Codex writes "I’m", Claude "I'm"); a URL is one word, a
  path one word and its file extension; a word that names rather than says folds to its
  shape (`shape`: a number with a unit, a hex id, a long id);
- cues, one group of their own (`cues`): the exit code a text states, whether it opens
  with a markup tag (a harness's wrapper), and for prose (`is_prose`) whether a sentence
  announces the next step (first, later, last sentence), says what was done, or reaches a
  finding (TAXONOMY.md: a text that only announces the next step is status, one that
  reaches a conclusion is decision), and its number of sentences.

Each group of ids weighs 1/sqrt(its size), so a long unit does not drown its neighbours.
Hashes are crc32 of the word's UTF-8 bytes (stable across processes, unlike `hash`), mixed
by one 64-bit multiply; a word's hash is cached, so a session's repeated words cost a dict
lookup.
"""

from __future__ import annotations

import functools
import re
import string
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

# The version a new model hashes by default, and the versions this module hashes (a model
# records its own, BagSpec.version). Version 2 is opt-in (`BagSpec(version=2)`, the
# `ngram-v2` recipe of `winnow evaluate --by-source`): docs/classifier.md has its figures.
NGRAM_VERSION = 1
NGRAM_VERSIONS = (1, 2)

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
    "cue": np.uint64(0xC0E5),
}
_NUM = zlib.crc32(b"<num>")
# Words remembered (bytes -> crc32); a full cache starts afresh.
_CACHE_SIZE = 1 << 17

# --- version 2 -------------------------------------------------------------------------------
# A harness's header before a tool's output, said the same way in every call: it names the
# harness, not the output. Anchored; each run is bounded by the literal after it: linear.
_HARNESS = re.compile(
    r"(?:Chunk ID: \w+\n)?Wall time: [\d.]+ seconds\n"
    r"Process (?:exited with code (-?\d+)|running with session ID \d+)\n"
    r"(?:Original token count: \d+\n)?Output:\n?"
    r"|<thinking-content-[0-9a-f]+>\s*"
)
# "exit code 1", "exited with code 0", "exit status: 2", "returncode=0", "exit_code": 1
_EXIT = re.compile(r"(?:exit(?:ed with)?[ _](?:code|status)|returncode)\W{0,3}(-?\d+)")
# Two slashes in one white-space token (a path a/b/c, a URL): only such a text is re-cut into
# tokens. Possessive, so a match starts at a slash and reads to the next one: linear.
_TWO_SLASHES = re.compile(r"[/\\][^\s/\\]*+[/\\]")
# What ends a path's file name: "hooks.go:266", "(src/a.py)", "`a/b.ts`,".
_PATH_TAIL = "0123456789:;,.)]}>'\"`!?"
_DIGIT = re.compile(rb"[0-9]")
_HEX = frozenset(b"0123456789abcdef")
# Sentence openings (lower-cased, quotes folded): the agent announces what it does next ...
_ANNOUNCE = (
    "let me ", "let's ", "i'll ", "i will ", "i'm going to ", "i am going to ", "i need to ",
    "i should ", "i want to ", "now ", "next", "first", "then ", "moving on", "going to ",
    "checking ", "looking ", "running ", "reading ", "searching ", "i'm now ", "i'm also ",
)  # fmt: skip
# ... or says what it did ...
_DID = (
    "i've ", "i have ", "i added", "i fixed", "i updated", "i changed", "i found", "i made",
    "i removed", "i created", "i implemented", "i ran ", "i checked", "i verified",
    "i confirmed", "done", "fixed", "updated", "added", "removed", "pushed", "committed",
)  # fmt: skip
# ... or reaches a conclusion (anywhere in the text).
_FINDINGS = (
    "because", "the cause", "the bug is", "the issue is", "the problem is", "the fix is",
    "so the fix", "this means", "which means", "the reason", "turns out", "that's why",
    "the culprit", "instead of", "the right ", "should be", "is caused", "is due to",
)  # fmt: skip
# Sentences looked at for an announcement: the first ones and the last (a long text is
# code or a list, not a progress note).
_MAX_SENTENCES = 24
_PROSE_HEAD, _PROSE_TAIL = 600, 200
CUE_WORDS = (
    b"exit=0", b"exit!=0", b"announce_first", b"announce_later", b"announce_last", b"did",
    b"finding", b"tag", b"sentences=1", b"sentences=2", b"sentences=3", b"sentences=5",
)  # fmt: skip
# A text that opens with a markup tag: what a harness injects (<environment_context>,
# <system-reminder>, <skills_instructions>) rather than what a person or the agent writes.
_TAG = re.compile(r"\s*<[a-z][\w:.-]{0,40}[\s/>]")
_CUE_CRC = {c: zlib.crc32(b"\x01" + c) for c in CUE_WORDS}


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


def words(text: str, version: int = NGRAM_VERSION) -> list[bytes]:
    """Lower-cased words of `text`, cut at whitespace and punctuation other than ' and _. From
    version 2, typographic quotes are ASCII, a URL is the word "zzurl" and a path "zzpath"
    and its file extension."""
    low = text.lower()
    if not low.isascii():
        low = _WIDE_SPACE.sub(" ", ascii_quotes(low) if version >= 2 else low)
    if version >= 2 and ("/" in low or "\\" in low) and _TWO_SLASHES.search(low):
        low = " ".join([_path_cached(t) if "/" in t or "\\" in t else t for t in low.split()])
    return low.encode("utf-8", "surrogatepass").translate(_BYTE_SPLIT).split()


def ascii_quotes(text: str) -> str:
    """Typographic quotes as ASCII: Codex writes "I’m", Claude "I'm". (str.replace, not
    str.translate: a translate table costs ~0.3 us per character of a non-ASCII text.)"""
    if "\u2019" in text or "\u2018" in text:
        text = text.replace("\u2019", "'").replace("\u2018", "'")
    if "\u201c" in text or "\u201d" in text:
        text = text.replace("\u201c", '"').replace("\u201d", '"')
    return text


def _path_word(token: str) -> str:
    """A white-space token with a slash: "zzurl" for a URL, "zzpath" and its file extension
    for a path of three parts or more (a/b/c, C:\\x\\y), else the token itself."""
    if "://" in token:
        return "zzurl"
    if token.count("/") + token.count("\\") < 2:
        return token
    name = token.rstrip(_PATH_TAIL)
    name = name[max(name.rfind("/"), name.rfind("\\")) + 1 :]
    dot = name.rfind(".")
    ext = name[dot + 1 :] if dot >= 0 else ""
    return f"zzpath {ext}" if ext.isalnum() and len(ext) <= 8 else "zzpath"


# A session names the same files again and again.
_path_cached = functools.lru_cache(maxsize=1 << 14)(_path_word)


def shape(word: bytes) -> bytes:
    """A word as version 2 hashes it: itself, or its shape when it names rather than says:
    "<num>" (digits), "<numx>" (a number with a unit: 30s, 8kb), "<hex>" (6+ hex digits with
    a digit: a commit, an id), "<id>" (8+ characters with a digit), "<long>" (over 24)."""
    if len(word) > 24:
        return b"<long>"
    if _DIGIT.search(word) is None:
        return word
    if word.isdigit():
        return b"<num>"
    if len(word) >= 6 and _HEX.issuperset(word):
        return b"<hex>"
    if word[:1].isdigit():
        return b"<numx>"
    return b"<id>" if len(word) >= 8 else word


def split_harness(text: str) -> tuple[str, int | None]:
    """`text` without a harness header it opens with, and the exit code the header states
    (None: no header, or none stated)."""
    if not text.startswith(("Chunk ID: ", "Wall time: ", "<thinking-content-")):
        return text, None
    m = _HARNESS.match(text)
    if m is None:
        return text, None
    return text[m.end() :], None if m.group(1) is None else int(m.group(1))


def cues(text: str, code: int | None = None, prose: bool = True) -> list[bytes]:
    """The version 2 cues of a (clipped, harness-free) text: "exit=0" / "exit!=0" (`code`, the
    exit code its header stated, else the first one the text states), "tag" (it opens with a
    markup tag: a harness's wrapper) and, for `prose`,
    "announce_first" / "announce_later" / "announce_last" (a sentence opens by announcing the
    next step: "Let me", "I'll", "I'm checking", "Next,"), "did" (one says what was done),
    "finding" (the text reaches a conclusion: "because", "the cause", "so the fix") and
    "sentences=N" (1, 2, 3-4, 5+)."""
    low = text.lower()
    if not low.isascii():
        low = ascii_quotes(low)
    out: list[bytes] = []
    if code is None and ("exit" in low or "returncode" in low):
        m = _EXIT.search(low)
        code = None if m is None else int(m.group(1))
    if code is not None:
        out.append(b"exit=0" if code == 0 else b"exit!=0")
    if _TAG.match(low) is not None:
        out.append(b"tag")
    if not prose:
        return out
    if len(low) > _PROSE_HEAD + _PROSE_TAIL:  # a progress note is short; a long text's ends
        low = low[:_PROSE_HEAD] + "\n" + low[-_PROSE_TAIL:]
    # Sentences end at . ! ? : and white space, or at a line break (str methods: C speed).
    cut = low.replace("\n", ". ").replace("! ", ". ").replace("? ", ". ").replace(": ", ". ")
    sentences = [t for t in (t.lstrip("-*#>` \t") for t in cut.split(". ")) if t]
    last = len(sentences) - 1
    seen = set()
    for j in (*range(min(last, _MAX_SENTENCES)), last) if last >= 0 else ():
        t = sentences[j]
        if t.startswith(_ANNOUNCE) or _progressive(t):
            seen.add(b"announce_first" if j == 0 else b"announce_later")
            if j == last and j:
                seen.add(b"announce_last")
        elif t.startswith(_DID):
            seen.add(b"did")
    if any(f in low for f in _FINDINGS):
        seen.add(b"finding")
    n = len(sentences)
    if n:
        seen.add(b"sentences=%d" % (1 if n == 1 else 2 if n == 2 else 3 if n <= 4 else 5))
    return out + sorted(seen)


def is_prose(role: str | None, kind: str | None) -> bool:
    """Whether a unit's text is someone's prose (its sentences get `cues`): not a tool's
    output, not a tool call's arguments."""
    return role != "tool" and kind not in ("tool_call", "tool_result")


def _progressive(sentence: str) -> bool:
    """Opens in the first person present progressive: "i'm adding", "i am checking"."""
    if sentence.startswith("i'm "):
        rest = sentence[4:]
    elif sentence.startswith("i am "):
        rest = sentence[5:]
    else:
        return False
    return rest.split(" ", 1)[0].endswith("ing")


class Hasher:
    """Hashed n-gram ids of texts; thread-safe (the word cache is only added to or swapped)."""

    def __init__(self, spec: BagSpec | None = None):
        self.spec = spec or BagSpec()
        if self.spec.buckets & (self.spec.buckets - 1):
            raise ValueError(f"buckets must be a power of two, not {self.spec.buckets}")
        if self.spec.version not in NGRAM_VERSIONS:
            raise ValueError(
                f"n-gram spec v{self.spec.version}: this winnow hashes "
                f"v{', v'.join(map(str, NGRAM_VERSIONS))}"
            )
        self.version = self.spec.version
        self._mask = np.uint64(self.spec.buckets - 1)
        self._cache: dict[bytes, int] = {}

    def clip(self, text: str) -> str:
        """The text hashed: its head and tail when long (from version 2, without a harness
        header)."""
        if self.version >= 2:
            text = split_harness(text)[0]
        return self._cut(text)

    def _cut(self, text: str) -> str:
        s = self.spec
        if len(text) <= s.head_chars + s.tail_chars:
            return text
        return text[: s.head_chars] + "\n" + text[-s.tail_chars :]

    def cue_ids(self, text: str, prose: bool = True) -> np.ndarray:
        """int64 ids of a unit's `cues` (version 2; none before); `prose`: see `is_prose`."""
        if self.version < 2:
            return np.zeros(0, np.int64)
        return self._mix(self._cue_hashes(text, prose) ^ _SALT["cue"]).astype(np.int64)

    def _cue_hashes(self, text: str, prose: bool) -> np.ndarray:
        body, code = split_harness(text)
        found = cues(self._cut(body), code, prose)
        return np.array([_CUE_CRC[c] for c in found], np.uint64)

    def _hashes(self, ws: list[bytes]) -> np.ndarray:
        cache = self._cache
        hs = list(map(cache.get, ws))
        if None in hs:
            if len(cache) + len(ws) > _CACHE_SIZE:
                cache = self._cache = {}
            v2 = self.version >= 2
            for j, (w, h) in enumerate(zip(ws, hs)):
                if h is None:
                    h = hs[j] = cache[w] = (
                        zlib.crc32(shape(w)) if v2 else _NUM if w.isdigit() else zlib.crc32(w)
                    )
        return np.array(hs, np.uint64)

    def _mix(self, h: np.ndarray) -> np.ndarray:
        return ((h * _MIX) >> _SHIFT) & self._mask

    def unit_ids(
        self, text: str, tool_name: str | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """int64 ids of a unit: its own (unigrams, bigrams, tool name; repeats kept, as
        counts), and its first words as seen from the next unit ("prev") and from the
        previous one ("next")."""
        h = self._hashes(words(self.clip(text), self.version))
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
        prose: Sequence[bool] | None = None,
    ) -> BagInputs:
        """Ids and weights of many units at once (dense left empty): unit i's own ids, the
        first words of unit prev[i] and of unit nxt[i] (-1: none), then its cues (`prose`:
        whether each unit is prose, for `cue_ids`; default all). Equal to `group_weights` over `unit_ids` and
        `cue_ids`, with the numpy work done once for all units."""
        n = len(texts)
        word_lists = [words(self.clip(t), self.version) for t in texts]
        if self.version >= 2:
            cue_lists = [
                self._cue_hashes(t, prose[i] if prose is not None else True)
                for i, t in enumerate(texts)
            ]
        else:
            cue_lists = [np.zeros(0, np.uint64)] * n
        cue_len = np.fromiter(map(len, cue_lists), np.int64, n)
        cue_starts = np.concatenate([[0], np.cumsum(cue_len)[:-1]]).astype(np.int64)
        cue_h = np.concatenate(cue_lists) if n else np.zeros(0, np.uint64)
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
                    cue_h.astype(np.uint64) ^ _SALT["cue"],
                ]
            )
        ).astype(np.int64)
        bi0, tool0 = total, 2 * total - 1 if total else 0
        prev0, next0 = tool0 + n, tool0 + n + total
        cue0 = next0 + total
        head = np.minimum(lengths, self.spec.neighbour_words)
        has_p, has_n = prev >= 0, nxt >= 0
        p, q = np.where(has_p, prev, 0), np.where(has_n, nxt, 0)
        seg_start = np.stack(
            [
                starts,
                bi0 + starts,
                tool0 + np.arange(n),
                prev0 + starts[p],
                next0 + starts[q],
                cue0 + cue_starts,
            ],
            1,
        )
        own = lengths + np.maximum(lengths - 1, 0) + has_tool
        seg_len = np.stack(
            [
                lengths,
                np.maximum(lengths - 1, 0),
                has_tool,
                np.where(has_p, head[p], 0),
                np.where(has_n, head[q], 0),
                cue_len,
            ],
            1,
        )
        inv = lambda k: np.where(k > 0, 1.0 / np.sqrt(np.maximum(k, 1)), 0.0)  # noqa: E731
        seg_w = np.stack(
            [inv(own), inv(own), inv(own), inv(seg_len[:, 3]), inv(seg_len[:, 4]), inv(cue_len)],
            1,
        )
        seg_start, seg_len, seg_w = seg_start.ravel(), seg_len.ravel(), seg_w.ravel()
        count = int(seg_len.sum())
        # Concatenated ranges [start, start + len) of every segment, unit by unit.
        first = np.concatenate([[0], np.cumsum(seg_len)[:-1]])
        idx = np.repeat(seg_start - first, seg_len) + np.arange(count)
        per_unit = seg_len.reshape(n, 6).sum(1)
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
    "NGRAM_VERSIONS",
    "BagInputs",
    "BagSpec",
    "Hasher",
    "concat_inputs",
    "cues",
    "group_weights",
    "is_prose",
    "shape",
    "split_harness",
    "words",
]
