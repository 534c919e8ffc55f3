"""Idle compaction under faults: a summary is applied only when it is whole, through the SDKs.

Each fault runs against the loopback server with the official async SDK client; the history
must come out exactly as it went in, the audit log must say why, and no archive is written.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from llm_server import LLMServer, Reply
from test_idle import SUMMARY, make, script

from winnow.runtime.archive import read_audit
from winnow.runtime.idle import INSTRUCTION, SECTIONS, incomplete
from winnow.runtime.llm import Completion, Conversation, LLMError, complete, relaying_client

pytest.importorskip("anthropic")
pytest.importorskip("openai")

CUT_SUMMARY = SUMMARY[: len(SUMMARY) // 3]
# fault -> (reply to the compaction request, client options, audit event, words in its reason)
FAULTS = {
    "server error": (Reply("overloaded", status=529), {}, "failed", "HTTP 529"),
    # the client's timeout holds for the session's own requests too: 0.5 s failed one of them
    # on a loaded 2-core machine
    "timeout": (Reply(SUMMARY, stall_s=10.0), {"timeout": 2.0}, "failed", "Timeout"),
    "connection reset": (Reply(SUMMARY, chunk_chars=16, reset_after=3), {}, "failed", ""),
    "truncated stream": (
        Reply(SUMMARY, chunk_chars=16, cut_after=3),
        {},
        "rejected",
        "closed before its end",
    ),
    "max_tokens": (Reply(CUT_SUMMARY, stop_reason="max_tokens"), {}, "rejected", "cut off"),
    "missing sections": (
        Reply(SUMMARY.split("## Pending")[0]),
        {},
        "rejected",
        "missing sections: Pending todos, Next immediate step",
    ),
}


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_leaves_history_unchanged_and_audits_why(tmp_path, api, fault):
    reply, client_kw, event, why = FAULTS[fault]
    if api == "openai" and reply.stop_reason == "max_tokens":
        reply.stop_reason = "length"

    async def go():
        with LLMServer(replies=script(reply)) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path, api, client_kw=client_kw)
            await session.send("Now wire it into the login view.")
            before = conv.snapshot()
            assert compactor.state == "armed", compactor.last_decision
            clock.advance(compactor.trigger_after)
            await compactor.wait()
            after_fault = conv.snapshot(), compactor.state
            done = await session.send("Back: status?")  # the session goes on as if nothing was
            await client.close()
            return before, after_fault, done, srv.requests

    before, (after, state), done, requests = asyncio.run(go())
    assert after.messages == before.messages and after.version == before.version
    assert state == "active"
    entry = read_audit(tmp_path / "s1.audit.jsonl")[-1]
    assert entry["event"] == event and why in entry["reason"], entry
    assert entry["trigger"] == "idle_ttl"
    assert not list(tmp_path.glob("s1.*.compact.jsonl"))
    # the user's next turn went out on the untouched history
    assert requests[-1].body["messages"][-1]["content"] == "Back: status?"
    assert done.ended and done.text


def test_sdk_retries_a_server_error_then_applies_the_summary(tmp_path):
    replies = iter([Reply("overloaded", status=529), Reply(SUMMARY)])

    def reply(rec):
        last = rec.body["messages"][-1]["content"]
        return next(replies) if last.startswith(INSTRUCTION[:30]) else Reply("fine")

    async def go():
        with LLMServer(replies=reply) as srv:
            clock, conv, client, compactor, session = make(
                srv, tmp_path, client_kw={"max_retries": 1}
            )
            await session.send("Now wire it into the login view.")
            clock.advance(compactor.trigger_after)
            await compactor.wait()
            await client.close()
            return conv, len(srv.requests)

    conv, n = asyncio.run(go())
    assert n == 3 and conv.messages[0]["content"].startswith("<session-state")
    assert read_audit(tmp_path / "s1.audit.jsonl")[-1]["event"] == "compact"


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_requests_are_the_conversation_bytes_through_the_sdk(tmp_path, api):
    """The SDK sends our bytes untouched: the live turn is `conv.encode()`, and the compaction
    request is the next live request's bytes with the instruction appended."""

    async def go():
        with LLMServer(replies=script(Reply(SUMMARY))) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path, api)
            await session.send("Now wire it into the login view.")
            live = Conversation(**{**vars(conv), "messages": conv.messages[:-1]}).encode()
            before = conv.snapshot()
            clock.advance(compactor.trigger_after)
            await compactor.wait()
            await client.close()
            return live, before, srv.requests

    live, before, (turn, compaction) = asyncio.run(go())
    assert turn.raw == live
    instruction = compaction.body["messages"][-1]
    assert compaction.raw == before.encode([instruction])
    # byte for byte: everything the next live request would send, then the instruction
    prefix = before.encode()[:-2]  # without the closing `]}` of messages and body
    assert compaction.raw.startswith(prefix) and compaction.raw[len(prefix) : len(prefix) + 1]
    assert compaction.raw.startswith(turn.raw[:-2])


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"max_tokens": 4096}, 2048),
        ({"max_tokens": 1000}, 500),
        ({"max_tokens": 3000, "thinking": {"type": "enabled", "budget_tokens": 2000}}, 500),
        ({}, 2500),  # no limit in the request: summary_tokens (5,000) decides
    ],
)
def test_words_asked_fit_max_tokens(tmp_path, params, words):
    async def go():
        with LLMServer(replies=script(Reply(SUMMARY))) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path, summary_tokens=5_000)
            conv.params = params
            await session.send("Now wire it into the login view.")
            compactor.preempt("test")  # whether it pays does not matter here
            assert await compactor.compact("manual")
            await client.close()
            return srv.requests[-1].body["messages"][-1]["content"]

    asked = asyncio.run(go())
    assert f"At most {words} words." in asked
    assert read_audit(tmp_path / "s1.audit.jsonl")[-1]["words_asked"] == words


