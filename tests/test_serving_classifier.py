"""The torch-free serving classifier with the shipped model: API, checksums, threads, CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from winnow.classifier.features import Context
from winnow.classifier.manifest import exclude_categories
from winnow.data.schema import CATEGORIES, MUST_KEEP, Unit
from winnow.serving.classifier import (
    ImportanceClassifier,
    ModelError,
    Prediction,
    default_model_path,
    to_unit,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clf() -> ImportanceClassifier:
    return ImportanceClassifier.load()


@pytest.fixture(scope="module")
def rows(classifier_rows) -> list[dict]:
    return classifier_rows


def test_default_model_is_shipped():
    path = default_model_path()
    assert path == ROOT / "models" / "winnow-small" or path.name == "winnow-small"
    for name in ("model.onnx", "config.json", "metrics.json", "MODEL_CARD.md", "SHA256SUMS"):
        assert (path / name).is_file(), name


def test_info(clf):
    info = clf.info
    assert info["name"] == "winnow-small"
    assert info["labels"] == list(CATEGORIES)
    assert set(info["sha256"]) >= {"model.onnx", "config.json"}
    assert info["kind"] == "ngram" and info["calibration"]["temperature"] > 0
    assert all(len(h) == 64 for h in info["sha256"].values())


def test_predict_dicts_and_units(clf, rows):
    preds = clf.predict(rows)
    assert len(preds) == len(rows)
    for p in preds:
        assert isinstance(p, Prediction) and p.category in CATEGORIES
        assert list(p.scores) == list(CATEGORIES)
        assert sum(p.scores.values()) == pytest.approx(1.0, abs=1e-4)
        # the argmax, or the likeliest must-keep category once they reach the threshold
        cal = clf.manifest.calibration
        keep = {c: v for c, v in p.scores.items() if c in MUST_KEEP}
        other = max(v for c, v in p.scores.items() if c not in MUST_KEEP)
        score = sum(keep.values()) / (other if cal.must_keep_rule == "ratio" else 1.0)
        if cal.must_keep_threshold is not None and score >= cal.must_keep_threshold:
            assert p.category in (max(p.scores, key=p.scores.get), max(keep, key=keep.get))
        else:
            assert p.category == max(p.scores, key=p.scores.get)
    units = [Unit.from_dict(r) for r in rows]
    assert [p.category for p in clf.predict(units)] == [p.category for p in preds]


def test_single_and_batch_paths_agree(clf, rows):
    """predict_one with the session context == the batched, bucketed, padded path."""
    from winnow.classifier.features import session_context

    batch = clf.predict_proba(rows, batch_size=16, chunk=50)
    for r, c, p in zip(rows, session_context(rows), batch):
        one = clf.predict_one(r, c)
        np.testing.assert_allclose(list(one.scores.values()), p, atol=1e-5)


def test_it_beats_nothing_on_the_fixture(clf, rows):
    """Not a benchmark (see metrics.json); a smoke check that the shipped model is not noise."""
    hand = [r for r in rows if r["hand_label"]]
    preds = clf.predict(rows)
    acc = np.mean([p.category == r["category"] for p, r in zip(preds, rows) if r["hand_label"]])
    assert len(hand) > 50 and acc > 0.6


def test_obvious_units(clf):
    # s:3 is a /clear as Claude Code writes it (the bare <command-name> tag never occurs alone)
    units = [
        {"id": "s:0", "session_id": "s", "index": 0, "role": "user", "kind": "text",
         "text": "Add rate limiting to the login endpoint, max 5 tries a minute"},
        {"id": "s:1", "session_id": "s", "index": 1, "role": "assistant", "kind": "tool_call",
         "tool_name": "Edit", "text": '{"file_path":"app/login.py","old_string":"def login():","new_string":"@limit(5)\\ndef login():"}'},
        {"id": "s:2", "session_id": "s", "index": 2, "role": "tool", "kind": "tool_result", "tool_name": "Bash",
         "is_error": True, "text": "FAILED tests/test_auth.py::test_lockout - AssertionError: 6 != 5"},
        {"id": "s:3", "session_id": "s", "index": 3, "role": "user", "kind": "text",
         "text": "<command-name>/clear</command-name>\n            <command-message>clear</command-message>\n            <command-args></command-args>"},
    ]  # fmt: skip
    assert [p.category for p in clf.predict(units)] == [
        "requirement",
        "code",
        "error",
        "boilerplate",
    ]


def test_injected_rules_and_skill_expansions_are_settled(clf):
    """Whatever the model says: project rules and a bare skill are constraint, a skill given
    ARGUMENTS carries the task (the hand labels agree on all 30 they hold)."""
    skill = "Base directory for this skill: /repo/.claude/skills/commit\n\n# Commit\n\nUse conventional commits."
    texts = [
        "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nRun the tests before a commit.\n</INSTRUCTIONS>",
        skill,
        skill + "\n\nARGUMENTS: fix the OSC 133 sequence in fish",
    ]
    units = [
        {"id": f"s:{i}", "session_id": "s", "index": i, "role": "user", "kind": "text", "text": t}
        for i, t in enumerate(texts)
    ]
    assert [p.category for p in clf.predict(units)] == ["constraint", "constraint", "requirement"]


def test_a_read_skill_file_is_settled_online_as_in_batch(clf):
    """The result of reading a skill or rule file is constraint (the hand-label conventions),
    whether the session is classified whole or unit by unit."""
    from winnow.serving.session import SessionClassifier

    read = '{"cmd":"sed -n \'1,240p\' /home/dev/.agents/skills/open-pr/SKILL.md"}'
    specs = [
        ("user", "text", "Open a PR for the fix.", None, None),
        ("assistant", "tool_call", read, "exec_command", "c1"),
        ("tool", "tool_result", "# Open PR\n\nPush the branch, then run gh pr create.", "exec_command", "c1"),
        ("assistant", "tool_call", '{"cmd":"sed -n \'1,40p\' src/app.py"}', "exec_command", "c2"),
        ("tool", "tool_result", "import os\n\ndef main():\n    pass", "exec_command", "c2"),
    ]  # fmt: skip
    units = [
        {"id": f"s:{i}", "session_id": "s", "index": i, "role": r, "kind": k, "text": t,
         "tool_name": n, "call_id": c}
        for i, (r, k, t, n, c) in enumerate(specs)
    ]  # fmt: skip
    batch = [p.category for p in clf.predict(units, online=True)]
    assert batch[2] == "constraint"
    assert [p.category for p in SessionClassifier(clf).extend(units)] == batch


def test_empty_input(clf):
    assert clf.predict([]) == []
    assert clf.predict_proba([]).shape == (0, len(CATEGORIES))


def test_thread_safe(rows):
    clf = ImportanceClassifier.load(threads=1)
    want = [p.category for p in clf.predict(rows)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: [p.category for p in clf.predict(rows)], range(8)))
    assert all(g == want for g in got)
    # the one-unit path reuses per-thread buffers: each call must get its own unit's scores
    with ThreadPoolExecutor(4) as pool:
        singles = list(pool.map(clf.predict_one, rows * 3))
    assert [s.scores for s in singles] == [clf.predict_one(r).scores for r in rows] * 3


def test_checksum_mismatch_is_one_clear_error(tmp_path):
    model = tmp_path / "m"
    shutil.copytree(default_model_path(), model)
    with open(model / "model.onnx", "ab") as f:
        f.write(b" ")
    with pytest.raises(ModelError, match=r"model.onnx: sha256 .* does not match SHA256SUMS"):
        ImportanceClassifier.load(model)
    (model / "SHA256SUMS").unlink()
    with pytest.raises(ModelError, match="no SHA256SUMS"):
        ImportanceClassifier.load(model)
    with pytest.raises(ModelError, match="not a winnow model directory"):
        ImportanceClassifier.load(tmp_path / "nowhere")


def test_feature_spec_mismatch_is_refused(tmp_path):
    from winnow.training.export import write_checksums

    model = tmp_path / "m"
    shutil.copytree(default_model_path(), model)
    config = json.loads((model / "config.json").read_text())
    config["features"]["version"] = 999
    (model / "config.json").write_text(json.dumps(config))
    write_checksums(model)
    with pytest.raises(ModelError, match="feature spec v999"):
        ImportanceClassifier.load(model)


def test_older_model_format_is_refused(tmp_path):
    from winnow.training.export import write_checksums

    model = tmp_path / "m"
    shutil.copytree(default_model_path(), model)
    config = json.loads((model / "config.json").read_text())
    config["format_version"] = 1
    (model / "config.json").write_text(json.dumps(config))
    write_checksums(model)
    with pytest.raises(ModelError, match="model format v1, but this winnow reads v2, v3; rebuild"):
        ImportanceClassifier.load(model)


def test_serving_never_imports_torch():
    code = (
        "import sys, winnow, winnow.serving\n"
        "from winnow.serving import ImportanceClassifier\n"
        "p = ImportanceClassifier.load().predict_one({'role': 'user', 'kind': 'text', 'text': 'hi'})\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "print(p.category)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in CATEGORIES


def test_cli_classify_jsonl_keeps_ids(tmp_path, capsys, classifier_rows):
    from winnow.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(
            json.dumps({k: v for k, v in r.items() if k != "category"}) + "\n"
            for r in classifier_rows
        )
    )
    out = tmp_path / "out.jsonl"
    assert main(["classify", str(src), "-o", str(out)]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    ins = [json.loads(line) for line in src.read_text().splitlines()]
    assert [r["id"] for r in recs] == [r["id"] for r in ins]
    assert all(r["category"] in CATEGORIES and set(r["scores"]) == set(CATEGORIES) for r in recs)
    assert all(r["text"] == i["text"] for r, i in zip(recs, ins))
    assert main(["classify", str(src)]) == 0
    table = capsys.readouterr().out
    assert "category" in table and "status" in table


def test_cli_classify_bad_input(tmp_path, capsys):
    from winnow.cli import main

    bad = tmp_path / "bad.txt"
    bad.write_text("not a transcript\n")
    assert main(["classify", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.txt" in err and "Traceback" not in err


def test_what_the_taxonomy_settles_is_boilerplate_in_every_path(clf) -> None:
    """A /clear, a system reminder and an empty result are boilerplate by TAXONOMY.md's own
    words: no must-keep threshold may turn them into a protected unit, in the batch, single
    and live paths alike. An image (a placeholder text with a media cost) is not settled."""
    from winnow.serving.session import SessionClassifier

    units = [
        {"id": "s:0", "session_id": "s", "index": 0, "role": "user", "kind": "text",
         "text": "Add rate limiting to the login endpoint, max 5 tries a minute"},
        {"id": "s:1", "session_id": "s", "index": 1, "role": "user", "kind": "text",
         "text": "<command-name>/clear</command-name>\n<command-message>clear</command-message>\n<command-args></command-args>"},
        {"id": "s:2", "session_id": "s", "index": 2, "role": "user", "kind": "text",
         "text": "<system-reminder>The user named a decision; must keep the API stable.</system-reminder>"},
        {"id": "s:3", "session_id": "s", "index": 3, "role": "tool", "kind": "tool_result",
         "tool_name": "Bash", "text": "(no output)"},
    ]  # fmt: skip
    want = ["requirement", "boilerplate", "boilerplate", "boilerplate"]
    assert [p.category for p in clf.predict(units)] == want
    assert [p.category for p in clf.predict(units, online=True)] == want
    assert [clf.predict_one(u).category for u in units[1:]] == want[1:]
    assert [p.category for p in SessionClassifier(clf).extend(units)] == want
    # the rule overrides whatever the network says, for what it settles and nothing else
    probs = np.zeros((2, len(clf.labels)), np.float32)
    probs[:, clf.labels.index("requirement")] = 1.0
    image = Unit("i:0", "i", 0, "user", "text", "[image]", extra={"media_tokens": 1600})
    clear = to_unit(units[1])
    assert [clf.labels[i] for i in clf.decide(probs, [image, clear])] == [
        "requirement",
        "boilerplate",
    ]


def test_an_assistant_never_sets_the_task_in_every_path(clf) -> None:
    """An assistant restating the request is not the request (TAXONOMY.md: restating is
    status): its text or thinking gets no requirement or constraint score, in the batch, single
    and live paths alike; the user's words, and a sub-agent's brief, keep theirs."""
    from winnow.serving.session import SessionClassifier

    ask = "Update the session start command to take a task id; keep the old name argument."
    units = [
        {"id": "s:0", "session_id": "s", "index": 0, "role": "user", "kind": "text", "text": ask},
        {"id": "s:1", "session_id": "s", "index": 1, "role": "assistant", "kind": "text",
         "text": "**Summary of Your Request**\n\nYou want to " + ask[0].lower() + ask[1:]},
        {"id": "s:2", "session_id": "s", "index": 2, "role": "assistant", "kind": "thinking",
         "text": "The user wants: " + ask},
    ]  # fmt: skip
    for preds in (
        clf.predict(units),
        clf.predict(units, online=True),
        [clf.predict_one(u) for u in units],
        SessionClassifier(clf).extend(units),
    ):
        assert preds[0].category == "requirement"
        for p in preds[1:]:
            assert p.category not in ("requirement", "constraint")
            assert p.scores["requirement"] == p.scores["constraint"] == 0.0
            assert sum(p.scores.values()) == pytest.approx(1.0, abs=1e-5)
    # the rule takes away what it rules out, and only for the units it rules it out for
    probs = np.zeros((3, len(clf.labels)), np.float32)
    probs[:, clf.labels.index("requirement")] = 0.6
    probs[:, clf.labels.index("status")] = 0.3
    probs[:, clf.labels.index("decision")] = 0.1
    brief = Unit("s:3", "s", 3, "assistant", "tool_call", '{"prompt": "' + ask + '"}', "Task", "c")
    out = exclude_categories(probs, [to_unit(units[0]), to_unit(units[1]), brief], clf.labels)
    assert out[0].tolist() == out[2].tolist() == probs[0].tolist()
    # what it takes stays must-keep (the threshold keeps its meaning): decision gets it here,
    # decision and architecture share it evenly where neither had any
    at = clf.labels.index
    assert out[1][at("status")] == pytest.approx(0.3)
    assert out[1][at("decision")] == pytest.approx(0.7)
    probs[1, at("decision")], probs[1, at("status")] = 0.0, 0.4
    out = exclude_categories(probs, [to_unit(u) for u in units[:2]], clf.labels)
    assert out[1][at("decision")] == out[1][at("architecture")] == pytest.approx(0.3)
    assert out[1][at("status")] == pytest.approx(0.4)
    # many rows at once (batch) give what one row (the live path) gives
    many = exclude_categories(np.repeat(probs[1:2], 3, 0), [to_unit(units[1])] * 3, clf.labels)
    np.testing.assert_allclose(many, np.repeat(out[1:2], 3, 0), atol=1e-6)


def test_the_ruled_out_categories_never_change_what_is_kept(clf, rows, monkeypatch) -> None:
    """The rule picks which must-keep category an assistant's reply gets, never whether it is
    must-keep: the must-keep sum, the threshold's input, is what the model gave."""
    import winnow.serving.classifier as served

    ruled = clf.predict(rows)
    monkeypatch.setattr(served, "exclude_categories", lambda probs, units, labels: probs)
    bare = clf.predict(rows)
    mass = [sum(p.scores[c] for c in MUST_KEEP) for p in bare]
    assert [sum(p.scores[c] for c in MUST_KEEP) for p in ruled] == pytest.approx(mass, abs=1e-5)
    assert [p.category in MUST_KEEP for p in ruled] == [p.category in MUST_KEEP for p in bare]
    assistant = [i for i, r in enumerate(rows) if r["role"] == "assistant" and r["kind"] == "text"]
    assert assistant and any(bare[i].scores["requirement"] > 0.01 for i in assistant)


