"""Working-set relevance: how much each part of a conversation bears on what is asked now.

    tokens = distinctive_tokens("FAILED tests/test_auth.py::test_lockout")
    # {'FAILED', 'tests/test_auth.py', 'test_auth.py', 'test_auth', 'test_lockout'}
    r = relevance([doc_tokens, ...], seeds={len(docs) - 1: 1.0}, hops=2, decay=0.5)

A document (a unit, or a tool call with its result) is relevant when it shares distinctive
tokens (paths and file names, identifiers in snake_case, camelCase or kebab-case, dotted
names, numbers, names of things: "Krystum Voufihae") with the seeds (the latest user message,
the last steps), each token weighed by its rarity in the conversation (a token most documents
hold tells nothing; one in every tenth or more is left out). Relevance then flows a hop or two:
a document that shares rare tokens with a relevant one is relevant too, by `decay` per hop (the
second passage of a two-hop question names what the first one names; an agent's chain of
reads and edits names the same files). Linear in the text: one scan for tokens, and each hop
one pass over an inverted index of the rare tokens (no pairs of documents are compared).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

# One run of word characters and the punctuation paths and dotted names hold. Possessive: a
# run is matched once, from its first character (linear on any text).
_WORD = re.compile(r"[\w$@][\w$@.\-/\\]*+")
# The ASCII characters no run holds, as spaces: on ASCII text the runs are the chunks between
# them, each from its first word character, `$` or `@` (see _words).
_GAPS = {c: " " for c in range(128) if not re.fullmatch(r"[\w$@.\-/\\]", chr(c))}
# A name of two or three capitalized words ("Gedrys Labs", "Krystum Voufihae"): the pair is far
# rarer than either word.
# Written to start with a character class (the word boundary checked behind it) so that the
# regex engine skips to capitals: 3x faster than `\b[A-Z]...` on the bench_compress_speed
# session (7 vs 20 ms), the same matches.
_NAME = re.compile(r"[A-Z](?<!\w[A-Z])[a-z]{2,}+(?: [A-Z][a-z]{2,}+){1,2}+\b")
_CAMEL = re.compile(r"[a-z][A-Z]")
_TRAILING = ".-/\\:"

# Words that are capitalized for being first in a sentence or a heading, not for naming a thing.
STOPWORDS = frozenset(
    """a about above after again all also an and any are as at be because been before being
    below between both but by can could did do does doing done down during each else every
    few for from further had has have having he her here hers him his how however i if in
    into is it its just let like may me might more most much must my need no nor not now of
    off on once only or other our out over own please same she should since so some still such
    than that the their them then there these they this those through thus to too under until
    up upon very was we were what when where whether which while who whom why will with would
    yes yet you your okay ok sure great good done next first last new now note see use using
    check run running let's i'll i'm i've we'll it's that's there's here's""".split()
)


def word_tokens(word: str) -> tuple[str, ...]:
    """The distinctive tokens one word of text stands for (none for a common word)."""
    if word.islower() and word.isalpha():  # most words of prose and code: nothing below fits
        return ()
    w = word.rstrip(_TRAILING)
    if len(w) < 3:
        return ()
    out: list[str] = []
    if "/" in w or "\\" in w:  # a path: itself and its file name
        path = w.replace("\\", "/").lstrip("./")
        if path.count("/") or len(path) >= 4:
            out.append(path)
        base = path.rsplit("/", 1)[-1]
        if base != path:
            out.extend(word_tokens(base))
        return tuple(out)
    if w.isdigit():  # a number: a port, a count, a year, an issue
        return (w,) if len(w) >= 3 else ()
    letters = any(map(str.isalpha, w))
    if not letters:
        return ()
    shaped = (
        "_" in w
        or "." in w
        or "-" in w
        or any(map(str.isdigit, w))
        or _CAMEL.search(w) is not None
        or (w.isupper() and len(w) >= 3)
    )
    if shaped:
        out.append(w)
        if "." in w:  # a dotted name: its last part too (`foo.bar.parse_args`)
            head, tail = w.rsplit(".", 1)
            if len(tail) >= 3 and ("_" in tail or _CAMEL.search(tail)):
                out.append(tail)
            elif tail.isalnum() and len(tail) <= 4 and "." not in head:
                out.extend(word_tokens(head))  # a file: its stem when that is distinctive
        return tuple(out)
    if w[0].isupper() and w[1:].islower() and len(w) >= 4 and w.lower() not in STOPWORDS:
        return (w,)  # a name (a common word that opens a sentence is common in the session)
    return ()


def name_tokens(name: str) -> tuple[str, ...]:
    """A run of capitalized words as names: each adjacent pair, and the three together
    ("The" and other common words that open it left out)."""
    words = name.split(" ")
    while words and words[0].lower() in STOPWORDS:
        words.pop(0)
    while words and words[-1].lower() in STOPWORDS:
        words.pop()
    pairs = tuple(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))
    return pairs + ((" ".join(words),) if len(words) == 3 else ())


def _words(text: str) -> set[str]:
    """`set(_WORD.findall(text))`; on ASCII text (about half of a session's) by `translate`
    and `split`, 1.5x as fast as the regex's scan (scripts/bench_compress_speed.py session)."""
    if not text.isascii():
        return set(_WORD.findall(text))
    out = {chunk.lstrip(".-/\\") for chunk in text.translate(_GAPS).split()}
    out.discard("")
    return out


