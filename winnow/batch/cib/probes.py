"""Probes of the context-intelligence benchmark: multi-hop questions, distractors and filler.

    probes = generate_probes(25, seed=0)           # offline, deterministic from the seed
    probes = load_probes("hotpot.jsonl")           # a user's own (schema below)
    text = filler_text(120, "probe-3:7", counter)  # irrelevant prose, exactly 120 tokens

Generated probes ask two- and three-hop questions over invented entities ("In which country
was the founder of Velt Dynamics born?"), with one supporting passage per hop. Their
distractors state the same relations about other invented entities with similar names
("Aldric Venmoor was born in Qastrel."), so they compete with the supporting facts without
ever contradicting them: no distractor names a gold entity. Filler is everyday prose with no
names and none of the relations.

A probe file is JSONL, one probe a line:

    {"id": "q1", "question": "...", "answer": "..." or ["...", ...],
     "supporting": ["passage", ...], "distractors": ["passage", ...]}

`id` is optional (default: the line number); `answer` may list aliases (scores take the best).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from winnow.serving.tokens import TokenCounter

# Bump when generation changes, so that a results file never mixes two generators' probes.
GENERATOR_VERSION = "cib-probes-1"

# relation: (subject type, object type, fact templates). Every template is one sentence.
RELATIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "born_in": ("person", "city", ("{s} was born in {o}.", "{s} was born in the city of {o}.")),
    "works_for": ("person", "company", ("{s} works for {o}.", "{s} is employed by {o}.")),
    "studied_at": ("person", "university", ("{s} studied at {o}.", "{s} graduated from {o}.")),
    "headquartered_in": (
        "company",
        "city",
        ("{s} is headquartered in {o}.", "The headquarters of {s} are in {o}."),
    ),
    "founded_by": ("company", "person", ("{s} was founded by {o}.", "{o} founded {s}.")),
    "located_in": ("city", "country", ("{s} is a city in {o}.", "{s} lies in {o}.")),
    "campus_in": (
        "university",
        "city",
        ("The campus of {s} is in {o}.", "{s} has its campus in {o}."),
    ),
}

# (relation path, question template about the path's first subject)
QUESTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("born_in", "located_in"), "In which country was {s} born?"),
    (("works_for", "headquartered_in"), "In which city is the employer of {s} headquartered?"),
    (("founded_by", "born_in"), "In which city was the founder of {s} born?"),
    (("studied_at", "campus_in"), "In which city did {s} go to university?"),
    (
        ("works_for", "headquartered_in", "located_in"),
        "In which country is the employer of {s} headquartered?",
    ),
    (("founded_by", "born_in", "located_in"), "In which country was the founder of {s} born?"),
    (("studied_at", "campus_in", "located_in"), "In which country did {s} go to university?"),
    (
        ("works_for", "founded_by", "born_in"),
        "In which city was the founder of {s}'s employer born?",
    ),
)

# Neutral sentences about an entity: they state none of the relations above.
_PADDING: dict[str, tuple[str, ...]] = {
    "person": (
        "{s} is fond of {hobby}.",
        "Colleagues describe {s} as {adj}.",
        "{s} has written {k} essays on {topic}.",
        "In interviews, {s} often talks about {topic}.",
        "Friends say that {s} spends most weekends on {hobby}.",
        "A profile published in {year} called {s} {adj}.",
    ),
    "company": (
        "{s} employs about {k} people.",
        "{s} is best known for its {product}.",
        "Last year {s} reported revenue growth of {p} percent.",
        "Analysts describe {s} as {adj}.",
        "In {year} {s} began selling {product} abroad.",
        "Customers mostly buy {s} products for their durability.",
    ),
    "city": (
        "{s} has a population of about {k}.",
        "{s} is known for its {feature}.",
        "The old market of {s} opens every {day}.",
        "Visitors to {s} often mention its {feature}.",
        "A festival of {topic} has been held in {s} since {year}.",
    ),
    "university": (
        "{s} enrolls about {k} students.",
        "{s} is known for its department of {topic}.",
        "The library of {s} holds {k} volumes.",
        "{s} opened its first laboratory in {year}.",
        "Students of {s} publish a weekly paper on {topic}.",
    ),
}
_WORDS = {
    "hobby": ("sailing", "chess", "birdwatching", "pottery", "long-distance running", "opera"),
    "adj": ("meticulous", "outspoken", "patient", "ambitious", "quietly stubborn", "generous"),
    "topic": ("river ecology", "medieval trade", "typography", "soil chemistry", "rail history"),
    "product": ("water pumps", "logistics software", "ceramic tiles", "bicycle frames", "sensors"),
    "feature": ("stone bridges", "night markets", "harbour", "clock tower", "botanical garden"),
    "day": ("Monday", "Wednesday", "Saturday", "morning", "spring"),
}

_ONSETS = tuple("b d f g h k l m n p r s t v z th br dr kr st qu sh tr gr".split())
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ai", "ou", "y")
_CODAS = ("", "", "n", "r", "l", "s", "th", "m", "x")
_SUFFIX = {
    "city": ("holm", "mar", "ra", "ton", "vik", "dor", "esh", "wick", "ora"),
    "country": ("ia", "land", "mark", "ovia", "istan", "ara"),
    "company": ("Dynamics", "Labs", "Works", "Systems", "Foods", "Freight", "Textiles"),
    "university": ("Institute", "College", "Academy", "Polytechnic"),
}
_NOUNS = frozenset(_SUFFIX["company"] + _SUFFIX["university"])


@dataclass(frozen=True)
class Probe:
    """One question with its gold answers, its supporting passages and its own distractors."""

    id: str
    question: str
    answers: tuple[str, ...]
    supporting: tuple[str, ...]
    distractors: tuple[str, ...] = ()
    hops: int | None = None
    relations: tuple[str, ...] = ()  # a generated probe's relation path...
    entities: tuple[str, ...] = ()  # ...and the entities along it, the answer last
    seed_key: str | None = field(default=None, repr=False)  # seeds its endless distractors

    def distractor_stream(self) -> Iterator[str]:
        """Its distractor passages, in order; a generated probe's never run out."""
        yield from self.distractors
        if self.seed_key is not None:
            yield from _distractors(self)


