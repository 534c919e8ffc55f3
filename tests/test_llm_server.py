"""The loopback LLM server speaks both wire formats well enough for the official SDKs."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from llm_server import LLMServer, Reply

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

MSGS = [{"role": "user", "content": "hello"}]


def _anthropic(srv: LLMServer):
    return anthropic.Anthropic(base_url=srv.base_url, api_key="test", max_retries=0, timeout=5)


def _openai(srv: LLMServer):
    return openai.OpenAI(base_url=srv.openai_base_url, api_key="test", max_retries=0, timeout=5)


def test_anthropic_json_and_recording():
    with LLMServer(replies=[Reply("first", usage={"output_tokens": 7}), "second"]) as srv:
        c = _anthropic(srv)
        r1 = c.messages.create(model="m", max_tokens=10, system="sys", messages=MSGS)
        r2 = c.messages.create(model="m", max_tokens=10, system="sys", messages=MSGS)
    assert [r1.content[0].text, r2.content[0].text] == ["first", "second"]
    assert r1.usage.output_tokens == 7 and r1.stop_reason == "end_turn"
    # the second identical prompt reads the first one's prefix from the simulated cache
    assert r1.usage.cache_read_input_tokens == 0 and r2.usage.cache_read_input_tokens > 0
    rec = srv.requests[0]
    assert rec.api == "anthropic" and rec.path == "/v1/messages" and rec.completed
    assert json.loads(rec.raw) == rec.body and rec.body["system"] == "sys"


def test_anthropic_stream_events_and_tool_use():
    reply = Reply("hello world, streamed", tool_calls=[("Read", {"file_path": "a.py"})])
    with LLMServer(replies=[reply]) as srv:
        with _anthropic(srv).messages.stream(model="m", max_tokens=10, messages=MSGS) as s:
            kinds = [e.type for e in s]
            final = s.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
    } <= set(kinds)
    assert final.content[0].text == "hello world, streamed"
    assert final.content[1].name == "Read" and final.content[1].input == {"file_path": "a.py"}
    assert final.stop_reason == "tool_use" and final.usage.input_tokens > 0
    assert srv.requests[0].streamed and srv.requests[0].chunks_sent > 1


def test_openai_json_and_stream_with_usage():
    with LLMServer(replies=["plain", Reply("streamed text here", chunk_chars=4)]) as srv:
        c = _openai(srv)
        r = c.chat.completions.create(model="m", messages=MSGS)
        chunks = list(
            c.chat.completions.create(
                model="m", messages=MSGS, stream=True, stream_options={"include_usage": True}
            )
        )
    assert r.choices[0].message.content == "plain" and r.usage.prompt_tokens > 0
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "streamed text here"
    assert (
        chunks[-1].usage.prompt_tokens > 0
        and chunks[-1].usage.prompt_tokens_details.cached_tokens > 0
    )
    assert srv.requests[1].api == "openai" and srv.requests[1].body["stream"] is True


def test_client_can_abort_mid_stream():
    with LLMServer(replies=[Reply("x" * 400, chunk_chars=4)], chunk_delay=0.02) as srv:
        with _anthropic(srv).messages.stream(model="m", max_tokens=10, messages=MSGS) as s:
            for event in s:
                if event.type == "content_block_delta":
                    break  # leaving the context manager closes the connection
        assert srv.wait_aborted(timeout=5)
    rec = srv.requests[0]
    assert rec.aborted and not rec.completed and rec.chunks_sent < 100


def test_a_client_killed_mid_body_sends_no_request():
    # a benchmark run SIGKILLed while writing a request: half a body is no request to judge
    seen = []
    with LLMServer(replies=lambda rec: seen.append(rec.body) or Reply("ok")) as srv:
        host, port = srv.base_url.removeprefix("http://").split(":")
        body = json.dumps({"model": "m", "max_tokens": 5, "messages": MSGS}).encode()
        with socket.create_connection((host, int(port.rstrip("/")))) as s:
            head = f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
            s.sendall(head.encode() + body[: len(body) // 2])
        r = _anthropic(srv).messages.create(model="m", max_tokens=5, messages=MSGS)
    assert r.content[0].text == "ok" and len(seen) == 1 and len(srv.requests) == 1


def test_error_status_and_callable_script():
    seen = []

    def script(rec):
        seen.append(rec.body["model"])
        return Reply("busy", status=529)

    with LLMServer(replies=script) as srv:
        with pytest.raises(anthropic.APIStatusError) as e:
            _anthropic(srv).messages.create(model="mm", max_tokens=5, messages=MSGS)
    assert e.value.status_code == 529 and seen == ["mm"]


def test_server_stops_itself():
    srv = LLMServer(lifetime=0.2).start()
    stopped = threading.Event()
    threading.Thread(target=lambda: (srv._stopping.wait(5), stopped.set()), daemon=True).start()
    assert stopped.wait(5)
    srv.stop()  # idempotent
