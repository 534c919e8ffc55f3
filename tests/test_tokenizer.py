"""UnitEncoder's word cache gives exactly the ids the tokenizer gives the whole text."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, normalizers

import winnow.classifier.tokenizer as tokenizer_module
from winnow.classifier.tokenizer import UnitEncoder, train_tokenizer
from winnow.data.schema import Unit

ROOT = Path(__file__).resolve().parents[1]
# The BPE tokenizer of winnow-small 0.1 (the transformer), trained on ../shared/traces.
SHIPPED = ROOT / "tests" / "fixtures" / "classifier" / "transformer_tokenizer.json"
FIXTURES = ROOT / "tests" / "fixtures"
TRACES = ROOT.parent / "shared" / "traces"

TRICKY = [
    "",
    "   \n\t ",
    "Fix the bug in src/app.py:42 -> see https://x.io/a?b=1&c=2",
    "def f(x):\n    return x**2  # ok\n",
    "İstanbul İF ΑΣ Σ straße STRASSE ﬁle Kelvin:\u212a",
    "combining: e\u0301 a\u0308 c\u0327 and emoji 😀 👍🏽 ✅ → ✓",
    "日本語のテキスト 中文 한국어 mixed with ASCII_words and_under_scores",
    "digits 0123456789 ²½ Ⅻ ① 1.5e-3 0x1F",
    "nbsp\u00a0em\u2003ideographic\u3000line\u2028para\u2029nel\x85",
    "ascii separators a\x1cb c\x1dd e\x1ef g\x1fh",
    "controls \x00\x01\x07\x7f and tabs\tand\r\nCRLF",
    "special tokens [CUT] [PAD]x[UNK] [role:user][kind:text] [cut] [Cut] [tool:shell]y",
    "x" * 500 + " " + "y_" * 300,
    "long_identifier_" * 40,
    "'quotes' \"double\" `back` don't i'll let's",
]


def plain(encoder: UnitEncoder, unit: Unit | dict) -> list[int]:
    """The reference: the tokenizer on the clipped text, then the head + tail cut."""
    u = unit if isinstance(unit, dict) else unit.to_dict()
    text = encoder.clip(u.get("text") or "")
    ids = encoder.tokenizer.encode(text, add_special_tokens=False).ids
    prefix = encoder._prefix_ids(u.get("role"), u.get("kind"), u.get("tool_name"))
    return [*prefix, *encoder._fit(ids)]


def unit(text: str, i: int = 0) -> Unit:
    return Unit(f"s:{i}", "s", i, "tool", "tool_result", text, tool_name="Bash")


def fixture_units() -> list[Unit]:
    """The units of every transcript and unit file under tests/fixtures."""
    from winnow.data.readers import ReadReport, read_paths

    units = list(read_paths([FIXTURES], ReadReport()))
    for path in sorted(FIXTURES.rglob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and isinstance(r.get("text"), str) and "kind" in r:
                units.append(Unit.from_dict(r))
    return units


def fuzz_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    pools = ["abcXYZ_09", " \t\n", ".,:;!?()[]{}<>/\\'\"-+=", "İıßΣσςé\u0301", "日本😀→✓",
             "\x1c\x1f\x85\xa0\u3000", "[CUT]", "[cut]", "[role:user]"]  # fmt: skip
    return [
        "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(0, 200))) for _ in range(n)
    ]


@pytest.fixture(scope="module")
def shipped() -> Tokenizer:
    return Tokenizer.from_file(str(SHIPPED))


@pytest.fixture(scope="module")
def trained(classifier_rows) -> Tokenizer:
    return train_tokenizer((r["text"] for r in classifier_rows), vocab_size=600)


@pytest.mark.parametrize("which", ["shipped", "trained"])
def test_tricky_texts_match_the_tokenizer(which, request):
    encoder = UnitEncoder(request.getfixturevalue(which))
    units = [unit(t, i) for i, t in enumerate(TRICKY + fuzz_texts(300))]
    want = [plain(encoder, u) for u in units]
    assert encoder.encode(units) == want  # cold cache
    assert encoder.encode(units) == want  # warm cache
    assert [encoder.encode_one(u)[0].tolist() for u in units] == want
    assert UnitEncoder(encoder.tokenizer).encode_one(units[4]).dtype == np.int64


def test_unencodable_text_raises_as_the_tokenizer_does(shipped):
    bad = unit("a lone surrogate \ud800 here")
    with pytest.raises(TypeError):
        shipped.encode(bad.text, add_special_tokens=False)
    encoder = UnitEncoder(shipped)
    encoder.encode([unit("a lone surrogate here")])  # every other word cached
    with pytest.raises(TypeError):
        encoder.encode_one(bad)
    with pytest.raises(TypeError):
        encoder.encode([bad])


def test_fixture_units_match_the_tokenizer(shipped):
    units = fixture_units()
    assert len(units) > 1000
    encoder = UnitEncoder(shipped)
    want = [plain(encoder, u) for u in units]
    assert [encoder.encode_one(u)[0].tolist() for u in units] == want
    assert encoder.encode([u.to_dict() for u in units]) == want


def test_a_full_cache_starts_afresh(shipped, monkeypatch):
    monkeypatch.setattr(tokenizer_module, "WORD_CACHE_SIZE", 50)
    encoder = UnitEncoder(shipped)
    units = [unit(t, i) for i, t in enumerate(fuzz_texts(200, seed=1))]
    assert encoder.encode(units) == [plain(encoder, u) for u in units]
    for u in units[:50]:
        assert encoder.encode_one(u)[0].tolist() == plain(encoder, u)
        assert len(encoder._words) <= 50


def test_other_pipelines_go_to_the_tokenizer_whole(shipped):
    changed = Tokenizer.from_str(shipped.to_str())
    changed.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    encoder = UnitEncoder(changed)
    assert not encoder._by_word
    units = [unit(t, i) for i, t in enumerate(TRICKY)]
    assert encoder.encode(units) == [plain(encoder, u) for u in units]


def test_concurrent_encoding_is_exact(shipped):
    encoder = UnitEncoder(shipped)
    units = [unit(t, i) for i, t in enumerate(fuzz_texts(400, seed=2))]
    want = [plain(encoder, u) for u in units]
    got: dict[int, list] = {}

    def work(k: int) -> None:
        got[k] = [encoder.encode_one(u)[0].tolist() for u in units[k::4]]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(got[k] == want[k::4] for k in range(4))


@pytest.mark.skipif(not TRACES.is_dir(), reason="no ../shared/traces")
def test_trace_units_match_the_tokenizer(shipped):
    from winnow.data.readers import read_paths

    units = list(read_paths([TRACES]))[:4000]
    encoder = UnitEncoder(shipped)
    assert encoder.encode(units) == [plain(encoder, u) for u in units]
