"""A real loopback LLM server for tests: the Anthropic Messages and OpenAI chat wire formats.

    with LLMServer(replies=["Summary: ..."], chunk_delay=0.05) as srv:
        client = anthropic.Anthropic(base_url=srv.base_url, api_key="test", max_retries=0)
        openai_client = openai.OpenAI(base_url=srv.openai_base_url, api_key="test")
        ...
        assert srv.requests[0].body["messages"][-1]["role"] == "user"

It listens on 127.0.0.1 (ephemeral port) in daemon threads, records every request (raw bytes
and parsed JSON), answers from a script of replies (JSON or SSE when the body says
`stream: true`), waits `chunk_delay` between streamed deltas so a client can abort mid-stream
(the abort is recorded), and shuts itself down on exit or after `lifetime` seconds.

Usage figures simulate prompt caching: the longest common prefix (in bytes / 4) of the
request's (system, tools, messages) with an earlier request counts as cache reads.

With `validate` (e.g. `api_validate.validate_anthropic` for both APIs, see `strict()`), a
request the real API would reject is answered 400 with the problems, which are also kept on
the recorded request (`problems`).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LLMServer", "LoopbackServer", "RecordedRequest", "Reply", "common_prefix", "error_body"]

BYTES_PER_TOKEN = 4  # the usual rough figure; only used for the simulated usage


@dataclass
class Reply:
    """One scripted answer. `usage` entries override the simulated figures.

    A `status` >= 400 answers with the provider's error JSON instead of a message.
    `tool_calls` are (name, input) pairs emitted after the text as tool_use / tool_calls.
    Faults, for streamed replies: `stall_s` waits that long before the first delta; after
    `cut_after` deltas the stream ends cleanly without its closing events (a truncated
    stream); after `reset_after` deltas the connection is reset (TCP RST).
    """

    text: str = "ok"
    usage: dict[str, int] = field(default_factory=dict)
    stop_reason: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200
    chunk_chars: int = 8
    chunk_delay: float | None = None  # None: the server's default
    stall_s: float = 0.0
    cut_after: int | None = None
    reset_after: int | None = None
    ignore_include_usage: bool = False  # as some OpenAI-compatible servers do


@dataclass
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    api: str  # "anthropic" or "openai"
    received_at: float
    streamed: bool = False
    chunks_sent: int = 0
    completed: bool = False
    aborted: bool = False  # the client hung up before the end of the stream
    cut: bool = False  # the server cut or reset the stream on purpose (Reply faults)
    reply: Reply | None = None
    problems: list[str] = field(default_factory=list)  # what `validate` found


def strict(api: str, body: Any) -> list[str]:
    """The validator of tests/api_validate.py for the API a request was sent to."""
    from api_validate import validate_anthropic, validate_openai

    return validate_anthropic(body) if api == "anthropic" else validate_openai(body)


def _prompt_key(api: str, body: dict[str, Any]) -> bytes:
    """The cacheable prompt: what a provider's prefix cache would hash, in order."""
    if api == "anthropic":
        parts = {
            "tools": body.get("tools"),
            "system": body.get("system"),
            "messages": body.get("messages"),
        }
    else:
        parts = {"tools": body.get("tools"), "messages": body.get("messages")}
    return json.dumps(parts, ensure_ascii=False, separators=(",", ":")).encode()


def common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix (a binary search: fast on large bodies)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 (ephemeral port), a context manager; it stops on
    exit or after `lifetime` seconds. Its `handler` class reaches the server as `self.owner`."""

    handler: type[BaseHTTPRequestHandler]

    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    def start(self) -> Any:
        Handler = type("Handler", (self.handler,), {"owner": self})  # noqa: N806
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True).start()
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._timer:
            self._timer.cancel()
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """Root URL; the Anthropic SDK appends /v1/messages."""
        return f"http://127.0.0.1:{self.port}"


class _Aborted(Exception):
    pass


class _Cut(Exception):
    pass


class LLMServer(LoopbackServer):
    """Threaded loopback server; use as a context manager."""

    def __init__(
        self,
        replies: list[Reply | str] | Callable[[RecordedRequest], Reply | str] | None = None,
        *,
        chunk_delay: float = 0.0,
        lifetime: float = 60.0,
        model: str = "test-model",
        validate: Callable[[str, Any], list[str]] | None = None,
    ) -> None:
        super().__init__(lifetime)
        self.handler = _Handler
        self._script = replies
        self.validate = validate
        self._next = 0
        self.chunk_delay = chunk_delay
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._prompts: list[bytes] = []
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.stream_started = threading.Event()  # set once any stream has sent a delta

    def __enter__(self) -> LLMServer:
        return self.start()

    @property
    def openai_base_url(self) -> str:
        """The OpenAI SDK appends /chat/completions to its base_url."""
        return f"{self.base_url}/v1"

    # -- assertions helpers ------------------------------------------------------------------

    @property
    def bodies(self) -> list[Any]:
        with self._lock:
            return [r.body for r in self.requests]

    def wait_for(
        self, predicate: Callable[[list[RecordedRequest]], bool], timeout: float = 5.0
    ) -> bool:
        """Block until predicate(requests) holds (checked on every server-side event)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.requests):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> bool:
        return self.wait_for(lambda rs: len(rs) >= n, timeout)

    def wait_aborted(self, timeout: float = 5.0) -> bool:
        """Block until some request's stream was aborted by its client."""
        return self.wait_for(lambda rs: any(r.aborted for r in rs), timeout)

    # -- internals -------------------------------------------------------------------------

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _record(self, rec: RecordedRequest) -> tuple[Reply, int]:
        """Store the request, pick its reply, and return (reply, cached prefix tokens)."""
        with self._cond:
            self.requests.append(rec)
            if callable(self._script):
                reply = self._script(rec)
            elif self._script:
                reply = self._script[min(self._next, len(self._script) - 1)]
                self._next += 1
            else:
                reply = Reply()
            reply = Reply(text=reply) if isinstance(reply, str) else reply
            rec.reply = reply
            cached = 0
            if isinstance(rec.body, dict):
                key = _prompt_key(rec.api, rec.body)
                cached = max((common_prefix(key, p) for p in self._prompts), default=0)
                self._prompts.append(key)
                cached //= BYTES_PER_TOKEN
            self._cond.notify_all()
            return reply, cached

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)