class ProbeFileError(ValueError):
    """A probe file that yields no usable probe."""


# --- names ----------------------------------------------------------------------------------


def _word(rng: random.Random, syllables: int) -> str:
    w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables))
    return (w + rng.choice(_CODAS)).capitalize()


def _name(rng: random.Random, kind: str) -> str:
    if kind == "person":
        return f"{_word(rng, 2)} {_word(rng, rng.choice((2, 3)))}"
    if kind in ("city", "country"):
        return _word(rng, 2) + rng.choice(_SUFFIX[kind])
    return f"{_word(rng, 2)} {rng.choice(_SUFFIX[kind])}"


def _similar(name: str, rng: random.Random) -> str:
    """A name one small edit away: a vowel or consonant changed, or a letter doubled."""
    words = name.split(" ")
    # company and university names end in a common noun: vary the invented word
    i = rng.choice([i for i, w in enumerate(words) if w not in _NOUNS])
    w = words[i]
    pos = rng.randrange(1, len(w))
    ch = w[pos]
    if ch in "aeiouy":
        new = rng.choice([v for v in "aeiou" if v != ch])
    elif rng.random() < 0.3:
        new = ch + ch
    else:
        new = rng.choice([c for c in "bdklmnrstvz" if c != ch])
    words[i] = w[:pos] + new + w[pos + 1 :]
    return " ".join(words)


class _Names:
    """Fresh names of a probe: never one already used, so no two entities share a name."""

    def __init__(self, rng: random.Random, taken: set[str] | None = None):
        self.rng = rng
        self.taken = taken if taken is not None else set()

    def fresh(self, kind: str) -> str:
        while True:
            n = _name(self.rng, kind)
            if n not in self.taken:
                self.taken.add(n)
                return n

    def like(self, name: str, kind: str) -> str:
        """A new name a few edits from `name`: one edit while those last, then more."""
        for edits in range(1, 5):
            for _ in range(10):
                n = name
                for _e in range(edits):
                    n = _similar(n, self.rng)
                if n not in self.taken and n != name:
                    self.taken.add(n)
                    return n
        return self.fresh(kind)  # the neighbourhood is used up: any new name


# --- passages -------------------------------------------------------------------------------


def _passage(rng: random.Random, relation: str, s: str, o: str) -> str:
    """The fact sentence among three or four neutral sentences about its subject."""
    kind = RELATIONS[relation][0]
    fact = rng.choice(RELATIONS[relation][2]).format(s=s, o=o)
    pads = rng.sample(_PADDING[kind], rng.choice((3, 4)))
    words = {k: rng.choice(v) for k, v in _WORDS.items()}
    sentences = [
        p.format(
            s=s,
            k=f"{rng.randrange(2, 90) * 100:,}",
            p=rng.randrange(2, 40),
            year=rng.randrange(1890, 2020),
            **words,
        )
        for p in pads
    ]
    sentences.insert(rng.randrange(len(sentences) + 1), fact)
    return " ".join(sentences)


