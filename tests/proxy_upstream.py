"""A scripted stand-in for the Anthropic and OpenAI APIs, strict like them, for the proxy tests.

    def script(rec):                               # what to answer to each request
        return Turn(text="Let me look.", tool_calls=[("Bash", {"command": "ls"})])

    with Upstream(script) as up:                   # 127.0.0.1, ephemeral port
        ...point a client (or the proxy) at up.base_url...
        assert not up.problems()                   # every request was valid

It records every request (path, query, headers, raw bytes, parsed body), validates it as the
real APIs do (tests/api_validate.py: tool pairs and their placement, role order, non-empty
text, at most 4 cache_control blocks, TTL order; and every thinking block exactly as this
server signed it), answers an invalid request with the API's 400, and otherwise
answers with the APIs' own JSON or SSE events, each response with fresh message and tool ids.
Usage simulates prompt caching: the longest prefix (tools, system, messages, with cache_control
markers left out) shared byte for byte with an earlier request counts as cache reads, when it
reaches the 1,024-token minimum (bytes / 4) and the request asks for caching (OpenAI: always,
in steps of 128 tokens). `GET /v1/models` and `POST /v1/messages/count_tokens` answer too.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from api_validate import validate_anthropic, validate_openai
from llm_server import LoopbackServer, common_prefix, error_body

BYTES_PER_TOKEN = 4
MIN_CACHEABLE = 1024
_MARKER = re.compile(r',"cache_control":\{[^{}]*\}|"cache_control":\{[^{}]*\},?')


@dataclass
class Turn:
    """One scripted answer. `status` >= 400 answers with the API's error JSON instead."""

    text: str = "ok"
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    thinking: str | None = None  # emitted first, signed
    status: int = 200
    stop_reason: str | None = None
    stall: float = 0.0  # seconds before the response starts
    chunk_delay: float = 0.0  # seconds between streamed deltas
    chunk_chars: int = 16


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    api: str
    problems: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    sent: bytes = b""  # the response body bytes as written (chunk framing removed)
    aborted: bool = False
    completed: bool = False


def sign(thinking: str) -> str:
    return "sig_" + hashlib.sha256(thinking.encode()).hexdigest()[:32]


def cacheable_prompt(api: str, body: dict[str, Any]) -> bytes:
    """What a provider's prefix cache hashes, in order, without the markers that name it."""
    parts = [body.get("tools"), body.get("system")] if api == "anthropic" else [body.get("tools")]
    parts.append(body.get("messages"))
    text = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
    return _MARKER.sub("", text).encode()


# -- validation ----------------------------------------------------------------------------------


def validate(api: str, body: Any, signed: dict[str, str]) -> list[str]:
    """What the API would answer with a 400 (tests/api_validate.py, contract C3), and, as the
    API checks signatures, every thinking block exactly as this server signed it."""
    if api == "openai":
        return validate_openai(body)
    problems = validate_anthropic(body)
    for i, m in enumerate(body.get("messages") or []):
        content = m.get("content") if isinstance(m, dict) else None
        for j, b in enumerate(content if isinstance(content, list) else []):
            if isinstance(b, dict) and b.get("type") == "thinking":
                if signed.get(b.get("signature", "")) != b.get("thinking"):
                    problems.append(f"messages.{i}.content.{j}: thinking changed or not signed")
    return problems


# -- the server ----------------------------------------------------------------------------------