def _chunks(text: str) -> set[str]:
    """The runs of `text` as `_words` finds them, on ASCII text before their leading `.-/\\`
    are stripped (the caller strips the few it has not seen before)."""
    if not text.isascii():
        return set(_WORD.findall(text))
    return set(text.translate(_GAPS).split())


class TokenCache:
    """Distinctive tokens per text and per word, memoized (bounded): a conversation compressed
    again and again as it grows is scanned once per new text."""

    def __init__(self, max_texts: int = 65536, max_words: int = 262144):
        self.max_texts, self.max_words = max_texts, max_words
        self._texts: dict[str, frozenset[str]] = {}
        # each run of a text seen (a word, or an ASCII run before stripping), and those of
        # them that stand for distinctive tokens: most runs are common words, and the set
        # difference and intersection in C leave only the new and the distinctive ones to
        # Python's loop (a first scan of the scripts/bench_compress_speed.py session: 444
        # vs 500 million instructions, counted by valgrind's callgrind)
        self._seen: set[str] = set()
        self._words: dict[str, tuple[str, ...]] = {}

    def tokens(self, text: str, remember: bool = True) -> frozenset[str]:
        found = self._texts.get(text)
        if found is not None:
            return found
        runs = _chunks(text)
        new = runs - self._seen
        if new:
            if len(self._seen) + len(new) > self.max_words:
                self._seen.clear()
                self._words.clear()
                new = runs
            words = self._words
            for run in new:
                toks = word_tokens(run.lstrip(".-/\\"))
                if toks:
                    words[run] = toks
            self._seen |= new
        out: set[str] = set()
        words = self._words
        for run in runs & words.keys():
            out.update(words[run])
        for name in _NAME.findall(text):
            out.update(name_tokens(name))
        found = frozenset(out)
        if not remember:
            return found
        if len(self._texts) >= self.max_texts:
            self._texts.clear()
        self._texts[text] = found
        return found


_CACHE = TokenCache()


def distinctive_tokens(text: str, remember: bool = True) -> frozenset[str]:
    """The distinctive tokens of a text (see the module docstring); `remember=False` for a
    text met once (a line of a unit), which would only push units' texts out of the cache."""
    return _CACHE.tokens(text, remember)


def relevance(
    docs: Sequence[frozenset[str]],
    seeds: Mapping[int, float],
    *,
    hops: int = 2,
    decay: float = 0.5,
    max_df: float = 0.1,
    scale: float = 1.0,
) -> list[float]:
    """Each document's relevance to the seeds, in [0, 1].

    `docs` are token sets; `seeds` maps a document to its weight (the latest user message 1.0).
    Hop k: a document's score is the sum, over its rare tokens, of the token's weight (its
    rarity: 1 for a token two documents hold, less the more hold it) times the highest
    relevance of another document of hop k-1 that holds it; relevance 1 - exp(-score / scale).
    A document's relevance is its best over the hops, hop k's times `decay` ** (k - 1). A
    token is rare when at most `max_df` of the documents (and at least 3) hold it."""
    n = len(docs)
    out = [0.0] * n
    if n < 2 or not seeds or hops < 1:
        return out
    df: dict[str, int] = {}
    for toks in docs:
        for t in toks:
            df[t] = df.get(t, 0) + 1
    cap = max(3, int(max_df * n))
    norm = math.log1p(n / 2)
    weight = {t: math.log1p(n / c) / norm for t, c in df.items() if 2 <= c <= cap}
    postings: dict[str, list[int]] = {t: [] for t in weight}
    for i, toks in enumerate(docs):
        for t in toks:
            p = postings.get(t)
            if p is not None:
                p.append(i)
    level: dict[int, float] = {i: w for i, w in seeds.items() if w > 0 and 0 <= i < n}
    factor = 1.0
    for _hop in range(hops):
        # the best and second best relevance of a document holding each token (the second
        # for the best one itself: a document is not relevant by its own tokens)
        best: dict[str, tuple[float, int, float]] = {}
        for j, h in level.items():
            for t in docs[j]:
                if t not in weight:
                    continue
                b = best.get(t)
                if b is None:
                    best[t] = (h, j, 0.0)
                elif h > b[0]:
                    best[t] = (h, j, b[0])
                elif h > b[2]:
                    best[t] = (b[0], b[1], h)
        # each document's terms, summed exactly (math.fsum): the tokens come in the order of a
        # set's, which changes with the process's string hashing (PYTHONHASHSEED), and a sum
        # in that order could differ in its last bit from run to run, and so a choice made on it
        terms: dict[int, list[float]] = {}
        for t, (h1, j1, h2) in best.items():
            w = weight[t]
            for i in postings[t]:
                h = h2 if i == j1 else h1
                if h > 0:
                    terms.setdefault(i, []).append(w * h)
        level = {}
        for i, parts in terms.items():
            h = 1.0 - math.exp(-math.fsum(parts) / scale)
            if h * factor > out[i]:
                out[i] = h * factor
            if h >= 0.05:  # what is hardly relevant passes on nothing worth the pass
                level[i] = h
        factor *= decay
        if not level:
            break
    return out


__all__ = [
    "STOPWORDS",
    "TokenCache",
    "distinctive_tokens",
    "name_tokens",
    "relevance",
    "word_tokens",
]
