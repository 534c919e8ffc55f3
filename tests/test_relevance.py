"""Working-set relevance: distinctive tokens, rarity, hops, and linear time on hostile text."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as hs

from winnow.serving.relevance import _WORD, TokenCache, _words, distinctive_tokens, relevance


def test_distinctive_tokens_are_paths_identifiers_numbers_and_names():
    toks = distinctive_tokens(
        "FAILED tests/test_auth.py::test_lockout on port 8080 in parseConfig; "
        "ask Krystum Voufihae at Gedrys Labs."
    )
    for t in ("tests/test_auth.py", "test_auth.py", "test_lockout", "8080", "parseConfig"):
        assert t in toks
    assert "Krystum Voufihae" in toks and "Gedrys Labs" in toks
    # common words, short numbers and sentence openers that are stopwords tell nothing
    assert not {"the", "on", "in", "ask", "at", "The", "42"} & distinctive_tokens(
        "The test ran on 42 files in the tree, ask at once."
    )


def test_a_name_starts_at_a_word_boundary():
    assert "Gedrys Labs" in TokenCache().tokens("Gedrys Labs shipped it")  # at the very start
    assert "Gedrys Labs" in TokenCache().tokens("(Gedrys Labs) shipped it")
    assert "Gedrys Labs" not in TokenCache().tokens("xGedrys Labs shipped it")
    assert "Gedrys Labs" not in TokenCache().tokens("_Gedrys Labs shipped it")


def test_a_dotted_name_gives_its_last_part_and_a_windows_path_its_file():
    toks = distinctive_tokens(r"see winnow.serving.parse_limit and C:\src\app\main_loop.py")
    assert "winnow.serving.parse_limit" in toks and "parse_limit" in toks
    assert "main_loop.py" in toks


def docs(*texts: str) -> list[frozenset[str]]:
    return [distinctive_tokens(t) for t in texts]


def test_a_document_sharing_a_rare_token_with_the_seed_is_relevant_and_others_are_not():
    d = docs(
        "Edited src/billing/invoice_total.py",
        "Read docs/changelog.md",
        "ran the linter, all clean",
        "Why does invoice_total round down?",
    )
    r = relevance(d, {3: 1.0})
    assert r[0] > 0.3
    assert r[1] == 0.0 and r[2] == 0.0


def test_a_token_most_documents_hold_tells_nothing():
    common = "the session_id is S123"
    d = docs(*[f"{common} step {i}" for i in range(40)], "fix parse_args", "where is parse_args")
    r = relevance(d, {41: 1.0})
    assert r[40] > 0.3
    assert max(r[:40]) == 0.0  # session_id / S123 are in every document


def test_relevance_flows_a_hop_at_decay_and_stops_at_hops():
    d = docs(
        "Krystum Voufihae founded Gedrys Labs.",  # 0: two hops from the question
        "Gedrys Labs sells quantum_widget parts.",  # 1: one hop
        "unrelated text about weather_station",  # 2
        "Who founded the maker of quantum_widget?",  # 3: the seed
    )
    one = relevance(d, {3: 1.0}, hops=1)
    two = relevance(d, {3: 1.0}, hops=2, decay=0.5)
    assert one[1] > 0 and one[0] == 0.0
    assert 0 < two[0] <= 0.5  # a second hop counts at `decay`
    assert two[1] == one[1]
    assert two[2] == 0.0
    assert relevance(d, {3: 1.0}, hops=0) == [0.0] * 4


def test_a_document_is_not_relevant_by_its_own_tokens():
    d = docs("only_here_token and shared_token", "shared_token again", "nothing")
    r = relevance(d, {0: 1.0}, hops=1)
    assert r[0] == 0.0 and r[1] > 0


def test_linear_on_hostile_megabyte_input():
    cache = TokenCache()
    hostile = [
        "a/" * 500_000,  # one megabyte-long path
        "Abc " * 250_000,  # a megabyte of capitalized words
        "x" * 1_000_000 + "!",
        "." * 1_000_000,
        "\n" * 1_000_000,
        " ".join(f"tok_{i}" for i in range(120_000)),  # a megabyte of distinct identifiers
    ]
    small = [h[: len(h) // 8] for h in hostile]
    t = time.perf_counter()
    for h in small:
        TokenCache().tokens(h)
    t_small = time.perf_counter() - t
    t = time.perf_counter()
    toks = [cache.tokens(h) for h in hostile]
    t_big = time.perf_counter() - t
    assert t_big < 8 * t_small * 3 + 0.5  # eight times the text, about eight times the time
    r = relevance(toks + [frozenset({"tok_7"})], {len(toks): 1.0})
    assert r[5] > 0
    # many documents: the inverted index, not pairs of documents
    many = [frozenset({f"id_{i}", f"id_{i + 1}"}) for i in range(50_000)]
    t = time.perf_counter()
    relevance(many, {0: 1.0}, hops=3)
    assert time.perf_counter() - t < 2.0


class Ordered(frozenset):
    """A token set that iterates in a given order (a set's order follows the process's string
    hashing, PYTHONHASHSEED: it differs from run to run)."""

    def __new__(cls, tokens: list[str]):
        out = super().__new__(cls, tokens)
        out.order = list(tokens)
        return out

    def __iter__(self):
        return iter(self.order)


def test_relevance_does_not_depend_on_the_order_a_set_iterates_in():
    # 200 documents; token k is held by the first k + 2 and by the seed (the last): the first
    # documents' scores are sums of terms of many weights, the same in whatever order they come
    n, m = 200, 19
    tokens = [f"tok_{k}" for k in range(m)]
    base = [[t for k, t in enumerate(tokens) if d < k + 2] for d in range(n - 1)]
    results = set()
    for shift in range(m):
        seed = Ordered(tokens[shift:] + tokens[:shift])
        r = relevance([*map(Ordered, base), seed], {n - 1: 1.0}, hops=2, decay=0.5)
        results.add(tuple(r))
    assert len(results) == 1


@settings(max_examples=300, deadline=None)
@given(hs.text(alphabet=hs.sampled_from(list("aZ9_$@.-/\\ \t\n\x1c:;,'\"()é→")), max_size=60))
def test_the_runs_of_a_text_are_the_regex_runs(text: str):
    # ASCII text takes a faster path than the regex: the same runs
    assert _words(text) == set(_WORD.findall(text))
    assert _words(text.encode("ascii", "ignore").decode()) == set(
        _WORD.findall(text.encode("ascii", "ignore").decode())
    )


@settings(max_examples=200, deadline=None)
@given(
    hs.lists(
        hs.text(alphabet=hs.sampled_from(list("aZk9_$@.-/\\ \n:;()é→Gedrys Labs")), max_size=60),
        min_size=1,
        max_size=8,
    )
)
def test_a_texts_tokens_do_not_depend_on_what_the_cache_saw_before(texts: list[str]):
    # the cache remembers runs across texts (and forgets them all when full): each text's
    # tokens are the ones a fresh cache finds
    small, large = TokenCache(max_words=4), TokenCache()
    for text in texts:
        fresh = TokenCache().tokens(text)
        assert small.tokens(text) == fresh
        assert large.tokens(text) == fresh
