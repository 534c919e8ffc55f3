"""Hand features and unit encoding: shapes, cues on real units, train/serve identity."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from winnow.classifier.features import (
    CLIP_HEAD,
    CLIP_TAIL,
    FEATURE_NAMES,
    FEATURE_VERSION,
    FEATURE_VERSIONS,
    N_FEATURES,
    TOOL_BUCKETS,
    Context,
    batch_features,
    clip_text,
    session_context,
    tool_bucket,
    unit_features,
)
from winnow.data.schema import Unit


@pytest.fixture(scope="module")
def rows(classifier_rows) -> list[dict]:
    return classifier_rows


def named(v: np.ndarray) -> set[str]:
    return {FEATURE_NAMES[i] for i in np.flatnonzero(v)}


def test_names_are_unique_and_sized():
    assert len(set(FEATURE_NAMES)) == N_FEATURES == len(FEATURE_NAMES)


@pytest.mark.parametrize(
    "name,bucket",
    [
        ("Read", "read"),
        ("read_file", "read"),
        ("Grep", "search"),
        ("Glob", "list"),
        ("LS", "list"),
        ("Edit", "edit"),
        ("str_replace_editor", "edit"),
        ("apply_patch", "edit"),
        ("Write", "write"),
        ("write_file", "write"),
        ("Bash", "shell"),
        ("PowerShell", "shell"),
        ("exec_command", "shell"),
        ("TodoWrite", "plan"),
        ("update_plan", "plan"),
        ("WebFetch", "web"),
        ("mcp__github__search_issues", "search"),
        ("frobnicate", "other"),
        (None, "none"),
    ],
)
def test_tool_bucket(name, bucket):
    assert bucket in TOOL_BUCKETS
    assert tool_bucket(name) == bucket


def test_clip_keeps_head_and_tail():
    text = "H" * 5000 + "T" * 5000
    c = clip_text(text)
    assert c.startswith("H" * CLIP_HEAD) and c.endswith("T" * CLIP_TAIL)
    assert len(c) == CLIP_HEAD + CLIP_TAIL + 1
    assert clip_text("short") == "short"


def test_structural_features():
    u = Unit("s:3", "s", 3, "tool", "tool_result", "x" * 2000, tool_name="Bash", is_error=True)
    f = named(unit_features(u, Context(10)))
    assert {"role=tool", "kind=tool_result", "tool=shell", "is_error", "len<=3000"} <= f
    v = unit_features(u, Context(10))
    assert v[FEATURE_NAMES.index("rel_position")] == pytest.approx(3 / 9)
    # Without a session length the unit is the latest of its session.
    assert "last_in_session" in named(unit_features(u))
    assert "last_in_session" not in f


def test_text_cues():
    def cues(text, role="assistant", kind="text"):
        return named(unit_features({"role": role, "kind": kind, "text": text, "index": 0}))

    assert "cue=ack" in cues("ok, go ahead", role="user")
    assert "cue=error_word" in cues("Traceback (most recent call last):\nValueError: bad")
    assert "cue=decision_phrase" in cues("The root cause is the fake-timer race on retry 3.")
    assert "cue=constraint_word" in cues("Don't change the public API.", role="user")
    assert "cue=path_ext" in cues("see winnow/data/schema.py for the fields")
    assert "cue=url" in cues("docs at https://example.com/x")
    assert "cue=fence" in cues("```python\nprint(1)\n```")
    assert "cue=wrapper" in cues("<command-name>/clear</command-name>", role="user")
    assert "cue=housekeeping" in cues("<command-name>/clear</command-name>", role="user")
    assert "cue=boilerplate_marker" in cues("<system-reminder>x</system-reminder>", role="user")
    assert "empty" in cues("   ")
    assert "cue=question" in cues("Why does the login test fail?", role="user")


def test_cues_see_the_tail_of_long_units():
    text = "ok\n" * 3000 + "Error: exit code 1"
    assert "cue=error_word" in named(
        unit_features({"role": "tool", "kind": "tool_result", "text": text})
    )


def test_dicts_and_units_agree(rows):
    units = [Unit.from_dict(r) for r in rows]
    np.testing.assert_array_equal(batch_features(rows), batch_features(units))


def test_session_context(rows):
    contexts = session_context(rows[::-1])[::-1]  # order of the input does not matter
    by_session: dict[str, int] = {}
    for r in rows:
        by_session[r["session_id"]] = max(by_session.get(r["session_id"], 0), r["index"] + 1)
    assert [c.session_len for c in contexts] == [by_session[r["session_id"]] for r in rows]
    for i, (r, c) in enumerate(zip(rows, contexts)):
        first = i == 0 or rows[i - 1]["session_id"] != r["session_id"]
        last = i + 1 == len(rows) or rows[i + 1]["session_id"] != r["session_id"]
        assert (c.prev is None) == first and (c.next is None) == last
        if not first:
            assert c.prev["index"] == r["index"] - 1


def test_neighbour_features():
    ask = {"role": "assistant", "kind": "text", "text": "Shall I also update the docs?", "index": 0}
    reply = {"role": "user", "kind": "text", "text": "yes", "index": 1}
    call = {"role": "assistant", "kind": "tool_call", "text": "{}", "index": 2}
    f = named(unit_features(reply, Context(3, ask, call)))
    assert {"prev_kind=text", "prev_question", "next_kind=tool_call"} <= f
    assert "next_role=user" not in f and "prev_role=user" not in f
    assert not any(
        n.startswith("next_") for n in named(unit_features(reply, Context(3, ask, None)))
    )


def test_features_are_finite_and_bounded(rows):
    f = batch_features(rows)
    assert f.shape == (len(rows), N_FEATURES) and f.dtype == np.float32
    assert np.isfinite(f).all() and f.min() >= 0.0 and f.max() <= 1.5


def test_training_and_serving_compute_identical_inputs(rows, tmp_path):
    """The trainer's encoding of a split and the serving classifier's see the same numbers."""
    pytest.importorskip("torch")
    from winnow.classifier.tokenizer import UnitEncoder, train_tokenizer
    from winnow.serving.classifier import ImportanceClassifier
    from winnow.training.trainer import _encode

    encoder = UnitEncoder(train_tokenizer((r["text"] for r in rows), vocab_size=600), max_len=48)
    train_side = _encode(rows, encoder, heuristic_weight=0.3)

    serve = ImportanceClassifier.__new__(ImportanceClassifier)  # no model needed for inputs
    serve.encoder = encoder
    np.testing.assert_array_equal(serve.features(rows), train_side.features)
    assert serve.encoder.encode(rows) == train_side.ids
    one = [serve.encoder.encode_one(r)[0].tolist() for r in rows]
    assert one == train_side.ids


def test_batch_equals_unit_by_unit(rows):
    contexts = session_context(rows)
    one = np.stack([unit_features(r, c) for r, c in zip(rows, contexts)])
    np.testing.assert_array_equal(batch_features(rows), one)
    out = np.zeros((len(rows), N_FEATURES), np.float32)
    for i, (r, c) in enumerate(zip(rows, contexts)):
        unit_features(r, c, out[i])
    np.testing.assert_array_equal(out, one)


@pytest.mark.parametrize(
    "text,want",
    [
        ("The ROOT\u00a0CAUSE is the cache.", {"cue=decision_phrase"}),  # any whitespace splits
        ("the root\x1ccause is here", {"cue=decision_phrase"}),  # \x1c is whitespace to str
        ("cause the root", {"cue=decision_phrase"}),  # a phrase is its words, in any order
        ("root", set()),
        ("O\u212a", {"cue=ack", "cue=ack_word"}),  # KELVIN SIGN lower-cases to k
        ("see a/b.py and \u2028done", {"cue=path_ext", "cue=slash", "cue=status_word"}),
        ("lone \ud800 error", {"cue=error_word"}),
        ("Exit code: 1\n@@ -1 +1 @@", {"cue=diff", "cue=exit_nonzero"}),
    ],
)
def test_word_and_mark_cues(text, want):
    f = named(unit_features({"role": "user", "kind": "text", "text": text}))
    assert {n for n in f if n.startswith("cue=")} == want


@pytest.mark.parametrize("version", [3, 4])
def test_fixture_features_are_pinned(rows, version):
    """Which features of the fixture sessions are set is part of each feature spec (v3 and v4
    differ only on exit codes, which these sessions do not state): change a spec only with a
    new version (and a retrained model)."""
    f = batch_features(rows, version=version)
    digest = hashlib.sha256(np.packbits(f == 1.0).tobytes()).hexdigest()
    assert digest == "6eaf7099b3b7b627b394478e82034163391325f6be1325d3ad2d4deb1e8ab682"


CODEX_OK = (
    "Chunk ID: 5c1f\nWall time: 0.0521 seconds\nProcess exited with code 0\n"
    "Original token count: 12\nOutput:\nall 12 tests passed\n"
)


@pytest.mark.parametrize(
    "text,nonzero",
    [
        (CODEX_OK, False),  # exit code zero is success
        (CODEX_OK.replace("code 0", "code 1"), True),
        ("bash: foo: command not found\nexit code 127", True),
        ("Exit code: 2\nmake: *** [all] Error 2", True),
        ("make: *** [all] Error 2\nexit status 2", True),
        ("CalledProcessError: Command 'x' returned non-zero exit status 1.", True),
        ('{"exit_code": 3, "stdout": ""}', True),
        ("killed: exited with code -9", True),
        ("exit code 0\nexit status: 0\nreturncode=0", False),
        ("exit code 0, then exit code 10", True),  # any non-zero code
        ("Exit code 1", True),
        ("the exit code is documented in the README", False),  # no code stated
        ("exited with code 00", False),
    ],
)
def test_exit_nonzero_fires_on_a_non_zero_exit_code_only(text, nonzero):
    unit = {"role": "tool", "kind": "tool_result", "text": text}
    assert ("cue=exit_nonzero" in named(unit_features(unit))) is nonzero


def test_spec_v3_is_still_computed_as_it_was():
    """Models trained on v3 (winnow-small until its retraining) are served with v3's cue: its
    substrings, "exited with" included."""
    unit = {"role": "tool", "kind": "tool_result", "text": CODEX_OK}
    assert "cue=exit_nonzero" in named(unit_features(unit, version=3))
    assert "cue=exit_nonzero" not in named(unit_features(unit, version=4))
    late = {"role": "tool", "kind": "tool_result", "text": "x\nexit status 2"}
    assert "cue=exit_nonzero" not in named(unit_features(late, version=3))
    np.testing.assert_array_equal(
        batch_features([unit], version=3)[0], unit_features(unit, version=3)
    )


def test_unknown_feature_spec_is_refused():
    assert FEATURE_VERSION == max(FEATURE_VERSIONS)
    with pytest.raises(ValueError, match="feature spec v99: this winnow computes v3, v4"):
        unit_features({"text": "x"}, version=99)
    with pytest.raises(ValueError, match="feature spec v2"):
        batch_features([{"text": "x"}], version=2)
