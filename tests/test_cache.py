"""Rendering to the provider formats and cache-aware compression (stable prefix, breakpoints)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from render_checks import assert_valid_anthropic, assert_valid_openai
from test_compressor import COMPRESSOR, FORMATS, REAL, transcripts, unit

from winnow.serving.cache import CacheAwareCompressor, CacheConfig
from winnow.serving.render import min_cacheable_tokens, scrub_volatile, to_anthropic, to_openai
from winnow.serving.tokens import sent_tokens, unit_tokens


@pytest.mark.parametrize("name", FORMATS)
def test_real_excerpts_render_valid(name: str) -> None:
    units = REAL[name]
    assert_valid_anthropic(to_anthropic(units))
    assert_valid_openai(to_openai(units))
    total = sum(unit_tokens(u, COMPRESSOR.counter) for u in units)
    try:
        out = COMPRESSOR.compress(units, int(total * 0.3)).units
    except ValueError:  # must-keep overflow on this excerpt: nothing to render
        return
    assert_valid_anthropic(to_anthropic(out))
    assert_valid_openai(to_openai(out))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(units=transcripts(), share=hs.floats(0.05, 1.0))
def test_generated_transcripts_render_valid(units, share) -> None:
    assert_valid_anthropic(to_anthropic(units))
    assert_valid_openai(to_openai(units))
    total = sum(unit_tokens(u, COMPRESSOR.counter) for u in units)
    try:
        out = COMPRESSOR.compress(units, max(1, int(total * share))).units
    except ValueError:
        return
    if out:
        assert_valid_anthropic(to_anthropic(out))
        assert_valid_openai(to_openai(out))


def test_render_shapes() -> None:
    units = [
        unit(0, "boilerplate", "You are a coding agent.", "system"),
        unit(1, "requirement", "Fix the login bug.", "user"),
        unit(2, "status", "Let me look.", "assistant", "thinking"),
        unit(
            3,
            "status",
            '{"file_path":"a.py"}',
            "assistant",
            "tool_call",
            tool_name="Read",
            call_id="t/1",
        ),
        unit(4, "code", "def login(): ...", "tool", "tool_result", tool_name="Read", call_id="t/1"),
        unit(
            5,
            "status",
            '{"command":"pytest"}',
            "assistant",
            "tool_call",
            tool_name="Bash",
            call_id="t2",
        ),
    ]
    body = to_anthropic(units, [(1, "1h"), (4, "5m")])
    assert body["system"] == [{"type": "text", "text": "You are a coding agent."}]
    first, call, results, call2, pending = body["messages"]
    assert first["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert [b["type"] for b in call["content"]] == ["text", "tool_use"]
    assert call["content"][0]["text"] == "[thinking] Let me look."
    assert call["content"][1] == {
        "type": "tool_use",
        "id": "t_1",
        "name": "Read",
        "input": {"file_path": "a.py"},
    }
    assert results["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "t_1",
            "content": "def login(): ...",
            "cache_control": {"type": "ephemeral", "ttl": "5m"},
        }
    ]
    assert call2["content"][0]["input"] == {"command": "pytest"}
    assert pending["content"] == [
        {"type": "tool_result", "tool_use_id": "t2", "content": "[no result recorded]"}
    ]
    assert "tools" not in body
    assert [t["name"] for t in to_anthropic(units, tools=True)["tools"]] == ["Bash", "Read"]
    assert to_openai(units, tools=True)["tools"][0] == {
        "type": "function",
        "function": {"name": "Bash", "parameters": {"type": "object"}},
    }
    oa = to_openai(units)["messages"]
    assert [m["role"] for m in oa] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert oa[4]["tool_calls"][0]["function"] == {
        "name": "Bash",
        "arguments": '{"command":"pytest"}',
    }
    with pytest.raises(ValueError, match="1h cache breakpoint cannot come after"):
        to_anthropic(units, [(1, "5m"), (4, "1h")])
    with pytest.raises(ValueError, match="at most 4"):
        to_anthropic(units, [(i, "5m") for i in range(5)])


def test_scrub_masks_timestamps() -> None:
    assert scrub_volatile("built 2026-02-13T09:22:03.454Z ok") == "built <time> ok"
    assert min_cacheable_tokens("claude-3-5-haiku-latest") == 2048
    assert min_cacheable_tokens("claude-sonnet-4-6") == 1024


# --- cache-aware compression ----------------------------------------------------------------


def conversation() -> list:
    """A real session (claude_code and codex excerpts back to back) as one growing conversation."""
    return [
        dataclasses.replace(u, session_id="conv", index=i)
        for i, u in enumerate(REAL["claude_code"] + REAL["codex"])
    ]


def prefix_bytes(body: dict, nth: int = -1) -> bytes:
    """What a prompt cache matches for a 1h breakpoint (the last by default): everything up to
    and including that block."""
    blocks: list = [("system", b) for b in body.get("system", [])]
    blocks += [(i, m["role"], b) for i, m in enumerate(body["messages"]) for b in m["content"]]
    marked = [i for i, b in enumerate(blocks) if b[-1].get("cache_control", {}).get("ttl") == "1h"]
    if not marked:
        return b""
    # the markers themselves are not content: the cache matches what they enclose
    content = [(*b[:-1], {k: v for k, v in b[-1].items() if k != "cache_control"}) for b in blocks]
    return json.dumps(content[: marked[nth] + 1], ensure_ascii=False).encode()


def test_appending_turns_keeps_the_rendered_prefix_byte_identical() -> None:
    full = conversation()
    cac = CacheAwareCompressor(
        COMPRESSOR, CacheConfig(keep_last_steps=2, split_every=4, min_cacheable_tokens=1024)
    )
    early, later = full[:54], full
    assert cac.split(early) == cac.split(later) > 0  # the split does not move
    first = cac.compress(early, 6000)
    second = cac.compress(later, 6000)
    assert first.prefix_len > 0 and first.breakpoints[0][1] == "1h"
    a, b = first.to_anthropic(), second.to_anthropic()
    assert_valid_anthropic(a)
    assert_valid_anthropic(b)
    assert prefix_bytes(a) == prefix_bytes(b)
    assert len(prefix_bytes(a)) > 4000
    assert first.tokens_after <= 6000 and second.tokens_after <= 6000
    assert second.suffix.tokens_before > first.suffix.tokens_before


def test_cache_hit_on_the_wire() -> None:
    """Both requests through the Anthropic SDK to the loopback server: the second reads the prefix
    from its (simulated) cache."""
    anthropic = pytest.importorskip("anthropic")
    from llm_server import LLMServer

    full = conversation()
    cac = CacheAwareCompressor(
        COMPRESSOR, CacheConfig(keep_last_steps=2, split_every=4, min_cacheable_tokens=1024)
    )
    with LLMServer(replies=["ok", "ok"]) as srv:
        client = anthropic.Anthropic(base_url=srv.base_url, api_key="test", max_retries=0)
        usages = []
        for units in (full[:54], full):
            body = cac.compress(units, 6000).to_anthropic()
            msg = client.messages.create(model="claude-sonnet-4-6", max_tokens=16, **body)
            usages.append(msg.usage)
        prefix = len(prefix_bytes(body))
    assert usages[1].cache_read_input_tokens >= prefix // 4 * 0.9


def test_split_after_the_last_phase_boundary_and_never_inside_a_pair() -> None:
    cac = CacheAwareCompressor(COMPRESSOR, CacheConfig(keep_last_steps=100))
    units = REAL["claude_code"][:11]  # the four Glob/Grep calls and their results
    summary = unit(
        11,
        "requirement",
        "This session is being continued from a previous conversation. Summary: ...",
        "user",
    )
    tail = REAL["claude_code"][11:]
    assert cac.split(units + [summary] + tail) == 12
    # a boundary right after a call moves the split past the call's result
    call = unit(0, "status", "{}", "assistant", "tool_call", tool_name="Bash", call_id="c")
    note = unit(1, "status", "## Phase 2: tests", "assistant")
    res = unit(2, "tool_output", "ok", "tool", "tool_result", tool_name="Bash", call_id="c")
    assert cac.split([call, note, res, unit(3, "status", "next")]) == 3


def test_breakpoints_respect_minimum_length_and_order() -> None:
    full = conversation()
    for model, minimum in (("claude-sonnet-4-6", 1024), ("claude-haiku-4-5", 2048)):
        cac = CacheAwareCompressor(
            COMPRESSOR, CacheConfig(keep_last_steps=4, split_every=8, model=model)
        )
        out = cac.compress(full, 8000)
        cum = 0
        marks = {}
        for i, u in enumerate(out.units):
            cum += unit_tokens(u, COMPRESSOR.counter)
            marks[i] = cum
        assert out.breakpoints and len(out.breakpoints) <= 4
        for pos, _ttl in out.breakpoints:
            assert marks[pos] >= minimum
        assert [t for _p, t in out.breakpoints] == sorted(
            (t for _p, t in out.breakpoints), key=["1h", "5m"].index
        )


def test_prefix_is_memoized() -> None:
    class Counting:
        calls = 0

        def summarize(self, texts, max_tokens):
            Counting.calls += 1
            return f"summary {Counting.calls}"  # non-deterministic, like an LLM

    from winnow.serving.compressor import SemanticCompressor

    comp = SemanticCompressor(classifier=object(), summarizer=Counting())
    cac = CacheAwareCompressor(
        comp, CacheConfig(keep_last_steps=2, split_every=4, prefix_share=0.3)
    )
    full = conversation()
    a = cac.compress(full[:54], 5000)
    summaries = Counting.calls
    b = cac.compress(full, 5000)
    # every summary is new text, so equal prefixes mean the memo answered
    assert a.prefix.units == b.prefix.units and summaries > 0
    assert any(u.extra.get("strategy") == "summarize" for u in a.prefix.units)
    assert prefix_bytes(a.to_anthropic()) == prefix_bytes(b.to_anthropic())


def renumber(units: list, offset: int) -> list:
    return [
        dataclasses.replace(
            u,
            id=f"s:{u.index + offset}",
            index=u.index + offset,
            call_id=f"{u.call_id}+{offset}" if u.call_id else None,
        )
        for u in units
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(units=transcripts(), more=transcripts().map(lambda m: m[:3]), share=hs.floats(0.3, 1.0))
def test_generated_prefix_is_stable_under_appends(units, more, share) -> None:
    # a few units appended mostly leave the split where it was (3 in 4 examples here)
    cac = CacheAwareCompressor(
        COMPRESSOR, CacheConfig(keep_last_steps=1, split_every=4, min_cacheable_tokens=1)
    )
    later = units + renumber(more, len(units))
    if not 0 < cac.split(units) == cac.split(later):
        return
    limit = max(1, int(sent_tokens(later, "anthropic") * share))
    try:
        a, b = cac.compress(units, limit), cac.compress(later, limit)
    except ValueError:  # must-keep overflow
        return
    assert a.tokens_after <= limit and b.tokens_after <= limit
    assert a.tokens_after == sent_tokens(a.units, "anthropic")
    # compressed both times on the same rung of the ladder: the same prefix, to the byte
    if a.ratio is not None and a.ratio == b.ratio:
        assert a.prefix.units == b.prefix.units
        if any(t == "1h" for _p, t in a.breakpoints):
            assert prefix_bytes(a.to_anthropic()) == prefix_bytes(b.to_anthropic())


def test_the_output_uses_the_limit_and_accounts_for_every_unit() -> None:
    full = conversation()
    for share in (0.1, 0.2, 0.3, 0.5):
        cac = CacheAwareCompressor(
            COMPRESSOR, CacheConfig(keep_last_steps=2, split_every=2, prefix_share=0.2)
        )
        out = cac.compress(full, f"{share:.0%}")
        limit = out.token_limit
        assert limit == int(sent_tokens(full, "anthropic") * share)
        assert 0.9 * limit <= out.tokens_after == sent_tokens(out.units, "anthropic") <= limit
        assert out.prefix.tokens_after < out.prefix.tokens_before
        if share >= 0.3:  # room for the must-keep units: blocks on a rung of the ladder
            assert out.ratio is not None
        assert [r.id for r in out.records] == [u.id for u in full]
        ids = {u.id for u in out.units}
        for r in out.records:
            assert (r.output_id is None) == (r.action == "dropped")
            assert r.output_id is None or r.output_id in ids
        assert_valid_anthropic(out.to_anthropic())


def test_under_the_limit_nothing_changes_and_the_prefix_is_still_marked() -> None:
    full = conversation()
    cac = CacheAwareCompressor(COMPRESSOR, CacheConfig(keep_last_steps=2, split_every=4))
    out = cac.compress(full, 10**6)
    assert [u.to_dict() for u in out.units] == [u.to_dict() for u in full]
    assert out.ratio is None and out.prefix_len > 0
    assert any(t == "1h" for _p, t in out.breakpoints)


def test_a_new_block_still_hits_the_previous_prefix() -> None:
    """When the split moves on by a block, a 1h breakpoint stays where the last call put its
    own: the new request reads that entry and writes the longer one."""
    full = conversation()
    cac = CacheAwareCompressor(
        COMPRESSOR, CacheConfig(keep_last_steps=2, split_every=2, min_cacheable_tokens=500)
    )
    early, later = cac.compress(full[:54], 20000), cac.compress(full, 20000)
    assert later.split > early.split
    a, b = early.to_anthropic(), later.to_anthropic()
    assert prefix_bytes(a) == prefix_bytes(b, nth=-2)
    assert len(prefix_bytes(b)) > len(prefix_bytes(a)) > 2000
    assert_valid_anthropic(b)


def test_a_limit_counts_the_timestamps_masked_as_sent() -> None:
    """Cache-aware rendering masks timestamps; the limit counts the request as sent, masked
    (a real session whose suffix held a timestamped CI log was allocated as if unmasked and
    sent 83% of its limit; 95% now)."""
    from winnow.serving.tokens import read_back

    log = "\n".join(
        f"2026-06-17T10:{i % 60:02d}:02.6691559Z step {i}: compiled module_{i}.go in {i} ms"
        for i in range(120)
    )
    units = [unit(0, "requirement", "Find out why CI is slow and fix it.", "user")]
    for s in range(12):
        units += [
            unit(1 + 3 * s, "status", f"Step {s}: reading the next job log.", "assistant"),
            unit(2 + 3 * s, "status", json.dumps({"cmd": f"gh run view {s} --log"}), "assistant",
                 "tool_call", tool_name="Bash", call_id=f"c{s}"),
            unit(3 + 3 * s, "tool_output", log, "tool", "tool_result", tool_name="Bash",
                 call_id=f"c{s}"),
        ]  # fmt: skip
    cac = CacheAwareCompressor(COMPRESSOR, CacheConfig(model="claude-sonnet-4-6"))
    limit = int(sent_tokens(units, "anthropic") * 0.3)
    result = cac.compress(units, limit)
    body = result.to_anthropic()
    sent = sum(unit_tokens(u, COMPRESSOR.counter) for u in read_back(body, "anthropic"))
    assert sent == result.sent_after <= limit