def _as_feature_spec(tmp_path: Path, version: int) -> Path:
    """The shipped model's directory with its manifest saying feature spec `version`."""
    from winnow.training.export import write_checksums

    model = tmp_path / f"v{version}"
    shutil.copytree(default_model_path(), model)
    config = json.loads((model / "config.json").read_text())
    config["features"]["version"] = version
    (model / "config.json").write_text(json.dumps(config))
    write_checksums(model)
    return model


def test_a_model_is_served_with_the_feature_spec_it_was_trained_on(tmp_path):
    """The network sees the hand features of its manifest's spec, in every path (batch, one
    unit, unit by unit): v3 sets `exit_nonzero` on Codex's "Process exited with code 0", v4
    does not. A model trained on v3 is served exactly as before v4 existed."""
    from winnow.classifier.bag import BagEncoder
    from winnow.classifier.features import FEATURE_NAMES
    from winnow.classifier.ngrams import BagSpec
    from winnow.serving.session import SessionClassifier

    ok = "Wall time: 0.05 seconds\nProcess exited with code 0\nOutput:\nall 12 tests passed\n"
    units = [
        Unit("s:0", "s", 0, "user", "text", "Run the tests."),
        Unit("s:1", "s", 1, "assistant", "tool_call", '{"cmd": "pytest"}', tool_name="exec", call_id="c"),
        Unit("s:2", "s", 2, "tool", "tool_result", ok, tool_name="exec", call_id="c"),
    ]  # fmt: skip
    at = FEATURE_NAMES.index("cue=exit_nonzero")
    got = {}
    for version in (3, 4):
        clf = ImportanceClassifier.load(_as_feature_spec(tmp_path, version))
        assert clf.features(units)[2, at] == (version == 3)
        bags = BagEncoder(BagSpec.from_dict(clf.manifest.bag), version).encode(units, online=True)
        assert bags.dense[2, at] == (version == 3)
        want = clf.session.run(
            None,
            {
                "ids": bags.ids,
                "weights": bags.weights[:, None],
                "segments": np.repeat(np.arange(3), np.diff(bags.offsets))[:, None],
                "dense": bags.dense,
            },
        )[0]
        np.testing.assert_allclose(clf.predict_proba(units, online=True), want, atol=1e-6)
        live = [list(p.scores.values()) for p in SessionClassifier(clf).extend(units)]
        np.testing.assert_allclose(live, want, atol=1e-5)
        one = clf.predict_one(units[2], Context(3, units[1], None))
        np.testing.assert_allclose(list(one.scores.values()), want[2], atol=1e-5)
        got[version] = want[2]
    assert np.abs(got[3] - got[4]).max() > 1e-4  # the cue reaches the network


