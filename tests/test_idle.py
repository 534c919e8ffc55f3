"""Idle compaction against a real loopback server, on a virtual clock: no test waits for real."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from llm_server import LLMServer, Reply

from winnow.cli import main
from winnow.runtime.archive import AuditLog, read_audit, restore
from winnow.runtime.budget import ContextBudget, read_samples
from winnow.runtime.idle import INSTRUCTION, IdleCompactor, IdleConfig, VirtualClock, session_ttl
from winnow.runtime.llm import Conversation, LLMError, complete
from winnow.runtime.session import Session
from winnow.serving.tokens import HeuristicCounter

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

SUMMARY = """## Goal
Add rate limiting to the login endpoint (5 tries a minute).
## Completed changes
- app/limits.py: sliding window counter.
## Active working files
- app/auth.py lines 1-400: the handlers.
## Ruled-out dead ends
- a per-worker window: it resets per worker.
## Unresolved failures
E   AssertionError: 429 != 200
## Pending todos
- wire the limiter into the login view.
## Next immediate step
Run tests/test_auth.py."""


def sdk_client(srv, api="anthropic", **kw):
    """The official async SDK client of `api`, pointed at the loopback server."""
    kw = {"api_key": "test", "max_retries": 0, "timeout": 10, **kw}
    if api == "anthropic":
        return anthropic.AsyncAnthropic(base_url=srv.base_url, **kw)
    return openai.AsyncOpenAI(base_url=srv.openai_base_url, **kw)


FILE = "\n".join(
    f"{i:4d}  def handler_{i}(request): return respond(request, {i})" for i in range(1, 400)
)


class Labels:
    """A stand-in classifier: rules that mirror TAXONOMY.md on the test history."""

    def predict(self, units):
        def cat(u):
            t = u.text.lower()
            if u.kind == "tool_result":
                return (
                    "error"
                    if u.is_error or "traceback" in t
                    else ("decision" if "root cause" in t else "code")
                )
            if "don't" in t or "must" in t:
                return "constraint"
            if "decided" in t:
                return "decision"
            return "requirement" if u.role == "user" else "explanation"

        return [SimpleNamespace(category=cat(u)) for u in units]


def history(api: str) -> list[dict]:
    """A real-shaped coding session: a task, a constraint, reads, an error, a decision."""
    if api == "openai":
        return [
            {
                "role": "user",
                "content": "Add rate limiting to the login endpoint, max 5 tries a minute.",
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_oa_call("c1", "read_file", {"path": "app/auth.py"})],
            },
            {"role": "tool", "tool_call_id": "c1", "content": FILE},
            {
                "role": "assistant",
                "content": "We decided to use a sliding window in app/limits.py.",
            },
            {"role": "user", "content": "Don't change the public API; we are on Python 3.9."},
            {"role": "assistant", "content": "Understood."},
        ]
    return [
        {
            "role": "user",
            "content": "Add rate limiting to the login endpoint, max 5 tries a minute.",
        },
        {
            "role": "assistant",
            "content": [
                _use("t1", "Read", {"file_path": "app/auth.py", "offset": 1, "limit": 400})
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": FILE}],
        },
        {"role": "assistant", "content": [_use("t2", "Bash", {"command": "pytest -q"})]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "is_error": True,
                    "content": "Traceback ...\nE   AssertionError: 429 != 200\n" * 30,
                }
            ],
        },
        {
            "role": "assistant",
            "content": [_use("t3", "Bash", {"command": "git log -p app/limits.py"})],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t3",
                    "content": "root cause: the window resets per worker\n" * 20,
                }
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "We decided to use a sliding window in app/limits.py."}
            ],
        },
        {"role": "user", "content": "Don't change the public API; we are on Python 3.9."},
        {"role": "assistant", "content": [_use("t4", "Read", {"file_path": "app/limits.py"})]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t4", "content": FILE}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Understood."}]},
    ]


def _use(i, name, args):
    return {"type": "tool_use", "id": i, "name": name, "input": args}


def _oa_call(i, name, args):
    return {"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def script(summary_reply: Reply):
    """Answers the compaction instruction with `summary_reply`, anything else with a short answer."""

    def reply(rec):
        last = rec.body["messages"][-1]
        text = last["content"] if isinstance(last["content"], str) else ""
        return (
            summary_reply
            if text.startswith(INSTRUCTION[:30])
            else Reply(f"answer {len(rec.body['messages'])}")
        )

    return reply


def make(srv, tmp_path, api="anthropic", classifier=None, client_kw=None, **cfg):
    clock = VirtualClock()
    model = "claude-sonnet-4-5" if api == "anthropic" else "gpt-5"
    conv = Conversation(
        api,
        model,
        history(api),
        system="You are a coding agent.",
        tools=[{"name": "Read", "description": "read", "input_schema": {"type": "object"}}]
        if api == "anthropic"
        else None,
    )
    client = sdk_client(srv, api, **(client_kw or {}))
    config = IdleConfig(
        **{
            "min_context_tokens": 2_000,
            "min_new_tokens": 1_000,
            "summary_tokens": 400,
            "keep_turns": 1,
            "resume_probability": 0.9,
            **cfg,
        }
    )
    compactor = IdleCompactor(
        conv, client, config, clock=clock, classifier=classifier or Labels(), token_counter=HeuristicCounter(),
        audit=AuditLog(tmp_path, "s1", clock.now),
    )  # fmt: skip
    return clock, conv, client, compactor, Session(conv, client, compactor=compactor)


async def _idle_past_trigger(clock, compactor, seconds):
    clock.advance(seconds)
    await compactor.wait()


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_compaction_fires_at_trigger_with_byte_identical_prefix(tmp_path, api):
    async def go():
        with LLMServer(replies=script(Reply(SUMMARY))) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path, api)
            await session.send("Now wire it into the login view.")
            assert compactor.state == "armed" and compactor.trigger_after == 266
            clock.advance(265)
            await asyncio.sleep(0.05)
            assert len(srv.requests) == 1  # not yet: T_trigger is 300 - 34 s
            await _idle_past_trigger(clock, compactor, 1)
            await client.close()
            return srv.requests, conv, compactor

    requests, conv, compactor = asyncio.run(go())
    turn, compaction = requests
    # the live request, byte for byte, then the instruction appended as the last user turn
    assert compaction.raw.startswith(turn.raw[:-2]) and turn.raw.endswith(b"]}")
    assert compaction.body["messages"][-2]["role"] == "assistant"
    assert compaction.body["messages"][-1]["content"].startswith("The user is away")
    assert compaction.body["model"] == turn.body["model"] and compaction.body.get(
        "system"
    ) == turn.body.get("system")
    entry = read_audit(tmp_path / "s1.audit.jsonl")[-1]
    assert (
        entry["event"] == "compact"
        and entry["cache_hit"] > 0.9
        and entry["estimated_cache_hit"] > 0.9
    )
    assert compactor.state == "compacted_idle"
    # summary first, then the last raw turn
    first = conv.messages[0]["content"]
    assert first.startswith("<session-state") and SUMMARY in first
    assert conv.messages[-2:] == compaction.body["messages"][-3:-1]


def test_summary_carries_verbatim_units_and_file_registry(tmp_path):
    async def go():
        with LLMServer(replies=script(Reply(SUMMARY))) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path, keep_turns=1)
            await session.send("Now wire it into the login view.")
            before = conv.snapshot()
            await _idle_past_trigger(clock, compactor, 266)
            await client.close()
            return before, conv

    before, conv = asyncio.run(go())
    block = conv.messages[0]["content"]
    for verbatim in (
        "- [requirement] user: Add rate limiting to the login endpoint, max 5 tries a minute.",
        "- [constraint] user: Don't change the public API; we are on Python 3.9.",
        "- [decision] assistant: We decided to use a sliding window in app/limits.py.",
    ):
        assert verbatim in block
    assert (
        "- app/auth.py: read lines 1-400" in block and "- app/limits.py: read whole file" in block
    )
    # the archive restores the exact pre-compaction conversation
    entry = read_audit(tmp_path / "s1.audit.jsonl")[-1]
    restored = restore(entry["archive"])
    assert restored.messages == before.messages and restored.system == before.system
    assert (
        entry["tokens_before"] > 2 * entry["tokens_after"] > 0
        and entry["bytes_before"] > entry["bytes_after"]
    )
    assert entry["time"] == VirtualClock().now() + 266 and entry["trigger"] == "idle_ttl"


def test_audit_command_checks_archives(tmp_path, capsys):
    test_summary_carries_verbatim_units_and_file_registry(tmp_path)
    audit = tmp_path / "s1.audit.jsonl"
    assert main(["audit", str(audit)]) == 0
    out = capsys.readouterr().out
    assert "compact" in out and "idle_ttl" in out and "restores" in out
    next(tmp_path.glob("s1.*.compact.jsonl")).write_text(
        '{"type": "header"}\n'
    )  # a damaged archive
    assert main(["audit", str(audit)]) == 1
    assert main(["audit", str(tmp_path / "none.jsonl")]) == 1
    assert capsys.readouterr().err.strip().startswith("winnow audit: no audit log")


def test_user_message_aborts_compaction_mid_stream(tmp_path):
    long_summary = Reply(SUMMARY * 40, chunk_chars=4, chunk_delay=0.02)

    async def go():
        with LLMServer(replies=script(long_summary)) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path)
            await session.send("Now wire it into the login view.")
            original = conv.snapshot().messages
            clock.advance(266)
            assert await asyncio.to_thread(
                srv.wait_for, lambda rs: len(rs) == 2 and rs[1].chunks_sent > 2
            )
            assert compactor.state == "compacting"
            done = await session.send("Actually, stop: what is the status?")  # the user is back
            assert await asyncio.to_thread(srv.wait_aborted)
            await client.close()
            return srv.requests, original, conv, done

    requests, original, conv, done = asyncio.run(go())
    compaction, user_turn = requests[1], requests[2]
    assert compaction.aborted and not compaction.completed
    # the user's turn went against the original history, nothing lost or reordered
    assert user_turn.body["messages"][:-1] == original
    assert conv.messages == [
        *original,
        {"role": "user", "content": "Actually, stop: what is the status?"},
        done.message,
    ]
    events = [e["event"] for e in read_audit(tmp_path / "s1.audit.jsonl")]
    assert events == ["aborted"] and not list(tmp_path.glob("s1.*.compact.jsonl"))


def test_interrupt_cancels_armed_timer(tmp_path):
    async def go():
        with LLMServer(replies=script(Reply(SUMMARY))) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path)
            await session.send("Now wire it into the login view.")
            session.interrupt()
            await _idle_past_trigger(clock, compactor, 400)
            await client.close()
            return len(srv.requests), compactor.state

    assert asyncio.run(go()) == (1, "active")


def test_one_shot_guard_until_enough_new_content(tmp_path):
    async def go():
        with LLMServer(replies=script(Reply(SUMMARY))) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path, min_new_tokens=5_000)
            await session.send("Now wire it into the login view.")
            await _idle_past_trigger(clock, compactor, 266)
            assert compactor.state == "compacted_idle"
            await session.send("ok")  # a small turn after the resume: no re-summarizing a summary
            assert (
                compactor.state == "compacted_idle" and "compacted idle" in compactor.last_decision
            )
            clock.advance(3 * 24 * 3600)  # all weekend
            await asyncio.sleep(0.05)
            n_idle = len(srv.requests)
            await session.send("Here is the new spec:\n" + FILE * 3)  # enough new content...
            await session.send("Go ahead.")  # ...before the kept last turn re-arms
            armed = compactor.state, compactor.last_decision
            await client.close()
            return n_idle, armed

    n_idle, armed = asyncio.run(go())
    assert n_idle == 3 and armed[0] == "armed", armed


def test_lazy_truncation_after_ttl_keeps_errors_decisions_and_pairs(tmp_path):
    async def go():
        with LLMServer() as srv:
            # never worth compacting at p=0: the session just sits past its TTL
            clock, conv, client, compactor, session = make(
                srv, tmp_path, resume_probability=0.0, keep_turns=2
            )
            await session.send("Now wire it into the login view.")
            assert compactor.state == "active" and "not worth it" in compactor.last_decision
            clock.advance(301)
            await compactor.wait()  # the background labelling
            await session.send("I'm back: continue.")
            await client.close()
            return srv.requests[-1].body["messages"], conv

    sent, conv = asyncio.run(go())
    results = {
        b["tool_use_id"]: b
        for m in sent
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    }
    assert results["t1"]["content"].startswith("[tool result elided after the prompt cache expired")
    assert "AssertionError" in results["t2"]["content"]  # error kept
    assert "root cause" in results["t3"]["content"]  # decision kept
    assert results["t4"]["content"] == FILE  # inside the last two turns: kept raw
    uses = {
        b["id"]
        for m in sent
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    }
    assert uses == set(results)  # every call still has its result
    entry = read_audit(tmp_path / "s1.audit.jsonl")[-1]
    assert (
        entry["event"] == "truncate"
        and entry["replaced"] == 1
        and entry["tokens_after"] < entry["tokens_before"]
    )


def test_ttl_follows_cache_setting():
    conv = Conversation("anthropic", "claude-opus-4-1", history("anthropic"))
    assert session_ttl(conv) == 300
    conv.messages[-1]["content"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    assert session_ttl(conv) == 3600
    client = anthropic.AsyncAnthropic(base_url="http://127.0.0.1:9", api_key="x")
    c = IdleCompactor(conv, client, classifier=None, audit=AuditLog("/nonexistent", "x"))
    assert c.trigger_after == 3566 and c.profile.name == "anthropic-1h"


def test_failed_compaction_and_failed_turn_change_nothing(tmp_path):
    def reply(rec):
        last = rec.body["messages"][-1]["content"]
        if isinstance(last, str) and (last.startswith(INSTRUCTION[:30]) or last == "boom"):
            return Reply("overloaded", status=529)
        return Reply("fine")

    async def go():
        with LLMServer(replies=reply) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path)
            await session.send("Now wire it into the login view.")
            before = conv.snapshot()
            await _idle_past_trigger(clock, compactor, 266)
            assert conv.messages == before.messages and compactor.state == "active"
            with pytest.raises(LLMError, match="HTTP 529.*overloaded"):
                await session.send("boom")
            assert conv.messages == before.messages  # the failed turn left no user message behind
            await client.close()

    asyncio.run(go())
    entry = read_audit(tmp_path / "s1.audit.jsonl")[-1]
    assert entry["event"] == "failed" and "529" in entry["reason"]
    assert not list(tmp_path.glob("s1.*.compact.jsonl"))


def test_session_records_budget_from_real_usage(tmp_path):
    async def go():
        with LLMServer(replies=script(Reply(SUMMARY))) as srv:
            clock, conv, client, compactor, _ = make(srv, tmp_path)
            budget = ContextBudget(
                tmp_path / "budget.jsonl",
                window=20_000,
                threshold=40,
                checkpoint_path=tmp_path / "ckpt.md",
            )
            session = Session(conv, client, compactor=compactor, budget=budget)
            done = await session.send("Now wire it into the login view.")
            await client.close()
            return done.usage, srv.requests[0]

    usage, rec = asyncio.run(go())
    (sample,) = read_samples(tmp_path / "budget.jsonl")
    assert (
        sample.used
        == usage["input_tokens"] + usage["output_tokens"]
        == len(rec.raw) // 4 + usage["output_tokens"]
    )
    assert sample.crossed and (tmp_path / "ckpt.md").is_file()  # ~13K of 20K: past 40%


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_client_folds_streamed_text_and_tool_calls(api):
    async def go():
        with LLMServer(
            replies=[Reply("Let me read it.", tool_calls=[("Read", {"file_path": "a.py"})])]
        ) as srv:
            client = sdk_client(srv, api, api_key="k")
            pieces = []
            done = await complete(
                client,
                Conversation(api, "m", [{"role": "user", "content": "go"}]),
                on_text=pieces.append,
            )
            await client.close()
            return done, pieces, srv.requests[0].headers

    done, pieces, headers = asyncio.run(go())
    assert "".join(pieces) == done.text == "Let me read it." and done.usage
    if api == "anthropic":
        assert done.message["content"][1] == {
            "type": "tool_use",
            "id": "toolu_01",
            "name": "Read",
            "input": {"file_path": "a.py"},
        }
        assert done.stop_reason == "tool_use" and done.ended
        # the SDK authenticates (its versions differ in how)
        assert "k" in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
    else:
        call = done.message["tool_calls"][0]
        assert call["function"] == {"name": "Read", "arguments": '{"file_path": "a.py"}'}
        assert done.stop_reason == "tool_calls" and headers["authorization"] == "Bearer k"


def _shipped_classifier():
    try:
        from winnow.serving.classifier import ImportanceClassifier

        return ImportanceClassifier.load()
    except Exception as e:  # noqa: BLE001 - no model in this checkout
        pytest.skip(f"no shipped classifier: {e}")


def test_compaction_with_the_shipped_classifier(tmp_path):
    classifier = _shipped_classifier()

    async def go():
        with LLMServer(replies=script(Reply(SUMMARY))) as srv:
            clock, conv, client, compactor, session = make(srv, tmp_path, classifier=classifier)
            await session.send("Now wire it into the login view.")
            await _idle_past_trigger(clock, compactor, 266)
            await client.close()
            return conv.messages[0]["content"]

    block = asyncio.run(go())
    # TAXONOMY.md's own example of a requirement, carried word for word
    assert (
        "- [requirement] user: Add rate limiting to the login endpoint, max 5 tries a minute."
        in block
    )


def test_the_runtime_labels_each_new_unit_once_online(tmp_path):
    """As turns arrive, each new unit goes through `SessionClassifier.add` once, and its label
    is the online view of the whole conversation (past units only)."""
    from winnow.runtime.transcript import to_units
    from winnow.serving.session import SessionClassifier

    shipped = _shipped_classifier()
    fed: list[tuple[int, int]] = []

    class Counting(SessionClassifier):
        def add(self, unit):
            fed.append((unit.extra["msg"], unit.extra["block"]))
            return super().add(unit)

    async def go():
        with LLMServer(replies=script(Reply(SUMMARY))) as srv:
            clock, conv, client, compactor, session = make(
                srv, tmp_path, classifier=Counting(shipped), min_context_tokens=10**9
            )
            sizes = []
            for text in ("Now wire it into the login view.", "Also add a test for it.", "7"):
                await session.send(text)
                await compactor._start_labelling()
                sizes.append(len(fed))
            units = to_units(conv.api, conv.messages, compactor.session_id)
            assert len(fed) == len(set(fed)) == len(units)  # every unit once
            # a rewritten history (as a compaction leaves it) starts the session over
            conv.messages[:2] = [{"role": "user", "content": "<session-state>Goal: limits."}]
            fed.clear()
            await compactor._start_labelling()
            await client.close()
            return conv, compactor, sizes

    conv, compactor, sizes = asyncio.run(go())
    assert sizes[0] < sizes[1] < sizes[2]  # fed turn by turn, not at the end
    units = to_units(conv.api, conv.messages, compactor.session_id)
    assert len(fed) == len(units)
    want = [p.category for p in shipped.predict(units, online=True)]
    assert [compactor._label(u) for u in units] == want


def agentic_run(n: int = 12) -> list[dict]:
    """One prompt, then a long run of tool calls: a single turn."""
    msgs = [{"role": "user", "content": "Port every handler in app/ to the new router."}]
    for i in range(n):
        msgs.append(
            {"role": "assistant", "content": [_use(f"r{i}", "Read", {"file_path": f"app/h{i}.py"})]}
        )
        msgs.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"r{i}", "content": FILE}],
            }
        )
    return msgs


def _pairs_valid(messages: list[dict]) -> bool:
    calls = [
        b["id"]
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]
    results = [
        b["tool_use_id"]
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    return calls == results


def test_long_single_turn_is_cut_at_an_assistant_message(tmp_path):
    async def go():
        with LLMServer(replies=script(Reply(SUMMARY))) as srv:
            clock, conv, client, compactor, session = make(
                srv, tmp_path, keep_turns=2, max_tail_tokens=15_000
            )
            conv.messages = agentic_run()  # the run goes on: the last results are the user turn
            await session.send(
                [conv.messages.pop()["content"][0], {"type": "text", "text": "go on"}]
            )
            assert compactor.state == "armed", compactor.last_decision
            await _idle_past_trigger(clock, compactor, 266)
            await client.close()
            return conv.messages

    messages = asyncio.run(go())
    assert (
        messages[0]["content"].startswith("<session-state") and messages[1]["role"] == "assistant"
    )
    assert 3 <= len(messages) < 10 and _pairs_valid(messages[1:])
    assert (
        "- [requirement] user: Port every handler in app/ to the new router."
        in messages[0]["content"]
    )


def test_lazy_truncation_inside_a_long_single_turn(tmp_path):
    async def go():
        with LLMServer() as srv:
            clock, conv, client, compactor, session = make(
                srv, tmp_path, resume_probability=0.0, max_tail_tokens=15_000
            )
            conv.messages = agentic_run()
            await session.send(
                [conv.messages.pop()["content"][0], {"type": "text", "text": "go on"}]
            )
            clock.advance(301)
            await compactor.wait()
            await session.send("Back: continue.")
            await client.close()
            return srv.requests[-1].body["messages"]

    sent = asyncio.run(go())
    elided = [
        b
        for m in sent
        if isinstance(m["content"], list)
        for b in m["content"]
        if str(b.get("content", "")).startswith("[tool result elided")
    ]
    assert 8 <= len(elided) < 12 and _pairs_valid(sent)


def test_file_registry_reads_past_tool_arguments_nested_100000_deep():
    """A turn whose call arguments are nested too deeply to parse still ends (no RecursionError
    from `turn_ended`), and the files of the other calls are still tracked."""
    from winnow.runtime.transcript import FileRegistry, to_units

    def call(i, arguments):
        fn = {"name": "read_file", "arguments": arguments}
        return {
            "role": "assistant",
            "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}],
        }

    messages = [
        {"role": "user", "content": "read them"},
        call(1, "[" * 100_000 + "]" * 100_000),
        {"role": "tool", "tool_call_id": "c1", "content": "?"},
        call(2, json.dumps({"path": "app.py"})),
        {"role": "tool", "tool_call_id": "c2", "content": "print(1)"},
    ]
    registry = FileRegistry()
    registry.observe(to_units("openai", messages))
    assert list(registry.reads) == ["app.py"]
