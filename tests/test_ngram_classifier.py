"""The n-gram classifier: hashing, the two session views, training, ONNX parity, and the
incremental SessionClassifier against batch classification in the online view."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from winnow.classifier.bag import NEIGHBOUR_MASK, BagEncoder, session_order
from winnow.classifier.ngrams import (
    NGRAM_VERSIONS,
    BagSpec,
    Hasher,
    cues,
    group_weights,
    is_prose,
    split_harness,
    words,
)
from winnow.data.schema import CATEGORIES, CATEGORY_INDEX, MUST_KEEP, Unit

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "classifier" / "sessions.jsonl"
TRACES = ROOT.parent / "shared" / "traces"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


@pytest.fixture(scope="module")
def units(rows) -> list[Unit]:
    return [
        Unit.from_dict({k: v for k, v in r.items() if k not in ("category", "hand_label")})
        for r in rows
    ]


def test_words_cut_at_punctuation_and_keep_apostrophes():
    assert words("Don't run `make_all` -- FAILED: 3 tests.") == [
        b"don't", b"run", b"make_all", b"failed", b"3", b"tests",
    ]  # fmt: skip


def test_hashes_are_stable_across_processes():
    """crc32, not Python's salted hash: a model trained in one process serves in another."""
    code = (
        "from winnow.classifier.ngrams import Hasher\n"
        "print(Hasher().unit_ids('Fix the login bug in auth.py', 'Bash')[0].tolist())"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(seed), "PATH": ""},
        ).stdout  # fmt: skip
        for seed in (1, 2)
    }
    assert len(runs) == 1
    here = Hasher().unit_ids("Fix the login bug in auth.py", "Bash")[0].tolist()
    assert json.loads(runs.pop()) == here
    # 7 words (auth.py is two): 7 unigrams, 6 bigrams, 1 tool name, all inside the table
    assert len(here) == 14 and all(0 <= i < BagSpec().buckets for i in here)


def test_numbers_fold_to_one_token():
    h = Hasher()
    assert np.array_equal(h.unit_ids("task 7 done")[0], h.unit_ids("task 1234 done")[0])


def test_long_units_keep_head_and_tail():
    h = Hasher(BagSpec(head_chars=20, tail_chars=10))
    text = "alpha beta gamma " + "filler " * 500 + "omega end"
    ids = set(h.unit_ids(text)[0].tolist())
    assert set(h.unit_ids("alpha")[0].tolist()) <= ids
    assert set(h.unit_ids("omega")[0].tolist()) <= ids


@pytest.mark.parametrize("version", NGRAM_VERSIONS)
def test_batch_ids_equal_unit_ids(units, version):
    h = Hasher(BagSpec(version=version))
    prev, nxt = session_order(units)
    batch = h.batch_ids(
        [u.text for u in units],
        [u.tool_name for u in units],
        prev,
        nxt,
        [is_prose(u.role, u.kind) for u in units],
    )
    for i, u in enumerate(units):
        own, as_prev, as_next = h.unit_ids(u.text, u.tool_name)
        groups = [own]
        if prev[i] >= 0:
            groups.append(h.unit_ids(units[prev[i]].text, units[prev[i]].tool_name)[1])
        if nxt[i] >= 0:
            groups.append(h.unit_ids(units[nxt[i]].text, units[nxt[i]].tool_name)[2])
        groups.append(h.cue_ids(u.text, is_prose(u.role, u.kind)))
        ids, w = group_weights(groups)
        o = batch.offsets
        assert np.array_equal(batch.ids[o[i] : o[i + 1]], ids)
        np.testing.assert_allclose(batch.weights[o[i] : o[i + 1]], w, rtol=1e-6)