class Upstream(LoopbackServer):
    """Threaded loopback stand-in; a context manager."""

    def __init__(
        self,
        script: Callable[[Recorded], Turn | str] | list[Turn | str] | None = None,
        *,
        lifetime: float = 300.0,
    ) -> None:
        super().__init__(lifetime)
        self.handler = _Handler
        self.script = script
        self.requests: list[Recorded] = []
        self.signed: dict[str, str] = {}  # signature -> the thinking it signs
        self._prompts: list[bytes] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def __enter__(self) -> Upstream:
        return self.start()

    def problems(self) -> list[str]:
        return [f"request {i}: {p}" for i, r in enumerate(self.requests) for p in r.problems]

    def messages_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith(("/v1/messages", "/completions"))]

    def next_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"

    def _answer(self, rec: Recorded) -> Turn:
        with self._lock:
            self.requests.append(rec)
            script = self.script
            if callable(script):
                turn = script(rec)
            elif script:
                n = len(self.messages_requests()) - 1
                turn = script[min(n, len(script) - 1)]
            else:
                turn = Turn()
            turn = Turn(text=turn) if isinstance(turn, str) else turn
            if isinstance(rec.body, dict) and rec.path.endswith(("/messages", "/completions")):
                rec.problems = validate(rec.api, rec.body, self.signed)
                rec.usage = self._usage(rec, turn)
            return turn

    def _usage(self, rec: Recorded, turn: Turn) -> dict[str, Any]:
        prompt = cacheable_prompt(rec.api, rec.body)
        shared = max((common_prefix(prompt, p) for p in self._prompts), default=0)
        self._prompts.append(prompt)
        total = len(rec.raw) // BYTES_PER_TOKEN
        cached = min(shared // BYTES_PER_TOKEN, total)
        out = max(1, len(turn.text) // BYTES_PER_TOKEN) + 10 * len(turn.tool_calls)
        if cached < MIN_CACHEABLE:
            cached = 0
        if rec.api == "openai":
            cached = cached // 128 * 128
            return {
                "prompt_tokens": total,
                "completion_tokens": out,
                "total_tokens": total + out,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
        marked = b'"cache_control"' in rec.raw
        cached = cached if marked else 0
        return {
            "input_tokens": total - cached if not marked else 0,
            "cache_creation_input_tokens": total - cached if marked else 0,
            "cache_read_input_tokens": cached,
            "output_tokens": out,
        }


class _Handler(BaseHTTPRequestHandler):
    owner: Upstream
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    # -- plumbing ----------------------------------------------------------------------------

    def _record(self, method: str) -> Recorded:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path, _, query = self.path.partition("?")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        api = "openai" if "completions" in path else "anthropic"
        return Recorded(
            method, path, query, {k.lower(): v for k, v in self.headers.items()}, raw, body, api
        )

    def _send_json(self, rec: Recorded, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        rec.sent = data
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", self.owner.next_id("req"))
        self.send_header("x-stand-in", "yes")
        self.end_headers()
        self.wfile.write(data)
        rec.completed = True

    def _chunk(self, rec: Recorded, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError as e:
            rec.aborted = True
            raise _Gone from e
        rec.sent += data

    def _event(self, rec: Recorded, name: str | None, payload: Any, delay: float = 0.0) -> None:
        if delay:
            time.sleep(delay)
        data = payload if isinstance(payload, str) else json.dumps(payload)
        head = f"event: {name}\n" if name else ""
        self._chunk(rec, f"{head}data: {data}\n\n".encode())

    # -- routes ------------------------------------------------------------------------------

    def do_GET(self) -> None:
        rec = self._record("GET")
        self.owner._answer(rec)
        if rec.path == "/v1/models":
            self._send_json(rec, 200, {"data": [{"id": "claude-test", "type": "model"}]})
        else:
            self._send_json(rec, 404, {"type": "error", "error": {"type": "not_found_error"}})

    def do_POST(self) -> None:
        rec = self._record("POST")
        owner = self.owner
        turn = owner._answer(rec)
        if turn.stall:
            owner._stopping.wait(turn.stall)
        if not isinstance(rec.body, dict):
            self._send_json(rec, 400, error_body(rec.api, 400, "body is not a JSON object"))
            return
        if rec.path.endswith("/count_tokens"):
            total = len(rec.raw) // BYTES_PER_TOKEN
            self._send_json(rec, 200, {"input_tokens": total})
            return
        if not rec.path.endswith(("/v1/messages", "/chat/completions")):
            self._send_json(rec, 404, error_body(rec.api, 404, f"no route {rec.path}"))
            return
        if turn.status >= 400:
            self._send_json(rec, turn.status, error_body(rec.api, turn.status, turn.text))
            return
        if rec.problems:  # what the real API does with an invalid request
            self._send_json(rec, 400, error_body(rec.api, 400, "; ".join(rec.problems)[:500]))
            return
        try:
            if rec.api == "anthropic":
                self._anthropic(rec, turn)
            else:
                self._openai(rec, turn)
        except _Gone:
            self.close_connection = True

    def _anthropic(self, rec: Recorded, turn: Turn) -> None:
        owner = self.owner
        model = rec.body.get("model", "claude-test")
        blocks: list[dict[str, Any]] = []
        if turn.thinking is not None:
            sig = sign(turn.thinking)
            owner.signed[sig] = turn.thinking
            blocks.append({"type": "thinking", "thinking": turn.thinking, "signature": sig})
        if turn.text:
            blocks.append({"type": "text", "text": turn.text})
        for name, args in turn.tool_calls:
            blocks.append(
                {"type": "tool_use", "id": owner.next_id("toolu"), "name": name, "input": args}
            )
        stop = turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn")
        msg = {
            "id": owner.next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": rec.usage,
        }
        if not rec.body.get("stream"):
            self._send_json(rec, 200, msg)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", owner.next_id("req"))
        self.end_headers()
        start = {
            **msg,
            "content": [],
            "stop_reason": None,
            "usage": {**rec.usage, "output_tokens": 1},
        }
        self._event(rec, "message_start", {"type": "message_start", "message": start})
        for i, b in enumerate(blocks):
            empty = {
                "text": {"type": "text", "text": ""},
                "thinking": {"type": "thinking", "thinking": "", "signature": ""},
                "tool_use": {**b, "input": {}},
            }[b["type"]]
            self._event(
                rec,
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": empty},
            )
            if i == 0:
                self._event(rec, "ping", {"type": "ping"})
            if b["type"] == "tool_use":
                pieces = [("input_json_delta", "partial_json", json.dumps(b["input"]))]
            else:
                key = b["type"]
                text = b[key]
                step = max(1, turn.chunk_chars)
                kind = "text_delta" if key == "text" else "thinking_delta"
                pieces = [(kind, key, text[k : k + step]) for k in range(0, len(text), step)]
                if key == "thinking":
                    pieces.append(("signature_delta", "signature", b["signature"]))
            for kind, key, piece in pieces:
                delta = {"type": kind, key: piece}
                self._event(
                    rec,
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": delta},
                    turn.chunk_delay,
                )
            self._event(rec, "content_block_stop", {"type": "content_block_stop", "index": i})
        self._event(
            rec,
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": rec.usage["output_tokens"]},
            },
        )
        self._event(rec, "message_stop", {"type": "message_stop"})
        self._chunk(rec, b"")
        rec.completed = True

    def _openai(self, rec: Recorded, turn: Turn) -> None:
        owner = self.owner
        model = rec.body.get("model", "gpt-test")
        calls = [
            {
                "id": owner.next_id("call"),
                "type": "function",
                "function": {"name": n, "arguments": json.dumps(a)},
            }
            for n, a in turn.tool_calls
        ]
        finish = turn.stop_reason or ("tool_calls" if calls else "stop")
        cid = owner.next_id("chatcmpl")
        if not rec.body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            if calls:
                message["tool_calls"] = calls
            self._send_json(
                rec,
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": rec.usage,
                },
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": cid, "object": "chat.completion.chunk", "created": 0, "model": model}

        def chunk(delta: dict[str, Any], finish: str | None = None, delay: float = 0.0) -> None:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            self._event(rec, None, {**base, "choices": [choice]}, delay)

        chunk({"role": "assistant", "content": ""})
        step = max(1, turn.chunk_chars)
        for k in range(0, len(turn.text), step):
            chunk({"content": turn.text[k : k + step]}, delay=turn.chunk_delay)
        for i, c in enumerate(calls):
            chunk({"tool_calls": [{"index": i, **c}]}, delay=turn.chunk_delay)
        chunk({}, finish)
        if (rec.body.get("stream_options") or {}).get("include_usage"):
            self._event(rec, None, {**base, "choices": [], "usage": rec.usage})
        self._event(rec, None, "[DONE]")
        self._chunk(rec, b"")
        rec.completed = True


class _Gone(Exception):
    pass
