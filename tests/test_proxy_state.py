"""The proxy's planner without HTTP: request parsing, digests, the prefix memo, breakpoints."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_validate import validate_anthropic, validate_openai
from hypothesis import given, settings
from hypothesis import strategies as st

from winnow.serving.compressor import CompressorConfig, SemanticCompressor
from winnow.serving.proxy_compress import default_compressor
from winnow.serving.proxy_state import Rewriter, RewriterConfig
from winnow.serving.proxy_wire import message_digest, parse_request, text_digest

TOOLS = [{"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}}]


@pytest.fixture(scope="module")
def compressor():
    return default_compressor()


def conversation(
    steps: int, *, marker: dict | None = None, marks: int = 1
) -> list[list[dict[str, Any]]]:
    """The message lists of a growing tool loop, one per request; the newest block of the
    newest `marks` user messages carries `marker`, as harnesses place their breakpoints."""
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "Fix the flaky test in tests/test_api.py; keep the schema."}
    ]
    out = []
    for i in range(steps):
        sent = list(msgs)
        if marker is not None:
            users = [j for j, m in enumerate(sent) if m["role"] == "user"][-marks:]
            for j in users:
                content = sent[j]["content"]
                blocks = (
                    [{"type": "text", "text": content}] if isinstance(content, str) else content
                )
                marked = [*blocks[:-1], {**blocks[-1], "cache_control": marker}]
                sent[j] = {**sent[j], "content": marked}
        out.append(sent)
        use = {"type": "tool_use", "id": f"toolu_{i:04d}", "name": "Bash"}
        use["input"] = {"command": f"pytest -k case{i}"}
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": f"Run {i}."}, use]})
        log = "".join(f"tests/test_api.py::test_{i}_{k} PASSED [{k}%]\n" for k in range(60))
        msgs.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": log}],
            }
        )
    return out


def body_bytes(messages: list[dict[str, Any]], **extra: Any) -> bytes:
    body = {"model": "claude-sonnet-4-6", "max_tokens": 512, "messages": messages, "tools": TOOLS}
    return json.dumps({**body, **extra}).encode()


def test_digest_is_blind_to_breakpoints_and_spacing():
    m = {"role": "user", "content": [{"type": "text", "text": "x"}]}
    marked = {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}  # fmt: skip
    first = {"role": "user", "content": [{"cache_control": {"type": "ephemeral", "ttl": "1h"}, "type": "text", "text": "x"}]}  # fmt: skip
    assert message_digest(m) == message_digest(marked) == message_digest(first)
    for sep in ((",", ":"), (", ", ": ")):  # the client's own spacing, as read from its bytes
        texts = [json.dumps(x, separators=sep) for x in (m, marked, first)]
        spans = [parse_request(f'{{"messages":[{t}]}}'.encode()) for t in texts]
        got = {s.text[s.spans[0][0] : s.spans[0][1]] for s in spans}
        assert len({text_digest(t) for t in got}) == 1
    assert message_digest(m) != message_digest({"role": "user", "content": "y"})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    st.lists(st.dictionaries(st.text(max_size=5), json_values, max_size=3), max_size=4),
    st.sampled_from([None, 2]),
    st.booleans(),
)
def test_parse_request_reads_what_json_loads_reads(top, messages, indent, ascii_only):
    body = {**top, "messages": messages}
    raw = json.dumps(body, indent=indent, ensure_ascii=ascii_only).encode()
    parsed = parse_request(raw)
    assert parsed.body == json.loads(raw)
    assert [json.loads(parsed.text[a:b]) for a, b in parsed.spans] == messages
    a, b = parsed.array
    assert json.loads(parsed.text[a:b]) == messages


@pytest.mark.parametrize("raw", [b"{", b'{"a":1}x', b"[1]", b"\xff\xfe", b'{"a" 1}', b"{}{}"])
def test_parse_request_fails_as_json_loads_does(raw):
    try:
        expected = json.loads(raw)
    except ValueError as e:
        with pytest.raises(type(e)):
            parse_request(raw)
    else:
        assert parse_request(raw).body == expected


@pytest.mark.parametrize("marks", [0, 1, 2])
def test_known_prefix_text_is_planned_as_the_full_reader_plans_it(compressor, marks):
    fast = Rewriter(RewriterConfig(budget=5_000), compressor=compressor)
    slow = Rewriter(RewriterConfig(budget=5_000), compressor=compressor)
    slow._known = lambda api, text: None  # type: ignore[method-assign]
    hits = []
    known = fast._known

    def spy(api: str, text: str):
        plan = known(api, text)
        hits.append(plan is not None)
        return plan

    fast._known = spy  # type: ignore[method-assign]
    actions = []
    for msgs in conversation(18, marker={"type": "ephemeral"} if marks else None, marks=marks):
        raw = body_bytes(msgs)
        a, b = fast.plan_request("anthropic", raw), slow.plan_request("anthropic", raw)
        assert (a.action, a.tokens_in, a.tokens_out, a.covered) == (
            b.action,
            b.tokens_in,
            b.tokens_out,
            b.covered,
        )
        assert a.data == b.data and a.chains[-1] == b.chains[-1]
        if a.data is not None:
            sent = json.loads(a.data)
            assert sent == a.body and not validate_anthropic(sent)
            assert sent["messages"][-1] == msgs[-1]  # the newest message, marker and all
        actions.append(a.action)
    assert "reuse" in actions and "compact" in actions
    read_fast = [act for act, hit in zip(actions, hits) if hit]
    assert "passthrough" in read_fast and "reuse" in read_fast  # checkpoints and prefixes


def test_prefix_bytes_hold_and_one_breakpoint_closes_them(compressor):
    rw = Rewriter(RewriterConfig(budget=6_000), compressor=compressor)
    sent = [rw.plan_request("anthropic", body_bytes(m)) for m in conversation(24)]
    reuse = [(a, b) for a, b in zip(sent, sent[1:]) if b.action == "reuse"]
    assert reuse
    for a, b in reuse:
        if a.prefix_hash != b.prefix_hash:
            continue
        head = a.body["messages"][: a.messages_out - (a.messages_in - a.covered)]
        assert b.body["messages"][: len(head)] == head
        # over the model's minimum cacheable length (1,024 tokens), so it is marked
        assert json.dumps(head[-1]["content"][-1]).count("cache_control") == 1
        cut = a.data.index(json.dumps(a.body["messages"][len(head)]).encode())  # the client's bytes
        assert a.data[:cut] == b.data[:cut]


class ByKind:
    """A categorizer (contract C2) that drops the tool loop whole: the task and the agent's words
    must-keep, every call and result an acknowledgment."""

    def predict(self, units):
        return [
            "acknowledgment"
            if u.kind in ("tool_call", "tool_result")
            else "requirement"
            if u.role == "user"
            else "decision"
            for u in units
        ]


def test_a_history_compressed_to_end_with_the_assistant_is_closed_by_its_breakpoint():
    # compressed, the history ends with the assistant's words (its results went), and the raw
    # tail opens with the assistant too: the user turn between them is the prefix's own, so
    # the breakpoint on it closes every byte before the tail
    task = "Fix the flaky test in tests/test_api.py; keep the schema. " * 100  # over 1,024 tokens
    config = CompressorConfig(on_must_keep_overflow="summarize_largest")  # the proxy's
    compressor = SemanticCompressor(classifier=ByKind(), config=config)
    rw = Rewriter(RewriterConfig(budget=6_000), compressor=compressor)
    plans = [
        rw.plan_request("anthropic", body_bytes([{"role": "user", "content": task}, *m[1:]]))
        for m in conversation(12)
    ]
    closed = 0
    for plan in plans:
        if plan.body is None:
            continue
        assert validate_anthropic(plan.body) == []
        head = plan.body["messages"][: plan.messages_out - (plan.messages_in - plan.covered)]
        assert json.dumps(head[-1]["content"][-1]).count("cache_control") == 1
        closed += head[-2]["role"] == "assistant"
    assert closed  # the case arose


def test_breakpoints_stay_within_four_and_in_ttl_order(compressor):
    rw = Rewriter(RewriterConfig(budget=2_500), compressor=compressor)
    hour = {"type": "ephemeral", "ttl": "1h"}
    system = [{"type": "text", "text": "You are a coding agent.", "cache_control": hour}]
    for msgs in conversation(12, marker=hour):
        plan = rw.plan_request("anthropic", body_bytes(msgs, system=system))
        if plan.data is None:
            continue
        sent = json.loads(plan.data)
        assert not validate_anthropic(sent)
        ttls = [
            m.group(1) for m in __import__("re").finditer(r'"ttl": ?"(\w+)"', plan.data.decode())
        ]
        assert ttls == ["1h"] * len(ttls)  # a 5m breakpoint would break the client's order
    crowded = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}} for i in range(3)]  # fmt: skip
    for msgs in conversation(12, marker={"type": "ephemeral"}):
        plan = rw.plan_request("anthropic", body_bytes(msgs, system=crowded))
        if plan.data is not None:
            assert plan.data.count(b'"cache_control"') == 4  # the client's four, none added


def test_openai_leading_system_messages_stay_first_and_whole(compressor):
    rw = Rewriter(RewriterConfig(budget=2_000), compressor=compressor)
    system = [
        {"role": "system", "content": "You are a coding agent. Never push to main."},
        {"role": "developer", "content": "Prefer small diffs."},
    ]
    msgs = [*system, {"role": "user", "content": "Fix the flaky API test."}]
    actions = set()
    for i in range(12):
        plan = rw.plan("openai", {"model": "gpt-4.1", "messages": msgs})
        actions.add(plan.action)
        if plan.body is not None:
            assert plan.body["messages"][:2] == system and not validate_openai(plan.body)
        call = {"id": f"call_{i}", "type": "function"}
        call["function"] = {"name": "bash", "arguments": json.dumps({"command": f"pytest -k {i}"})}
        log = "".join(f"PASSED test_{i}_{k}\n" for k in range(50))
        msgs = [
            *msgs,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": log},
        ]
    assert "compact" in actions and "reuse" in actions


def test_state_is_bounded_and_expires(compressor):
    now = [1000.0]
    rw = Rewriter(
        RewriterConfig(budget=1_500, max_prefixes=3, state_ttl_s=60),
        compressor=compressor,
        clock=lambda: now[0],
    )
    for k in range(6):  # six conversations, each over the budget
        first = {"role": "user", "content": f"Conversation {k}: fix test {k}."}
        for msgs in conversation(6)[-2:]:
            rw.plan("anthropic", {"model": "m", "messages": [first, *msgs[1:]]})
        assert rw.prefixes() <= 3
    assert rw.prefixes() == 3
    now[0] += 61
    rw.plan("anthropic", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert rw.prefixes() == 0 and not rw._probes


def test_a_last_turn_over_the_budget_keeps_the_task_and_a_valid_request(compressor):
    """A tool result larger than the whole budget: the history is still compressed to a small
    floor (not to nothing), so the task survives and the request starts with a user turn."""
    task = "Fix the flaky test in tests/test_api.py; keep the schema."
    rw = Rewriter(RewriterConfig(budget=4_000), compressor=compressor)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for i, lines in enumerate((60, 60, 60, 400)):  # the last result alone is ~6,000 tokens
        use = {"type": "tool_use", "id": f"toolu_{i:04d}", "name": "Bash"}
        use["input"] = {"command": f"pytest -k case{i}"}
        log = "".join(f"tests/test_api.py::test_{i}_{k} PASSED [{k}%]\n" for k in range(lines))
        msgs = [
            *msgs,
            {"role": "assistant", "content": [{"type": "text", "text": f"Run {i}."}, use]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": log}],
            },  # fmt: skip
        ]
    plan = rw.plan_request("anthropic", body_bytes(msgs))
    assert plan.action == "compact" and "last turn alone is larger" in plan.reason
    sent = json.loads(plan.data)
    assert not validate_anthropic(sent)
    assert task in json.dumps(sent)
    # with no floor the history may go whole, and the request still opens with a user turn
    bare = Rewriter(RewriterConfig(budget=4_000, history_floor=0.0), compressor=compressor)
    assert not validate_anthropic(json.loads(bare.plan_request("anthropic", body_bytes(msgs)).data))