def test_online_view_sees_no_later_unit(units):
    enc = BagEncoder()
    online = enc.encode(units, online=True)
    changed = [
        Unit(**{**{f: getattr(u, f) for f in u.__slots__}, "text": u.text + " tail"}) for u in units
    ]
    # change every unit after the first of each session: earlier units' inputs must not move
    firsts = {}
    for i, u in enumerate(units):
        firsts.setdefault(u.session_id, i)
    mixed = [units[i] if firsts[u.session_id] == i else changed[i] for i, u in enumerate(units)]
    again = enc.encode(mixed, online=True)
    for i in firsts.values():
        o = online.offsets
        assert np.array_equal(
            online.ids[o[i] : o[i + 1]], again.ids[again.offsets[i] : again.offsets[i + 1]]
        )
        assert np.array_equal(online.dense[i], again.dense[i])
    batch = enc.encode(units, online=False)
    assert not np.array_equal(batch.dense, online.dense)  # the batch view sees the next unit


def test_incremental_step_equals_online_batch(units):
    enc = BagEncoder()
    batch = enc.encode(units, online=True)
    seen: dict = {}
    for i, u in enumerate(units):
        ids, w, dense, seen[u.session_id] = enc.step(seen.get(u.session_id), u)
        o = batch.offsets
        assert np.array_equal(ids, batch.ids[o[i] : o[i + 1]])
        assert np.array_equal(w, batch.weights[o[i] : o[i + 1]])
        assert np.array_equal(dense, batch.dense[i])


def test_neighbour_features_do_not_depend_on_the_view(units):
    enc = BagEncoder()
    f = len(NEIGHBOUR_MASK)
    b, o = enc.encode(units), enc.encode(units, online=True)
    np.testing.assert_array_equal(b.dense[:, f : 2 * f], o.dense[:, f : 2 * f])


# --- training, export, serving (torch) ---------------------------------------------------------


