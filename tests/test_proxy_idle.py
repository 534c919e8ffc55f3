"""`winnow proxy --idle`: compaction on the warm cache while the user is away, through the SDK.

The cache TTL is shortened to about a second so that the idle timer fires while the test waits.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic")
pytest.importorskip("uvicorn")

from proxy_upstream import Turn, Upstream  # noqa: E402

from winnow.runtime.idle import INSTRUCTION, IdleConfig  # noqa: E402
from winnow.serving.proxy import ProxyConfig, ProxyServer  # noqa: E402
from winnow.serving.proxy_audit import read_audit  # noqa: E402
from winnow.serving.proxy_compress import default_compressor  # noqa: E402
from winnow.serving.proxy_state import Rewriter, RewriterConfig  # noqa: E402

MODEL = "claude-sonnet-4-6"
MARK = INSTRUCTION.split(".")[0]  # "The user is away"
SUMMARY = "\n".join(
    f"## {s}\n{s}: the login limiter in app/limits.py; tests/test_auth.py."
    for s in (
        "Goal",
        "Completed changes",
        "Active working files",
        "Ruled-out dead ends",
        "Unresolved failures",
        "Pending todos",
        "Next immediate step",
    )
)
EPHEMERAL = {"type": "ephemeral"}
TOOLS = [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}}]
FILE = "".join(
    f"{i:4d}  def handler_{i}(request): return respond(request, {i})\n" for i in range(300)
)


def script(compaction: Turn):
    """Each user turn: one Read, then an answer; an idle compaction request gets `compaction`."""

    def answer(rec) -> Turn:
        last = rec.body["messages"][-1]
        text = json.dumps(last)
        if MARK in text:
            return compaction
        if '"tool_result"' in text:
            return Turn(text="Done: the limiter is in place.", thinking="checked")
        return Turn(text="Reading it.", tool_calls=[("Read", {"file_path": "app/auth.py"})])

    return answer


def turn(client, messages: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """One user turn of a harness: the prompt, the tool loop, the final answer."""
    messages = [*messages, {"role": "user", "content": [{"type": "text", "text": prompt}]}]
    while True:
        last = messages[-1]  # a breakpoint on the newest block, as Claude Code places it
        marked = [*last["content"][:-1], {**last["content"][-1], "cache_control": EPHEMERAL}]
        with client.messages.stream(
            model=MODEL,
            max_tokens=512,
            messages=[*messages[:-1], {**last, "content": marked}],
            tools=TOOLS,
        ) as s:
            msg = s.get_final_message()
        blocks = [b.model_dump(exclude_none=True) for b in msg.content]
        for b in blocks:
            b.pop("citations", None)
        messages.append({"role": "assistant", "content": blocks})
        uses = [b for b in blocks if b["type"] == "tool_use"]
        if not uses:
            return messages
        results = [{"type": "tool_result", "tool_use_id": b["id"], "content": FILE} for b in uses]
        messages.append({"role": "user", "content": results})


def wait(predicate, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def serve(up: Upstream, tmp_path, compressor) -> ProxyServer:
    idle = IdleConfig(
        ttl_s=1.2,
        safety_s=0.8,  # fires 0.4 s after the answer
        min_context_tokens=2_000,
        min_new_tokens=0,
        keep_turns=1,
        summary_tokens=300,
        resume_probability=0.9,
    )
    config = ProxyConfig(
        upstream=up.base_url, port=0, audit_dir=tmp_path, idle=True, idle_config=idle
    )
    return ProxyServer(
        config, rewriter=Rewriter(RewriterConfig(budget=10**6), compressor=compressor)
    )


@pytest.fixture(scope="module")
def compressor():
    return default_compressor()


def test_idle_compaction_on_the_warm_cache_then_summary_plus_recent_turns(tmp_path, compressor):
    with Upstream(script(Turn(text=SUMMARY))) as up, serve(up, tmp_path, compressor) as px:
        client = anthropic.Anthropic(base_url=px.base_url, api_key="sk-test", max_retries=0)
        history: list[dict[str, Any]] = []
        for prompt in (
            "Add rate limiting to the login endpoint, max 5 tries a minute.",
            "Now log every refused login; do not change the public API.",
            "Show me where the limiter is configured.",
        ):
            history = turn(client, history, prompt)
        last_sent = up.requests[-1]
        assert wait(lambda: any(MARK in json.dumps(r.body) for r in up.requests))
        compaction = next(r for r in up.requests if MARK in json.dumps(r.body))
        # insert-then-compress: the live request, its answer, then the instruction
        sent = last_sent.body["messages"]
        assert compaction.body["messages"][: len(sent)] == sent  # its breakpoint included
        assert compaction.body["messages"][len(sent)] == history[-1]
        assert compaction.usage["cache_read_input_tokens"] >= len(last_sent.raw) // 4 - 300
        conv = next(iter(px.proxy.idle.sessions))
        assert wait(lambda: px.proxy.idle.sessions[conv].installed)
        history = turn(client, history, "Thanks. Add a test for the refusal log.")
        assert not up.problems()
    first_after = up.requests[len(up.requests) - 2]
    first = first_after.body["messages"][0]["content"]
    assert (
        first[0]["text"].startswith("<session-state")
        and "## Next immediate step" in first[0]["text"]
    )
    assert "Show me where the limiter is configured." in json.dumps(first_after.body)
    assert "max 5 tries a minute" not in json.dumps(first_after.body["messages"][1:])
    records = [r for r in read_audit(tmp_path) if r["route"] == "messages"]
    idle = [r for r in records if r["action"] == "idle"]
    assert len(idle) == 1 and idle[0]["tokens_out"] < idle[0]["tokens_in"] / 2
    assert records[-1]["action"] == "reuse"  # the tool loop after it keeps the summary's bytes


def test_a_request_during_the_compaction_cancels_it(tmp_path, compressor):
    slow = Turn(text=SUMMARY * 4, chunk_chars=4, chunk_delay=0.02)  # about 6 s of streaming
    with Upstream(script(slow)) as up, serve(up, tmp_path, compressor) as px:
        client = anthropic.Anthropic(base_url=px.base_url, api_key="sk-test", max_retries=0)
        history: list[dict[str, Any]] = []
        for prompt in ("Add rate limiting to login.", "Also log refusals."):
            history = turn(client, history, prompt)
        assert wait(lambda: any(MARK in json.dumps(r.body) for r in up.requests))
        time.sleep(0.3)  # mid-stream
        history = turn(client, history, "Are you there?")
        compaction = next(r for r in up.requests if MARK in json.dumps(r.body))
        assert wait(lambda: compaction.aborted)
        assert not up.problems()
    events = [
        json.loads(line)["event"]
        for f in (tmp_path / "idle").glob("*.audit.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert "aborted" in events and "compact" not in events
    actions = [r["action"] for r in read_audit(tmp_path)]
    assert "idle" not in actions