def _usage(rec: RecordedRequest, reply: Reply, cached: int) -> dict[str, int]:
    total = len(rec.raw) // BYTES_PER_TOKEN
    cached = min(cached, total)
    fresh = total - cached
    uses_cache_control = b'"cache_control"' in rec.raw
    out = max(1, len(reply.text) // BYTES_PER_TOKEN) + 10 * len(reply.tool_calls)
    if rec.api == "anthropic":
        u = {
            "input_tokens": 0 if uses_cache_control else fresh,
            "cache_creation_input_tokens": fresh if uses_cache_control else 0,
            "cache_read_input_tokens": cached,
            "output_tokens": out,
        }
    else:
        u = {
            "prompt_tokens": total,
            "completion_tokens": out,
            "total_tokens": total + out,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
    u.update(reply.usage)
    if rec.api == "openai" and "total_tokens" not in reply.usage:
        u["total_tokens"] = u["prompt_tokens"] + u["completion_tokens"]
    return u


def _chunks(text: str, size: int) -> Iterator[str]:
    for i in range(0, len(text), max(1, size)):
        yield text[i : i + size]


class _Handler(BaseHTTPRequestHandler):
    owner: LLMServer
    protocol_version = "HTTP/1.1"  # keep-alive, like the SDKs expect; streams are chunked
    timeout = 10  # idle keep-alive connections give up on their own

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        pass  # quiet tests

    # -- plumbing --------------------------------------------------------------------------

    def _send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", f"req_{id(obj):x}")
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError) as e:
            raise _Aborted from e

    def _event(self, name: str | None, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        head = f"event: {name}\n" if name else ""
        self._write_chunk(f"{head}data: {text}\n\n".encode())

    # -- routing ---------------------------------------------------------------------------

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if len(raw) < length:
            # the client went away mid-send (a killed run): no request reached the API, so
            # there is nothing to record, validate or answer
            self.close_connection = True
            return
        path = self.path.split("?")[0]
        if path.endswith("/v1/messages") or path == "/messages":
            api = "anthropic"
        elif path.endswith("/chat/completions"):
            api = "openai"
        else:
            self._send_json(404, {"error": {"message": f"no route {path}"}})
            return
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        rec = RecordedRequest(
            method="POST",
            path=path,
            headers={k.lower(): v for k, v in self.headers.items()},
            raw=raw,
            body=body,
            api=api,
            received_at=time.monotonic(),
        )
        if self.owner.validate is not None:
            rec.problems = self.owner.validate(api, body)
        reply, cached = self.owner._record(rec)
        if not isinstance(body, dict):
            self._send_json(400, error_body(api, 400, "body is not a JSON object"))
            return
        if rec.problems:
            self._send_json(400, error_body(api, 400, "; ".join(rec.problems)))
            return
        if reply.status >= 400:
            self._send_json(reply.status, error_body(api, reply.status, reply.text))
            return
        usage = _usage(rec, reply, cached)
        model = body.get("model") or self.owner.model
        rec.streamed = bool(body.get("stream"))
        try:
            if api == "anthropic":
                if rec.streamed:
                    self._anthropic_stream(rec, reply, usage, model)
                else:
                    self._send_json(200, _anthropic_message(reply, usage, model))
            else:
                if rec.streamed:
                    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                    self._openai_stream(rec, reply, usage, model, include_usage)
                else:
                    self._send_json(200, _openai_completion(reply, usage, model))
            rec.completed = True
        except _Aborted:
            rec.aborted = True
            self.close_connection = True
        except _Cut:
            rec.cut = True
            self.close_connection = True
        finally:
            self.owner._notify()

    def _delay(self, reply: Reply) -> None:
        self.owner._sleep(
            self.owner.chunk_delay if reply.chunk_delay is None else reply.chunk_delay
        )
        if self.owner._stopping.is_set():
            raise _Aborted

    def _delta_sent(self, rec: RecordedRequest) -> None:
        rec.chunks_sent += 1
        self.owner.stream_started.set()
        self.owner._notify()
        reply = rec.reply
        if reply and reply.reset_after is not None and rec.chunks_sent >= reply.reset_after:
            # SO_LINGER 0: close() sends a RST instead of a FIN
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            raise _Cut
        if reply and reply.cut_after is not None and rec.chunks_sent >= reply.cut_after:
            self._write_chunk(b"")  # the end of the chunked body: a clean, early end
            raise _Cut

    def _anthropic_stream(
        self, rec: RecordedRequest, reply: Reply, usage: dict, model: str
    ) -> None:
        self._start_stream()
        self.owner._sleep(reply.stall_s)
        start_usage = {**usage, "output_tokens": 1}
        msg = _anthropic_message(reply, start_usage, model)
        msg.update(content=[], stop_reason=None, stop_sequence=None)
        self._event("message_start", {"type": "message_start", "message": msg})
        index = 0
        if reply.text:
            block = {"type": "text", "text": ""}
            self._event(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            )
            self._event("ping", {"type": "ping"})
            for piece in _chunks(reply.text, reply.chunk_chars):
                self._delay(reply)
                delta = {"type": "text_delta", "text": piece}
                self._event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
                self._delta_sent(rec)
            self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
            index = 1
        for i, (name, args) in enumerate(reply.tool_calls, start=index):
            block = {"type": "tool_use", "id": f"toolu_{i:02d}", "name": name, "input": {}}
            self._event(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": block},
            )
            self._delay(reply)
            delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
            self._event(
                "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
            )
            self._delta_sent(rec)
            self._event("content_block_stop", {"type": "content_block_stop", "index": i})
        stop = {"stop_reason": _stop_reason(reply, "anthropic"), "stop_sequence": None}
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": stop,
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
        self._event("message_stop", {"type": "message_stop"})
        self._write_chunk(b"")

    def _openai_stream(
        self, rec: RecordedRequest, reply: Reply, usage: dict, model: str, include_usage: bool
    ) -> None:
        self._start_stream()
        self.owner._sleep(reply.stall_s)
        base = {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }

        def chunk(delta: dict, finish: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            self._event(None, {**base, "choices": [choice]})

        chunk({"role": "assistant", "content": ""})
        for piece in _chunks(reply.text, reply.chunk_chars):
            self._delay(reply)
            chunk({"content": piece})
            self._delta_sent(rec)
        for i, (name, args) in enumerate(reply.tool_calls):
            self._delay(reply)
            call = {
                "index": i,
                "id": f"call_{i:02d}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            chunk({"tool_calls": [call]})
            self._delta_sent(rec)
        chunk({}, _stop_reason(reply, "openai"))
        if include_usage and not reply.ignore_include_usage:
            self._event(None, {**base, "choices": [], "usage": usage})
        self._event(None, "[DONE]")
        self._write_chunk(b"")


def _stop_reason(reply: Reply, api: str) -> str:
    if reply.stop_reason:
        return reply.stop_reason
    if reply.tool_calls:
        return "tool_use" if api == "anthropic" else "tool_calls"
    return "end_turn" if api == "anthropic" else "stop"


def _anthropic_message(reply: Reply, usage: dict, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [
        {"type": "tool_use", "id": f"toolu_{i:02d}", "name": name, "input": args}
        for i, (name, args) in enumerate(reply.tool_calls, start=len(content))
    ]
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _stop_reason(reply, "anthropic"),
        "stop_sequence": None,
        "usage": usage,
    }


def _openai_completion(reply: Reply, usage: dict, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i:02d}",
                "type": "function",
                "function": {"name": n, "arguments": json.dumps(a)},
            }
            for i, (n, a) in enumerate(reply.tool_calls)
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _stop_reason(reply, "openai"),
            }
        ],
        "usage": usage,
    }


def error_body(api: str, status: int, message: str) -> dict[str, Any]:
    """The provider's error JSON for an HTTP status."""
    if api == "anthropic":
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            429: "rate_limit_error",
            529: "overloaded_error",
        }
        return {
            "type": "error",
            "error": {"type": kind.get(status, "api_error"), "message": message},
        }
    return {
        "error": {
            "message": message,
            "type": "server_error" if status >= 500 else "invalid_request_error",
            "code": None,
        }
    }