def _chain(names: _Names, relations: tuple[str, ...], like: list[str] | None) -> list[str]:
    """Entities e0 -r1-> e1 -r2-> ...; with `like`, each one similar to its counterpart."""
    kinds = [RELATIONS[relations[0]][0]] + [RELATIONS[r][1] for r in relations]
    if like is None:
        return [names.fresh(k) for k in kinds]
    # most entities look like the gold ones; some are merely new, as in a real corpus
    return [
        names.like(g, k) if names.rng.random() < 0.8 else names.fresh(k)
        for g, k in zip(like, kinds)
    ]


def generate_probes(n: int, seed: int = 0) -> list[Probe]:
    """`n` probes, half two-hop and half three-hop; probe i depends only on (seed, i)."""
    return [_generate(seed, i) for i in range(n)]


def _generate(seed: int, index: int) -> Probe:
    key = f"{GENERATOR_VERSION}:{seed}:{index}"
    rng = random.Random(key)
    relations, template = QUESTIONS[index % len(QUESTIONS)]
    entities = _chain(_Names(rng), relations, None)
    supporting = tuple(
        _passage(rng, r, entities[h], entities[h + 1]) for h, r in enumerate(relations)
    )
    return Probe(
        id=f"gen-{seed}-{index}",
        question=template.format(s=entities[0]),
        answers=(entities[-1],),
        supporting=supporting,
        hops=len(relations),
        relations=relations,
        entities=tuple(entities),
        seed_key=key,
    )


def _distractors(probe: Probe) -> Iterator[str]:
    """Endless passages with the probe's relations about entities like (never equal to) its own,
    shuffled in blocks so that each bucket's context extends the one below it."""
    rng = random.Random(f"{probe.seed_key}:distractors")
    names = _Names(rng, taken=set(probe.entities))
    gold = list(probe.entities)
    while True:
        block = []
        for _ in range(8):
            chain = _chain(names, probe.relations, gold)
            block += [
                _passage(rng, r, chain[h], chain[h + 1]) for h, r in enumerate(probe.relations)
            ]
        rng.shuffle(block)
        yield from block


# --- filler ---------------------------------------------------------------------------------

_F_SUBJECTS = (
    "the kettle",
    "a good sourdough starter",
    "a houseplant",
    "the morning light",
    "a wool sweater",
    "fresh basil",
    "the garden path",
    "an old bicycle chain",
    "the bread dough",
    "a cast iron pan",
    "the winter coat",
    "a pot of lentils",
    "the kitchen window",
    "a paper lantern",
)
_F_PREDICATES = (
    "needs a little attention during the dry months",
    "should be rinsed with warm water after use",
    "keeps better in a cool and shaded corner",
    "tends to soften when the air turns humid",
    "looks different after a long rain",
    "is easier to handle once it has rested for an hour",
    "benefits from a thin coat of oil now and then",
    "can be left alone for most of the afternoon",
    "often lasts longer than people expect",
    "is best checked again before evening",
)
_F_CLAUSES = (
    "",
    "",
    ", although nobody agrees on why",
    " if the weather stays mild",
    ", which most people learn by trying",
    " when there is time for it",
    ", as the old advice goes",
)


def _filler_sentences(rng: random.Random) -> Iterator[str]:
    while True:
        s = f"{rng.choice(_F_SUBJECTS)} {rng.choice(_F_PREDICATES)}{rng.choice(_F_CLAUSES)}."
        yield s[0].upper() + s[1:]


def filler_text(tokens: int, key: str, counter: TokenCounter) -> str:
    """Irrelevant prose of exactly `tokens` tokens by `counter` (one fewer at worst), the same for
    the same key: whole sentences while they fit, then the next one's words while they fit.

    How many fit is estimated from each piece's own count (sentences repeat: cached), then
    checked on the text itself, one piece at a time from there: a count grows with the text,
    so this is the text of adding and counting one piece at a time, in a few counts."""
    rng = random.Random(f"{GENERATOR_VERSION}:filler:{key}")
    sentences = _filler_sentences(rng)
    made: list[str] = []

    def sentence(i: int) -> str:
        while len(made) <= i:
            made.append(next(sentences))
        return made[i]

    def fits(k: int) -> bool:
        return k == 0 or counter.count(" ".join(sentence(i) for i in range(k))) <= tokens

    k, used = 0, 0
    while True:  # the estimate: pieces counted alone, a leading space on all but the first
        used += counter.count(f" {sentence(k)}" if k else sentence(k))
        if used > tokens:
            break
        k += 1
    k = _settle(k, fits)
    text, words = " ".join(made[:k]), sentence(k).split(" ")

    def fits_words(w: int) -> bool:
        return (
            w == 0 or counter.count(" ".join([text, *words[:w]] if text else words[:w])) <= tokens
        )

    w, used = 0, counter.count(text) if text else 0
    while w < len(words):
        used += counter.count(f" {words[w]}" if text or w else words[w])
        if used > tokens:
            break
        w += 1
    w = _settle(w, fits_words, len(words))
    return " ".join([text, *words[:w]] if text else words[:w])


