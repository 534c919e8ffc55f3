"""Request checks the tests share: what the provider APIs reject, checked on rendered bodies."""

from __future__ import annotations

import json


def assert_valid_anthropic(body: dict) -> None:
    """What the Messages API checks: roles alternate from user, every tool_use is answered first
    thing in the next message, no tool_result without its tool_use, no empty text, <= 4 breakpoints."""
    msgs = body["messages"]
    if not msgs:  # nothing but empty text: nothing to send
        return
    assert msgs[0]["role"] == "user"
    for a, b in zip(msgs, msgs[1:], strict=False):
        assert a["role"] != b["role"]
    marks = [blk for blk in body.get("system", []) if "cache_control" in blk]
    for i, m in enumerate(msgs):
        assert m["content"]
        for blk in m["content"]:
            assert blk["type"] in ("text", "tool_use", "tool_result")
            if blk["type"] == "text":
                assert blk["text"].strip()
            if "cache_control" in blk:
                marks.append(blk)
        uses = [blk["id"] for blk in m["content"] if blk["type"] == "tool_use"]
        if m["role"] == "assistant":
            assert all(blk["type"] != "tool_result" for blk in m["content"])
            if uses:
                nxt = msgs[i + 1]["content"]
                assert [blk.get("tool_use_id") for blk in nxt[: len(uses)]] == uses
        else:
            assert not uses
            prev = msgs[i - 1]["content"] if i else []
            prev_uses = {blk["id"] for blk in prev if blk["type"] == "tool_use"}
            results = [blk for blk in m["content"] if blk["type"] == "tool_result"]
            assert all(r["tool_use_id"] in prev_uses for r in results)
            assert m["content"][: len(results)] == results  # results first
    assert len(marks) <= 4
    ttls = [blk["cache_control"]["ttl"] for blk in marks]
    assert ttls == sorted(ttls, key=["1h", "5m"].index)


def assert_valid_openai(body: dict) -> None:
    """Every tool_call answered by `tool` messages right after; no `tool` message without its call."""
    msgs = body["messages"]
    pending: list[str] = []
    for m in msgs:
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending
            pending.remove(m["tool_call_id"])
            continue
        assert not pending, f"tool calls {pending} not answered before a {m['role']} message"
        if m["role"] == "assistant":
            pending = [c["id"] for c in m.get("tool_calls", [])]
            assert m["content"] or pending
            for c in m.get("tool_calls", []):
                assert isinstance(json.loads(c["function"]["arguments"]), dict)
        else:
            assert m["content"].strip()
    assert not pending