def test_max_tokens_too_small_for_a_summary_never_arms(tmp_path):
    async def go():
        with LLMServer(replies=script(Reply(SUMMARY))) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path)
            conv.params = {"max_tokens": 200}
            await session.send("Now wire it into the login view.")
            decision = compactor.state, compactor.last_decision
            applied = await compactor.compact("manual")  # asked directly: refused, audited
            await client.close()
            return decision, applied, len(srv.requests)

    (state, why), applied, n = asyncio.run(go())
    assert state == "active" and "max_tokens leaves 200 tokens" in why
    assert not applied and n == 1
    entry = read_audit(tmp_path / "s1.audit.jsonl")[-1]
    assert entry["event"] == "rejected" and "200 tokens" in entry["reason"]


def test_a_cut_live_answer_is_an_error_and_the_turn_is_rolled_back(tmp_path):
    async def go():
        with LLMServer(replies=[Reply("fine"), Reply("a long answer " * 20, cut_after=2)]) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path)
            await session.send("first")
            before = conv.snapshot().messages
            with pytest.raises(LLMError, match="closed before its end"):
                await session.send("second")
            await client.close()
            return before, conv.messages

    before, after = asyncio.run(go())
    assert after == before


def _done(text, stop="end_turn", ended=True):
    return Completion({"role": "assistant", "content": text}, text, {}, stop, 0, ended)


def test_incomplete_names_what_is_wrong():
    assert incomplete(_done(SUMMARY)) is None
    assert incomplete(_done(SUMMARY, "stop")) is None  # OpenAI's end_turn
    # headings as models also write them: bold, with a colon, another level
    loose = SUMMARY.replace("## Goal", "**Goal:**").replace("## Pending todos", "### Pending todos")
    assert incomplete(_done(loose)) is None
    assert incomplete(_done(SUMMARY, ended=False)) == "the stream closed before its end"
    assert "cut off" in incomplete(_done(SUMMARY, "max_tokens"))
    assert incomplete(_done(SUMMARY, "tool_use")) == "stop_reason tool_use"
    assert incomplete(_done("  ")) == "empty summary"
    # a section named only inside a sentence does not count
    text = SUMMARY.replace("## Next immediate step", "The next immediate step:")
    assert incomplete(_done(text)) == "missing section: Next immediate step"
    assert len(SECTIONS) == 7 and all(f"## {n}" in INSTRUCTION for n, _ in SECTIONS)


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("credential", ["x-api-key", "authorization"])
def test_a_relaying_client_sends_the_relayed_credentials_only(monkeypatch, api, credential):
    """A proxy's compaction speaks for its client: the client's key, never the proxy's own."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "the-proxy's-own")
    monkeypatch.setenv("OPENAI_API_KEY", "the-proxy's-own")
    value = "client-key" if credential == "x-api-key" else "Bearer client-token"
    relayed = {credential: value, "anthropic-beta": "extended-cache-ttl-2025-04-11"}

    async def go():
        with LLMServer() as srv:
            base = srv.base_url if api == "anthropic" else srv.openai_base_url
            client = relaying_client(api, base, relayed, max_retries=0)
            done = await complete(
                client, Conversation(api, "m", [{"role": "user", "content": "hi"}])
            )
            await client.close()
            return done, srv.requests[0].headers

    done, headers = asyncio.run(go())
    assert done.ended and headers[credential] == value
    other = "authorization" if credential == "x-api-key" else "x-api-key"
    assert other not in headers and "the-proxy's-own" not in json.dumps(headers)
    assert headers["anthropic-beta"] == "extended-cache-ttl-2025-04-11"


def test_an_openai_compatible_server_without_the_usage_chunk_still_completes(tmp_path):
    async def go():
        with LLMServer(replies=[Reply("fine", ignore_include_usage=True)]) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path, "openai")
            done = await session.send("Now wire it into the login view.")
            await client.close()
            return done, conv.messages[-1]

    done, last = asyncio.run(go())
    assert done.ended and done.stop_reason == "stop" and last == done.message