def _settle(k: int, fits: Callable[[int], bool], most: int | None = None) -> int:
    """The largest k with fits(k) and not fits(k + 1), walking from an estimate."""
    while k > 0 and not fits(k):
        k -= 1
    while (most is None or k < most) and fits(k + 1):
        k += 1
    return k


# --- probe files ----------------------------------------------------------------------------


def load_probes(path: str | Path, problems: list[str] | None = None) -> list[Probe]:
    """The valid probes of a JSONL file, in order; each bad line is reported (as 'FILE:LINE:
    why') in `problems`, and the good ones around it are kept. Raises ProbeFileError when none
    is valid."""
    path = Path(path)
    problems = problems if problems is not None else []
    probes: list[Probe] = []
    ids: set[str] = set()
    with path.open(encoding="utf-8-sig", errors="replace") as f:  # a BOM is no probe
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                probe = _parse(json.loads(line), lineno)
            except (ValueError, TypeError) as e:
                problems.append(f"{path}:{lineno}: {_short(e)}")
                continue
            except RecursionError:
                problems.append(f"{path}:{lineno}: JSON nested too deeply to read")
                continue
            if probe.id in ids:
                problems.append(f"{path}:{lineno}: duplicate id {probe.id!r}")
                continue
            ids.add(probe.id)
            probes.append(probe)
    if not probes:
        first = f" (first: {problems[0]})" if problems else ""
        raise ProbeFileError(f"{path}: no valid probe{first}")
    return probes


def _short(e: Exception) -> str:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return ("not JSON: " if isinstance(e, json.JSONDecodeError) else "") + msg[:200]


def _parse(rec: object, lineno: int) -> Probe:
    if not isinstance(rec, dict):
        raise ValueError("a probe must be a JSON object")
    question = rec.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("'question' must be a non-empty string")
    answer = rec.get("answer")
    answers = [answer] if isinstance(answer, str) else answer
    if (
        not isinstance(answers, list)
        or not answers
        or not all(isinstance(a, str) and a.strip() for a in answers)
    ):
        raise ValueError("'answer' must be a non-empty string or list of strings")
    supporting = _passages(rec, "supporting", required=True)
    distractors = _passages(rec, "distractors", required=False)
    pid = rec.get("id", f"line-{lineno}")
    if not isinstance(pid, (str, int)) or isinstance(pid, bool):
        raise ValueError("'id' must be a string or an integer")
    return Probe(
        id=str(pid),
        question=question.strip(),
        answers=tuple(answers),
        supporting=supporting,
        distractors=distractors,
    )


def _passages(rec: dict, key: str, required: bool) -> tuple[str, ...]:
    value = rec.get(key, None if required else [])
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
        raise ValueError(f"'{key}' must be a list of non-empty strings")
    if required and not value:
        raise ValueError(f"'{key}' must list at least one passage")
    return tuple(value)


# --- reading facts back (the loopback stand-in and the tests use it) -------------------------


def _pattern(template: str) -> re.Pattern[str]:
    name = r"[A-Z][\w'-]*(?: [A-Z][\w'-]*)*"
    parts = re.split(r"(\{s\}|\{o\})", template)
    rx = "".join(f"(?P<{p[1]}>{name})" if p in ("{s}", "{o}") else re.escape(p) for p in parts if p)
    return re.compile(rx)


FACT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (rel, _pattern(t)) for rel, (_s, _o, ts) in RELATIONS.items() for t in ts
)
QUESTION_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = tuple(
    (path, _pattern(t)) for path, t in QUESTIONS
)
_SENTENCE_END = re.compile(r"(?<=\.)\s+|\n+")


def read_facts(text: str) -> Iterator[tuple[str, str, str]]:
    """(relation, subject, object) for every sentence of `text` that states a relation."""
    for sentence in _SENTENCE_END.split(text):
        sentence = sentence.strip()
        for rel, rx in FACT_PATTERNS:
            m = rx.fullmatch(sentence)
            if m:
                yield rel, m["s"], m["o"]
                break


__all__ = [
    "FACT_PATTERNS",
    "GENERATOR_VERSION",
    "QUESTIONS",
    "QUESTION_PATTERNS",
    "RELATIONS",
    "Probe",
    "ProbeFileError",
    "filler_text",
    "generate_probes",
    "load_probes",
    "read_facts",
]
