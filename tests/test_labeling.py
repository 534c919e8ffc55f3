"""Heuristic labelling: LFs on real units, TAXONOMY boundary rules, LF analysis, label join, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from winnow.data import cues
from winnow.data.labeling import (
    LF,
    Labeler,
    LFAnalysis,
    apply_labels,
    evaluate_labeler,
    load_labels,
)
from winnow.data.schema import Unit

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "labeling" / "units.jsonl"
TRACES = ROOT.parent / "shared" / "traces"
S = "37a27d31-4a70-427b-8518-5fad6045d347"  # a real Claude Code session (merge conflicts)


@pytest.fixture(scope="module")
def real():
    units = [Unit.from_dict(json.loads(line)) for line in FIXTURE.read_text().splitlines()]
    return {lu.unit.id: lu for lu in Labeler().label(units)}


@pytest.mark.parametrize(
    "uid, category",
    [
        (f"{S}:0", "requirement"),  # first user message of the session
        (f"{S}:1", "boilerplate"),  # assistant text "\n\n"
        (f"{S}:2", "status"),  # thinking that restates the request
        (f"{S}:3", "status"),  # "Let me check the current state..."
        (f"{S}:4", "status"),  # Bash `git status`
        (f"{S}:15", "error"),  # "Exit code 1 ... CONFLICT"
        (f"{S}:20", "status"),  # Read call
        (f"{S}:22", "code"),  # Read result with file contents
        (f"{S}:27", "tool_output"),  # Grep hits
        (f"{S}:30", "code"),  # Edit call
        (f"{S}:31", "tool_output"),  # "The file ... has been updated successfully."
        (f"{S}:36", "boilerplate"),  # empty tool result
        ("5a6312ee-5752-4b7a-9ad2-6c3b1b5f4c8a:0", "boilerplate"),  # local-command caveat
        ("5a6312ee-5752-4b7a-9ad2-6c3b1b5f4c8a:1", "boilerplate"),  # /clear
        ("d64b50bb-125b-4b54-867a-e59841e553d8:5", "boilerplate"),  # [Request interrupted ...]
        ("0f6074fc-a0f5-4d56-8de0-f4a592ddcf3b:30", "acknowledgment"),  # "yes please"
        ("130d7b7e-5801-4345-9bd6-f32fd9b8429b:17", "decision"),  # TodoWrite plan
        ("019f15f7-b472-7bc3-8651-5547781e25cf:124", "error"),  # Codex "Process exited with code 1"
        (
            "019eef3d-abd1-72e1-ab99-dcdb259027c5:347",
            "constraint",
        ),  # "we don't need backward compat..."
    ],
)
def test_real_units(real, uid, category):
    lu = real[uid]
    assert lu.category == category, (lu.unit.text[:80], lu.label_source, lu.votes)


def test_every_unit_records_its_deciding_lf(real):
    for lu in real.values():
        assert lu.label_source.startswith("lf:")
        assert (lu.label_source[3:], lu.category) in lu.votes
        assert lu.to_dict()["label_votes"] == len(lu.votes) >= 1


def _session(*specs: tuple, **extra_by_index) -> list[Unit]:
    """Units of one session from (role, kind, text[, tool_name, call_id, is_error]) tuples."""
    out = []
    for i, (role, kind, text, *rest) in enumerate(specs):
        tool, call, err = (list(rest) + [None, None, None])[:3]
        out.append(
            Unit(
                f"s:{i}",
                "s",
                i,
                role,
                kind,
                text,
                tool,
                call,
                err,
                extra=extra_by_index.get(f"u{i}", {}),
            )
        )
    return out


def _labels(units):
    return [lu.category for lu in Labeler().label(units)]


def test_boundary_rules():
    units = _session(
        ("user", "text", "Add rate limiting to the login endpoint, max 5 tries a minute"),
        ("assistant", "text", "Let me look at the tests."),
        ("assistant", "tool_call", '{"pattern":"**/login*"}', "Glob", "c1"),
        ("tool", "tool_result", "", "Glob", "c1"),
        ("assistant", "text", "Done."),
        ("user", "text", "yes, go ahead"),
        ("user", "text", "Don't change the public API; we are on Python 3.9"),
        (
            "assistant",
            "text",
            "The flake is a fake-timer race on retry 3, not the server heartbeat.",
        ),
        ("assistant", "tool_call", '{"command":"pytest -x"}', "Bash", "c2"),
        (
            "tool",
            "tool_result",
            "FAILED tests/test_auth.py::test_lockout - AssertionError",
            "Bash",
            "c2",
        ),
        ("user", "text", "<command-name>/review</command-name>\n<command-args>12</command-args>"),
        (
            "user",
            "text",
            "This session is being continued from a previous conversation that ran out of context.",
        ),
        ("assistant", "tool_call", '{"command":"ls"}', "Bash", "c3"),
        ("tool", "tool_result", "Error: permission denied", "Bash", "c3", True),
        (
            "assistant",
            "thinking",
            "We could either cache the tokens or recompute them; maybe caching is simpler, not sure.",
        ),
    )
    assert _labels(units) == [
        "requirement",
        "status",
        "status",
        "boilerplate",
        "status",
        "acknowledgment",
        "constraint",
        "decision",
        "status",
        "error",
        "requirement",
        "requirement",
        "status",
        "error",
        "explanation",
    ]


def test_compaction_and_architecture():
    units = _session(
        ("user", "text", "Fix the flaky test in cmd/root.go"),
        ("user", "text", "Summary of where we are: tests fixed", None, None, None),
        ("user", "text", "Your task is to create a detailed summary of the conversation so far."),
        (
            "assistant",
            "text",
            "The CLI parses args in cmd/root.go, then calls the strategy in strategy/manual.go; "
            "the strategy module handles checkpoints.",
        ),
        ("assistant", "text", "All green."),
        u1={"compact_summary": True},
    )
    assert _labels(units) == ["requirement", "requirement", "boilerplate", "architecture", "status"]


def test_work_summary_is_explanation_and_final_reference_leans_decision():
    units = _session(
        ("user", "text", "make the retry limit configurable"),
        (
            "assistant",
            "text",
            "Retries live in `retryPolicy` of net/client.go, and `maxTries` is a constant there; "
            "it has to come from the config.",
        ),
        ("assistant", "tool_call", '{"file_path":"net/client.go"}', "Edit", "c1"),
        (
            "assistant",
            "text",
            "Done. Changed `retryPolicy` in net/client.go to read `maxTries` from the config; "
            "added a test in net/client_test.go and all tests pass.",
        ),
    )
    out = Labeler().label(units)
    assert [lu.category for lu in out] == ["requirement", "decision", "code", "explanation"]
    assert out[1].label_source == "lf:final_reference"
    assert out[3].label_source == "lf:work_summary"


def test_resolution_policy_tier_then_priority():
    """The highest tier that voted wins; inside it, the category higher in TAXONOMY."""
    lfs = [
        LF("low_decision", 1, lambda u, s, i: "decision"),
        LF("mid_status", 2, lambda u, s, i: "status"),
        LF("mid_error", 2, lambda u, s, i: "error" if "x" in u.text else None),
    ]
    units = _session(("assistant", "text", "x"), ("assistant", "text", "y"))
    out = Labeler(lfs=lfs).label(units)
    assert [(lu.category, lu.label_source) for lu in out] == [
        ("error", "lf:mid_error"),
        ("status", "lf:mid_status"),
    ]


def test_lf_analysis_by_hand():
    # Four units, three LFs:
    #   a votes status on u0,u1,u2; b votes status on u1, error on u2; c votes code on u3.
    lfs = [
        LF("a", 2, lambda u, s, i: "status" if i < 3 else None),
        LF("b", 2, lambda u, s, i: {1: "status", 2: "error"}.get(i)),
        LF("c", 2, lambda u, s, i: "code" if i == 3 else None),
    ]
    units = _session(*[("assistant", "text", f"t{i}") for i in range(4)])
    labeled = Labeler(lfs=lfs).label(units)
    a = LFAnalysis.from_labeled(labeled, lfs)
    np.testing.assert_allclose(a.coverage(), [3 / 4, 2 / 4, 1 / 4])
    np.testing.assert_allclose(a.overlaps(), [2 / 4, 2 / 4, 0])
    np.testing.assert_allclose(a.conflicts(), [1 / 4, 1 / 4, 0])
    # u0,u1 decided by a; u2 by b (error outranks status); u3 by c.
    np.testing.assert_allclose(a.decided_share(), [2 / 4, 1 / 4, 1 / 4])
    assert a.label_distribution() == {"status": 2, "error": 1, "code": 1}
    assert [r["polarity"] for r in a.summary()] == [["status"], ["error", "status"], ["code"]]


def test_labels_join_reports_bad_lines_and_first_file_wins(tmp_path):
    f1 = tmp_path / "a.jsonl"
    f1.write_text(
        '{"id": "s:0", "category": "constraint"}\n'
        "{not json\n"
        '{"id": "s:1", "category": "important"}\n'
        '{"id": "nope:9", "category": "status"}\n'
        "\n"
        '{"category": "status"}\n'
    )
    f2 = tmp_path / "b.jsonl"
    f2.write_text('{"id": "s:0", "category": "requirement"}\n{"id": "s:1", "category": "status"}\n')
    join = load_labels([f1, f2], known_ids={"s:0", "s:1"})
    assert join.labels == {"s:0": "constraint", "s:1": "status"}
    assert [p.split(": ", 1)[0] for p in join.problems] == [f"{f1}:2", f"{f1}:3", f"{f1}:6"]
    assert "unknown category 'important'" in join.problems[1]
    assert join.unknown == {str(f1): 1}  # a label of other data: counted, not a bad line
    assert len(join.disagreements) == 1 and join.disagreements[0].startswith(f"{f2}:1: s:0")

    labeled = Labeler().label(_session(("user", "text", "fix it"), ("assistant", "text", "ok")))
    assert apply_labels(labeled, join.labels) == 2
    assert [(lu.category, lu.label_source) for lu in labeled] == [
        ("constraint", "hand"),
        ("status", "hand"),
    ]


def test_evaluate_labeler():
    gold = {"a": "status", "b": "status", "c": "error", "d": "code"}
    pred = {"a": "status", "b": "error", "c": "error", "d": "code", "e": "status"}
    r = evaluate_labeler(pred, gold)
    assert r.n == 4 and r.accuracy == pytest.approx(3 / 4)
    assert r.per_category["status"]["precision"] == pytest.approx(1.0)
    assert r.per_category["status"]["recall"] == pytest.approx(0.5)
    assert r.per_category["error"]["precision"] == pytest.approx(0.5)
    assert r.per_category["error"]["f1"] == pytest.approx(2 / 3)
    assert r.macro_f1 == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)
    assert r.confusion.sum() == 4


def test_cues_are_compiled_once_and_cheap():
    assert cues.slash_command("<command-name>/clear</command-name>") == ("clear", "")
    assert cues.slash_command("/review 12") == ("review", "12")
    assert cues.slash_command("/usr/bin/env python") is None
    assert cues.extract_identifiers("see ENT-207 in cmd/root.go: resolveAgentType()") >= {
        "ENT-207",
        "cmd/root.go",
        "root.go",
        "resolveAgentType",
    }
    assert cues.shell_command_kind("cat > a.py <<EOF") == "write"
    assert cues.shell_command_kind("go test ./...") == "test"
    assert cues.shell_command_kind("git status") == "read"
    assert len(cues.cue_vector("Done.")) == len(cues.CUE_FUNCTIONS)


@pytest.mark.parametrize(
    "fn, text, expected",
    [
        (cues.is_boilerplate_marker, "Now let me run the tests.", False),
        (cues.is_boilerplate_marker, "<system-reminder>x</system-reminder>", True),
        (cues.is_placeholder, "(Bash completed with no output)", True),
        (
            cues.is_placeholder,
            "Chunk ID: 79ed2f\nWall time: 0.4 seconds\nProcess exited with code 0\nOriginal token count: 0\nOutput:\n",
            True,
        ),
        (cues.is_placeholder, "Already up to date.", False),
        (cues.has_decision_words, "The root cause is a stale cache.", True),
        (cues.has_decision_words, "This could be the root cause, let me check.", False),
        (cues.has_error_signal, "ok  \tentire.io/cli\t2.1s", False),
        (cues.has_error_signal, "paths.go:149:28: undefined: regexp", True),
        (cues.is_acknowledgment, "yes, go ahead", True),
        (cues.is_acknowledgment, "yes, but also fix the docs", False),
        (cues.is_announcement, "Formatting and linting pass. Let me run the tests.", True),
        (cues.is_announcement, "The cache is stale because the key ignores the locale.", False),
    ],
)
def test_cue_cases(fn, text, expected):
    assert fn(text) is expected


def test_label_command_on_transcript_with_labels(tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    from winnow.cli import main

    labels = tmp_path / "gold.jsonl"
    labels.write_text(
        f'{{"id": "{S}:3", "category": "decision"}}\n{{"id": "{S}:0", "category": "bogus"}}\n'
    )
    out = tmp_path / "labeled.parquet"
    rc = main(["label", str(FIXTURE), "-o", str(out), "--labels", str(labels), "--report"])
    assert rc == 0
    captured = capsys.readouterr()
    assert f"{labels}:2: unknown category 'bogus'" in captured.err
    assert "labelling functions" in captured.out and "accuracy 0.0%" in captured.out
    t = pq.read_table(out)
    assert {"id", "text", "category", "label_source", "label_votes", "hand_label"} <= set(
        t.column_names
    )
    rows = {r["id"]: r for r in t.to_pylist()}
    assert rows[f"{S}:3"]["category"] == "decision" and rows[f"{S}:3"]["hand_label"]
    assert rows[f"{S}:3"]["label_source"] == "hand"
    assert sum(r["hand_label"] for r in rows.values()) == 1


def test_import_does_not_pull_torch():
    code = "import winnow.data.labeling, winnow.data.dataset, winnow.data.label_commands, sys; print('torch' in sys.modules or 'datasets' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "False"


@pytest.mark.traces
@pytest.mark.skipif(not TRACES.is_dir(), reason="needs ../shared/traces")
def test_real_trace_sessions_are_fully_labelled():
    from winnow.data.readers import read_paths

    units = list(read_paths([TRACES / "entireio-cli" / "d6"]))
    assert units
    labeled = Labeler().label(units)
    assert len(labeled) == len(units)
    cats = {lu.category for lu in labeled}
    assert {"requirement", "code", "status", "tool_output"} <= cats
    a = LFAnalysis.from_labeled(labeled)
    assert a.coverage()[-1] == 1.0  # the fallback LF covers every unit


def test_commit_calls_and_edit_errors():
    body = (
        "fix: keep the cache outside the module tree\n\n"
        + "Downloading modules into the tree made tidy fail; " * 4
    )
    units = _session(
        ("user", "text", "fix the release build"),
        (
            "assistant",
            "tool_call",
            json.dumps({"command": f"git commit -m {json.dumps(body)}"}),
            "Bash",
            "c1",
        ),
        ("assistant", "tool_call", json.dumps({"command": "git commit -m 'wip'"}), "Bash", "c2"),
        ("assistant", "tool_call", '{"command":"edit 3:3"}', "edit", "c3"),
        (
            "tool",
            "tool_result",
            "Your proposed edit has introduced new syntax error(s).\nE999 SyntaxError",
            "edit",
            "c3",
        ),
    )
    # a commit is a progress step however long its message (data/labels/README.md)
    assert _labels(units) == ["requirement", "status", "status", "code", "error"]


def test_label_command_unknown_ids_are_one_line_and_empty_report_fails(tmp_path, capsys):
    from winnow.cli import main

    other = tmp_path / "gold.jsonl"  # labels of units that are not in this input
    other.write_text("".join(f'{{"id": "other:{i}", "category": "status"}}\n' for i in range(500)))
    out = tmp_path / "labeled.parquet"
    rc = main(["label", str(FIXTURE), "-o", str(out), "--labels", str(other), "--report"])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"500 labels name units not in this input (500 in {other}): ignored" in err
    assert err.count("other:") == 0, "no line per unknown id"
    assert "--report has nothing to score" in err
    assert not out.exists() and not list(tmp_path.glob(".*tmp")), "a failed job writes nothing"

    assert main(["label", str(FIXTURE), "-o", str(out), "--labels", str(other)]) == 0
    assert out.exists()


def test_labels_file_with_a_byte_order_mark_or_a_deep_line(tmp_path):
    """A label file saved by an editor that writes a BOM keeps its first label; a line nested
    10^5 deep is one bad line, not a RecursionError."""
    labels = tmp_path / "gold.jsonl"
    labels.write_bytes(
        b"\xef\xbb\xbf"
        + b'{"id": "s:0", "category": "constraint"}\n'
        + b"[" * 100_000
        + b"]" * 100_000
        + b'\n{"id": "s:1", "category": "status"}\n'
    )
    join = load_labels([labels], known_ids={"s:0", "s:1"})
    assert join.labels == {"s:0": "constraint", "s:1": "status"}
    assert len(join.problems) == 1 and join.problems[0].startswith(f"{labels}:2: ")


def test_the_labeller_follows_the_hand_label_conventions():
    skill = "Base directory for this skill: /repo/.claude/skills/commit\n\n# Commit\n\nUse conventional commits."
    units = _session(
        ("user", "text", "fix the flaky login test"),
        ("user", "text", skill),  # a skill launched bare: its rules
        ("user", "text", skill + "\n\nARGUMENTS: add OSC 133 to fish"),  # it carries the task
        ("assistant", "tool_call", '{"todos":[{"content":"fix it"}]}', "TodoWrite", "c1"),
        ("tool", "tool_result", "Todos have been modified successfully.", "TodoWrite", "c1"),
        ("assistant", "tool_call", '{"subject":"Fix login"}', "TaskCreate", "c2"),
        ("tool", "tool_result", "Task #7 created successfully: Fix login", "TaskCreate", "c2"),
        ("user", "text", "<bash-input>git status</bash-input>"),
    )
    assert _labels(units)[1:3] == ["constraint", "requirement"]
    # receipts that only confirm are tool output; a command the user ran is a status step
    assert _labels(units)[4] == _labels(units)[6] == "tool_output"
    assert _labels(units)[7] == "status"


def test_settled_categories_are_harness_facts():
    def settled(role: str, kind: str, text: str) -> str | None:
        return cues.settled_category(Unit("s:0", "s", 0, role, kind, text))

    assert settled("system", "text", "<skills_instructions>\n## Skills\n- review") == "boilerplate"
    assert (
        settled("system", "text", "litellm.APIError: APIError: OpenAIException - boom") == "error"
    )
    answer = "Add file to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: y"
    assert settled("user", "text", answer) == "acknowledgment"
    receipt = "Async agent launched successfully. agentId: a1b2"
    assert settled("tool", "tool_result", receipt) == "tool_output"
    assert (
        settled("user", "text", "# AGENTS.md instructions for /repo\n\nRun tests.") == "constraint"
    )
    demo = Unit("s:1", "s", 1, "user", "text", "Here is a demonstration of how to correctly "
                "accomplish this task.", extra={"is_demo": True})  # fmt: skip
    assert cues.settled_category(demo) == "boilerplate"  # SWE-agent marks its demonstrations
    # the user's own words, an assistant's text and other tool output are the model's to call
    assert settled("user", "text", "Fix the ValueError: it breaks the login") is None
    assert settled("assistant", "text", "ValueError: the parser rejects it") is None
    assert settled("tool", "tool_result", "ValueError: bad input") is None


@pytest.mark.traces
@pytest.mark.skipif(not TRACES.is_dir(), reason="needs ../shared/traces")
def test_the_hand_labels_never_give_an_assistant_text_the_task():
    """`cues.excluded_categories` takes requirement and constraint away from an assistant's
    text and thinking whatever a model says: the hand labels must agree on every such unit."""
    from winnow.data.readers import read_paths

    gold = load_labels([ROOT / "data" / "labels" / "gold.jsonl"]).labels
    ruled = [(u, gold[u.id]) for u in read_paths([TRACES]) if u.id in gold]
    ruled = [(u, g) for u, g in ruled if cues.excluded_categories(u)]
    assert len(ruled) > 3000
    assert [u.id for u, g in ruled if g in cues.excluded_categories(u)] == []


def test_the_result_of_reading_a_rules_file_is_settled_by_its_call():
    def call(i: int, name: str, args: str) -> Unit:
        return Unit(f"s:{i}", "s", i, "assistant", "tool_call", args, name, f"c{i}")

    def result(i: int, text: str, err: bool | None = None) -> Unit:
        return Unit(f"s:{i + 1}", "s", i + 1, "tool", "tool_result", text, None, f"c{i}", err)

    reads = [
        call(0, "Read", '{"file_path":"/repo/.claude/skills/commit/SKILL.md"}'),
        call(2, "exec_command", '{"cmd":"sed -n \'1,140p\' AGENTS.md"}'),
        call(4, "run_terminal_cmd", '{"command":"cat .cursor/rules/minsky-workflow.mdc"}'),
        call(6, "fetch_rules", '{"rule_names":["testing"]}'),
    ]
    others = [
        call(8, "Read", '{"file_path":"/repo/src/app.py"}'),
        call(10, "Bash", '{"command":"git add AGENTS.md && git commit -m docs"}'),
        call(12, "Bash", '{"command":".claude/skills/test-repo/harness.sh verify"}'),
    ]
    settle = cues.Settler()
    for c in reads:
        assert (
            settle(c) is None and settle(result(c.index, "Rules: run the tests.")) == "constraint"
        )
    for c in others:
        assert settle(c) is None and settle(result(c.index, "some output")) is None
    # a failed or empty read is not the rules
    failed = call(14, "Read", '{"file_path":"/repo/CLAUDE.md"}')
    settle(failed)
    assert settle(result(14, "File does not exist.", err=True)) is None
    assert cues.Settler()(result(0, "Rules: run the tests.")) is None  # the call not seen