@pytest.fixture(scope="module", params=NGRAM_VERSIONS, ids=lambda v: f"ngram-v{v}")
def trained(rows, units, tmp_path_factory, request):
    """A tiny model of each n-gram spec version: serving must hash as training did."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from winnow.classifier.config import BagModelConfig
    from winnow.classifier.manifest import Calibration, Provenance
    from winnow.training.bag_export import save_bag_model
    from winnow.training.bag_trainer import BagTrainConfig, BagTrainer

    spec = BagSpec(buckets=1 << 10, version=request.param)
    enc = BagEncoder(spec)
    views = [enc.encode(units, online=True), enc.encode(units)]
    y = np.zeros((len(rows), len(CATEGORIES)), np.float32)
    y[np.arange(len(rows)), [CATEGORY_INDEX[r["category"]] for r in rows]] = 1
    config = BagTrainConfig(
        model=BagModelConfig(buckets=spec.buckets, hidden=32), spec=spec, epochs=30, batch_size=32
    )
    model = BagTrainer(config).fit(views, y, np.ones(len(rows), np.float32))
    out = tmp_path_factory.mktemp("m") / "tiny"
    save_bag_model(
        model,
        out,
        spec,
        Calibration(temperature=1.5, must_keep_threshold=0.4, fitted_on="test"),
        Provenance(),
        {"units": len(rows)},
    )
    return model, views, out


def test_tiny_fit_learns_and_is_deterministic(trained, rows, units):
    from winnow.training.bag_trainer import BagTrainConfig, BagTrainer, predict_logits

    model, views, _ = trained
    gold = np.array([CATEGORY_INDEX[r["category"]] for r in rows])
    assert (predict_logits(model, views[1]).argmax(1) == gold).mean() > 0.8
    config = BagTrainConfig.from_dict(
        {
            "model": model.config.to_dict(),
            "spec": {"buckets": 1 << 10},
            "epochs": 2,
            "batch_size": 32,
        }
    )
    y = np.eye(len(CATEGORIES), dtype=np.float32)[gold]
    a = BagTrainer(config).fit(views, y, np.ones(len(rows), np.float32))
    b = BagTrainer(config).fit(views, y, np.ones(len(rows), np.float32))
    np.testing.assert_array_equal(predict_logits(a, views[0]), predict_logits(b, views[0]))


def test_onnx_matches_torch_at_the_temperature(trained, units):
    from winnow.classifier.manifest import exclude_categories
    from winnow.serving.classifier import ImportanceClassifier
    from winnow.training.bag_trainer import predict_logits, softmax

    model, views, out = trained
    clf = ImportanceClassifier.load(out)
    assert clf.kind == "ngram" and clf.manifest.calibration.temperature == 1.5
    for online, view in ((True, views[0]), (False, views[1])):
        # served probabilities are 0 where TAXONOMY.md rules a category out
        want = exclude_categories(softmax(predict_logits(model, view), 1.5), units)
        got = clf.predict_proba(units, batch_size=7, online=online)
        np.testing.assert_allclose(got, want, atol=2e-4)  # float16 table


def test_single_unit_with_context_equals_batch(trained, units):
    from winnow.classifier.features import session_context
    from winnow.serving.classifier import ImportanceClassifier

    clf = ImportanceClassifier.load(trained[2])
    batch = clf.predict_proba(units)
    for u, c, p in zip(units, session_context(units), batch):
        np.testing.assert_allclose(list(clf.predict_one(u, c).scores.values()), p, atol=1e-5)


def test_threshold_decides_must_keep(trained, units):
    from winnow.serving.classifier import ImportanceClassifier

    clf = ImportanceClassifier.load(trained[2])
    keep = [c in MUST_KEEP for c in clf.labels]
    for p in clf.predict(units):
        mk = sum(v for c, v in p.scores.items() if c in MUST_KEEP)
        best = max(p.scores, key=p.scores.get)
        if mk >= 0.4 and best not in MUST_KEEP:
            assert p.category == max((c for c, k in zip(clf.labels, keep) if k), key=p.scores.get)
        else:
            assert p.category == best


def test_session_classifier_equals_online_batch(trained, units):
    from winnow.serving.session import SessionClassifier

    sc = SessionClassifier.load(trained[2])
    live = sc.extend(units)
    batch = sc.predict(units, online=True)
    assert [p.category for p in live] == [p.category for p in batch]
    for a, b in zip(live, batch):
        assert a.scores == pytest.approx(b.scores, abs=1e-6)


def test_session_classifier_keeps_sessions_apart(trained, units):
    from winnow.serving.session import SessionClassifier

    sc = SessionClassifier.load(trained[2])
    by_session: dict[str, list[Unit]] = {}
    for u in units:
        by_session.setdefault(u.session_id, []).append(u)
    a, b = list(by_session.values())[:2]
    alone = [p.scores for p in sc.extend(a)]
    sc.reset()
    inter = {}
    for i in range(max(len(a), len(b))):
        for s in (a, b):
            if i < len(s):
                inter[s[i].id] = sc.add(s[i]).scores
    assert [inter[u.id] for u in a] == alone


def test_session_classifier_costs_one_hash_per_unit(trained, units, monkeypatch):
    """Constant cost: feeding unit n hashes and featurizes that unit alone."""
    from winnow.classifier import bag as bag_mod
    from winnow.serving.session import SessionClassifier

    sc = SessionClassifier.load(trained[2])
    calls = {"hash": 0, "features": 0}
    hasher = sc.classifier.bag.hasher
    real_ids, real_feats = hasher.unit_ids, bag_mod.unit_features

    def count_ids(*a, **k):
        calls["hash"] += 1
        return real_ids(*a, **k)

    def count_feats(*a, **k):
        calls["features"] += 1
        return real_feats(*a, **k)

    monkeypatch.setattr(hasher, "unit_ids", count_ids)
    monkeypatch.setattr(bag_mod, "unit_features", count_feats)
    sc.extend(units)
    assert calls == {"hash": len(units), "features": len(units)}


@pytest.mark.slow
@pytest.mark.traces
def test_session_classifier_on_real_sessions_equals_online_batch():
    """The shipped model, every session of a real source, unit by unit vs in one batch."""
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is absent")
    from winnow.data.readers import read_paths
    from winnow.serving.session import SessionClassifier

    units = list(read_paths([TRACES / "swe-agent"])) + list(read_paths([TRACES / "openhands"]))
    sc = SessionClassifier.load()
    live = sc.extend(units)
    batch = sc.predict(units, online=True)
    assert len(units) > 500
    assert [p.category for p in live] == [p.category for p in batch]
    worst = max(abs(a.scores[c] - b.scores[c]) for a, b in zip(live, batch) for c in a.scores)
    assert worst < 1e-5


_MIXED = "I’m checking /home/dev/agentv/src/hooks.go: exit code 1, commit a8da45f, 35.8KB."


def test_version_1_models_are_hashed_as_they_were_trained():
    """A model records its n-gram spec version; version 1 (the shipped winnow-small of
    0.1) must keep its exact ids, pinned from the code that trained it."""
    ids = Hasher(BagSpec(version=1)).unit_ids(_MIXED, "Bash")[0].tolist()
    assert ids == [
        10240, 11119, 15334, 3760, 1614, 6596, 10013, 4948, 9537, 9151, 13743, 15733, 7539,
        13743, 4892, 3152, 14337, 9615, 374, 14602, 6695, 3255, 8330, 332, 8858, 11792, 2344,
        9336, 4974, 13315,
    ]  # fmt: skip
    assert len(Hasher(BagSpec(version=1)).cue_ids(_MIXED, "assistant")) == 0
    with pytest.raises(ValueError, match="spec v99"):
        Hasher(BagSpec(version=99))


def test_version_2_words_carry_over_projects_and_agents():
    h = Hasher(BagSpec(version=2))

    def own(text: str) -> list[int]:
        return sorted(h.unit_ids(text)[0].tolist())

    assert own("I’m checking it") == own("I'm checking it")  # Codex quotes, Claude's
    assert own("see /home/dev/agentv/src/hooks.go now") == own("see ./cli/cmd/root.go now")
    assert own("see src/a/b.py") != own("see src/a/b.go")  # the file extension stays
    assert own("docs at https://github.com/a/b/pull/12") == own("docs at http://x.org/y")
    assert own("commit a8da45f pushed") == own("commit 0c1d2e3 pushed")  # hex ids
    assert own("took 30s and 8kb") == own("took 2ms and 100mb")  # numbers with a unit
    assert own("checking the tests") != own("checking the docs")  # words stay words


CODEX = "Chunk ID: a8da45\nWall time: 0.13 seconds\nProcess exited with code {}\n"
CODEX += "Original token count: 79\nOutput:\nok 12 tests passed\n"


def test_version_2_leaves_a_harness_header_out_and_keeps_its_exit_code():
    h = Hasher(BagSpec(version=2))
    body = "ok 12 tests passed\n"
    assert sorted(h.unit_ids(CODEX.format(0))[0].tolist()) == sorted(h.unit_ids(body)[0].tolist())
    assert cues(h.clip(CODEX.format(0)), split_harness(CODEX.format(0))[1], prose=False) == [
        b"exit=0"
    ]
    assert split_harness(CODEX.format(2)) == (body, 2)
    assert cues("error: 3 failed\n<shellId: 5 completed with exit code 1>", prose=False) == [
        b"exit!=0"
    ]
    thinking = "<thinking-content-7bbeb8e1441453ad>\n\nHere's a plan."
    assert split_harness(thinking) == ("Here's a plan.", None)
    assert split_harness("Wall time is what we measure") == ("Wall time is what we measure", None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Let me look at the tests.", {b"announce_first", b"sentences=1"}),
        (
            "The target exists now. I’m adding the prompt, then I’ll inject it.",
            {b"announce_later", b"announce_last", b"sentences=2"},
        ),
        (
            "The flake is a fake-timer race on retry 3, not the heartbeat, because the clock "
            "is mocked.",
            {b"finding", b"sentences=1"},
        ),
        ("I've fixed the import. Tests pass.", {b"did", b"sentences=2"}),
        ("<environment_context>\n  <cwd>/x</cwd>", {b"tag", b"sentences=2"}),
    ],
)
def test_version_2_prose_cues(text, expected):
    assert set(cues(text)) == expected


def test_a_tools_output_gets_no_prose_cues():
    h = Hasher(BagSpec(version=2))
    text = "Let me know if it fails. I'm running the tests."
    assert is_prose("assistant", "text") and is_prose("user", "text")
    assert not is_prose("tool", "tool_result") and not is_prose("assistant", "tool_call")
    assert len(h.cue_ids(text, prose=False)) == 0 < len(h.cue_ids(text, prose=True))