def test_role_rule_decides_by_the_units_role(tmp_path):
    """A model whose manifest takes the "role" rule flips a unit to must-keep by its role's
    map of the must-keep mass: the same probabilities are requirement for a user's text and
    stay boilerplate for a harness notice (role system)."""
    from winnow.training.export import write_checksums

    model = tmp_path / "m"
    shutil.copytree(default_model_path(), model)
    config = json.loads((model / "config.json").read_text())
    config["calibration"] |= {
        "must_keep_rule": "role",
        "must_keep_threshold": 0.2,
        "must_keep_scaling": {"*": [1.0, 0.0], "user": [1.0, 1.5], "system": [1.0, -3.0]},
    }
    (model / "config.json").write_text(json.dumps(config))
    write_checksums(model)
    clf = ImportanceClassifier.load(model)
    probs = np.zeros((3, len(clf.labels)), np.float32)
    probs[:, clf.labels.index("boilerplate")] = 0.85
    probs[:, clf.labels.index("requirement")] = 0.15  # logit -1.73
    user = Unit("r:0", "r", 0, "user", "text", "also add a retry")
    notice = Unit("r:1", "r", 1, "system", "text", "Tokens: 1.8k sent, 653 received.")
    tool = Unit("r:2", "r", 2, "tool", "tool_result", "ok")
    # user: sigmoid(-0.23) = 0.44 >= 0.2; system: sigmoid(-4.7) = 0.01; other roles "*": 0.15
    assert [clf.labels[i] for i in clf.decide(probs, [user, notice, tool])] == [
        "requirement",
        "boilerplate",
        "boilerplate",
    ]
    assert [clf.labels[i] for i in clf.decide(probs)] == ["boilerplate"] * 3  # no units: "*"
