"""`winnow proxy`: context management in front of any agent, with no change to the agent.

    winnow proxy --upstream https://api.anthropic.com --window 200000 --audit runs/
    ANTHROPIC_BASE_URL=http://127.0.0.1:8787 claude        # or OPENAI_BASE_URL=.../v1 aider

    with ProxyServer(ProxyConfig(upstream=url, budget=80_000)) as proxy:
        client = anthropic.Anthropic(base_url=proxy.base_url)

Anthropic `POST /v1/messages` (`?beta=true` too) and `/v1/messages/count_tokens`, and OpenAI
`POST .../chat/completions` are planned by the `Rewriter` (proxy_state.py): under the budget
the request goes upstream byte for byte; over it, the history before the last assistant turn
is sent compressed, the same bytes request after request. Every other path, every header and
every response (SSE included, chunk by chunk as it arrives) passes through as it is; upstream
errors come back unchanged. A compression that fails for any reason sends the original request
(fail open) and says why in the log and the audit. Credentials are forwarded, never logged or
written; with `--idle` the headers of a conversation's last request are held in memory until
its idle compaction has run or is no longer due.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from winnow.serving.proxy_audit import ProxyAudit, ResponseTap
from winnow.serving.proxy_state import Plan, Rewriter, RewriterConfig, leading_system
from winnow.serving.proxy_wire import dumps

__all__ = ["ProxyConfig", "ProxyServer", "create_app", "resolve_budget"]

log = logging.getLogger("winnow.proxy")

# Hop-by-hop headers (RFC 9110 7.6.1) belong to one connection; host and length are redone.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


@dataclass
class ProxyConfig:
    """Where to listen, where to forward, the budget, and the limits that keep it robust."""

    upstream: str
    host: str = "127.0.0.1"
    port: int = 8787
    budget: int | str | None = None  # tokens, or "40%" of `window`; None: HARNESS_CTX_THRESHOLD
    window: int = 200_000
    idle: bool = False
    audit_dir: str | Path | None = None
    timeout_s: float = 600.0  # longest wait for the next bytes of a response (the SDKs' default)
    connect_timeout_s: float = 10.0
    max_body_bytes: int = 64 << 20  # the APIs take up to 32 MB
    rewriter: RewriterConfig | None = None  # its budget is set from `budget`
    idle_config: Any = None  # winnow.runtime.IdleConfig; None: its defaults

    def budget_tokens(self) -> int:
        return resolve_budget(self.budget, self.window)


def resolve_budget(budget: int | str | None, window: int, environ: Any = os.environ) -> int:
    """Tokens from a count, a share ("40%", 0.4) or None (HARNESS_CTX_THRESHOLD % of the window)."""
    from winnow.runtime.budget import env_threshold

    if window <= 0:
        raise ValueError(f"window must be a positive token count, not {window}")
    if budget is None:
        return int(window * env_threshold(environ=environ) / 100)
    if isinstance(budget, str):
        text = budget.strip()
        if text.endswith("%"):
            share = float(text[:-1]) / 100
            if not 0 < share <= 1:
                raise ValueError(f"budget share must be in (0%, 100%], not {budget!r}")
            return int(window * share)
        budget = int(text)
    if isinstance(budget, float):
        if not 0 < budget <= 1:
            raise ValueError(f"budget share must be in (0, 1], not {budget}")
        return int(window * budget)
    if budget <= 0:
        raise ValueError(f"budget must be a positive token count, not {budget}")
    return budget


def route(method: str, path: str) -> tuple[str, str] | None:
    """(api, kind) for the routes the proxy rewrites; None for those it passes through."""
    if method != "POST":
        return None
    if path.endswith("/v1/messages"):
        return "anthropic", "messages"
    if path.endswith("/v1/messages/count_tokens"):
        return "anthropic", "count_tokens"
    if path.endswith("/chat/completions"):
        return "openai", "messages"
    return None


class _Proxy:
    """The state behind the app: the upstream client, the rewriter, the audit, idle sessions."""

    def __init__(self, config: ProxyConfig, rewriter: Rewriter | None) -> None:
        self.config = config
        self.upstream = config.upstream.rstrip("/")
        if rewriter is None:
            rcfg = config.rewriter or RewriterConfig()
            rcfg.budget = config.budget_tokens()
            rewriter = Rewriter(rcfg)
        self.rewriter = rewriter
        self.audit = ProxyAudit(config.audit_dir) if config.audit_dir else None
        self.idle: Any = None
        if config.idle:
            folder = Path(config.audit_dir or ".winnow/proxy") / "idle"
            self.idle = IdleSessions(self.rewriter, self.upstream, folder, config.idle_config)
        self.client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        c = self.config
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(c.timeout_s, connect=c.connect_timeout_s),
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=64),
        )

    async def stop(self) -> None:
        if self.idle is not None:
            await self.idle.close()
        if self.client is not None:
            await self.client.aclose()

    async def handle(self, request: Request) -> Response:
        t0 = time.perf_counter()
        path, query = request.url.path, request.url.query
        raw = await _read_body(request, self.config.max_body_bytes)
        if raw is None:
            return _error_response(
                "anthropic" if "messages" in path else "openai",
                413,
                f"request body over {self.config.max_body_bytes:,} bytes",
            )
        found = route(request.method, path)
        plan: Plan | None = None
        error = None
        data = raw
        if found is not None:
            api, _kind = found
            try:
                plan = await asyncio.to_thread(self.rewriter.plan_request, api, raw)
                if plan is not None and plan.body is not None:
                    data = plan.data if plan.data is not None else dumps(plan.body).encode()
            except ValueError as e:  # not JSON: the upstream says what is wrong with it
                plan, data = None, raw
                if not isinstance(e, (json.JSONDecodeError, UnicodeDecodeError)):
                    error = f"{type(e).__name__}: {str(e)[:200]}"
                    log.warning("winnow proxy: compression failed, sent unchanged: %s", error)
            except Exception as e:  # noqa: BLE001 - fail open: the original request goes upstream
                error = f"{type(e).__name__}: {str(e)[:200]}"
                log.warning("winnow proxy: compression failed, request sent unchanged: %s", error)
                plan, data = None, raw
            if plan is not None and self.idle is not None:
                self.idle.activity(plan)
        added_ms = (time.perf_counter() - t0) * 1000
        headers = [
            (k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in _HOP
        ]
        url = self.upstream + path + (f"?{query}" if query else "")
        upstream = httpx.Request(request.method, url, headers=headers, content=data)
        assert self.client is not None
        t1 = time.perf_counter()
        try:
            resp = await self.client.send(upstream, stream=True)
        except httpx.TimeoutException:
            self._audit(found, plan, path, 504, {}, added_ms, t1, error or "upstream timeout")
            return _error_response(found[0] if found else "anthropic", 504, "upstream timed out")
        except httpx.HTTPError as e:
            why = f"upstream unreachable: {type(e).__name__}"
            self._audit(found, plan, path, 502, {}, added_ms, t1, error or why)
            return _error_response(found[0] if found else "anthropic", 502, why)
        out_headers = [  # the upstream's own headers; its length holds: the bytes are its own
            (k, v)
            for k, v in resp.headers.raw
            if k.lower() == b"content-length" or k.decode("latin-1").lower() not in _HOP
        ]
        tap = None
        if found is not None:
            streamed = "text/event-stream" in resp.headers.get("content-type", "")
            tap = ResponseTap(found[0], streamed, resp.headers.get("content-encoding", "").lower())
        response = StreamingResponse(
            self._relay(resp, tap, found, plan, path, added_ms, t1, error, request.headers),
            status_code=resp.status_code,
        )
        response.raw_headers = out_headers
        return response

    async def _relay(
        self,
        resp: httpx.Response,
        tap: ResponseTap | None,
        found: tuple[str, str] | None,
        plan: Plan | None,
        path: str,
        added_ms: float,
        t1: float,
        error: str | None,
        request_headers: Any,
    ) -> AsyncIterator[bytes]:
        """The upstream's bytes as they arrive; the audit and idle bookkeeping at the end."""
        broke = None
        try:
            async for chunk in resp.aiter_raw():
                if tap is not None:
                    tap.feed(chunk)
                yield chunk
        except httpx.TimeoutException:
            broke = "upstream read timed out"
            if tap is not None and tap.streamed:  # say so the way the API does mid-stream
                yield _stream_error(tap.api, broke)
        except httpx.HTTPError as e:
            broke = f"upstream stream broken: {type(e).__name__}"
        finally:
            await resp.aclose()
            if tap is not None:
                tap.close()
            usage = tap.usage if tap is not None else {}
            self._audit(found, plan, path, resp.status_code, usage, added_ms, t1, error or broke)
            if (
                self.idle is not None
                and plan is not None
                and tap is not None
                and found is not None
                and found[1] == "messages"
                and resp.status_code == 200
                and tap.complete
                and broke is None
            ):
                self.idle.turn_ended(plan, tap, request_headers, path)

    def _audit(
        self,
        found: tuple[str, str] | None,
        plan: Plan | None,
        path: str,
        status: int,
        usage: dict[str, Any],
        added_ms: float,
        t1: float,
        error: str | None,
    ) -> None:
        if self.audit is None or found is None:
            return
        rec: dict[str, Any] = {
            "type": "request",
            "time": round(time.time(), 3),
            "api": found[0],
            "route": found[1],
            "path": path,
            "status": status,
        }
        if plan is not None:
            rec.update(
                conversation=plan.conversation,
                action=plan.action,
                tokens_in=plan.tokens_in,
                tokens_out=plan.tokens_out,
                messages_in=plan.messages_in,
                messages_out=plan.messages_out,
                covered=plan.covered,
                prefix_hash=plan.prefix_hash,
                changed=plan.changed,
            )
            if plan.dropped:
                rec["dropped_blocks"] = plan.dropped
            if plan.reason:
                rec["note"] = plan.reason
        else:
            rec["action"] = "failed_open" if error else "unchanged"
        rec.update(
            usage=usage,
            added_ms=round(added_ms, 2),
            upstream_ms=round((time.perf_counter() - t1) * 1000, 1),
        )
        if error:
            rec["error"] = error
        try:
            self.audit.write(rec)
        except OSError as e:  # a full disk must not break the relay
            log.warning("winnow proxy: audit not written: %s", e)


async def _read_body(request: Request, cap: int) -> bytes | None:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _error_body(api: str, status: int, message: str) -> dict[str, Any]:
    message = f"winnow proxy: {message}"
    if api == "anthropic":
        kind = {413: "request_too_large", 504: "timeout_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": "server_error", "code": None}}


def _error_response(api: str, status: int, message: str) -> Response:
    return Response(
        json.dumps(_error_body(api, status, message)),
        status_code=status,
        media_type="application/json",
    )


def _stream_error(api: str, message: str) -> bytes:
    data = json.dumps(_error_body(api, 500, message))
    return (
        f"event: error\ndata: {data}\n\n" if api == "anthropic" else f"data: {data}\n\n"
    ).encode()


def create_app(config: ProxyConfig, *, rewriter: Rewriter | None = None) -> FastAPI:
    """The proxy as an ASGI app: every method and path, forwarded to `config.upstream`."""
    proxy = _Proxy(config, rewriter)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await proxy.start()
        try:
            yield
        finally:
            await proxy.stop()

    app = FastAPI(
        title="winnow proxy", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.proxy = proxy

    @app.api_route(
        "/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    )
    async def forward(request: Request) -> Response:
        return await proxy.handle(request)

    return app


class ProxyServer:
    """The proxy on a background thread (uvicorn), e.g. inside a harness or a test.

    Port 0 picks a free port; `base_url` says which.
    """

    def __init__(self, config: ProxyConfig, *, rewriter: Rewriter | None = None) -> None:
        self.config = config
        self.app = create_app(config, rewriter=rewriter)
        self._server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host=config.host,
                port=config.port,
                log_level="warning",
                server_header=False,
                date_header=False,
                timeout_keep_alive=30,
            )
        )
        self._thread: threading.Thread | None = None

    @property
    def proxy(self) -> _Proxy:
        return self.app.state.proxy

    def start(self) -> ProxyServer:
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("winnow proxy did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._server.servers[0].sockets[0].getsockname()[1]

    @property
    def base_url(self) -> str:
        host = self.config.host if self.config.host not in ("0.0.0.0", "::") else "127.0.0.1"
        return f"http://{host}:{self.port}"


# -- idle compaction ------------------------------------------------------------------------------


@dataclass
class _Idle:
    compactor: Any
    client: Any
    chain: bytes = b""  # the key of the prefix it made
    watcher: Any = None
    installed: bool = False


class IdleSessions:
    """`--idle`: after a turn that ends with the agent waiting for its user, an IdleCompactor
    (winnow.runtime.idle) on exactly what was sent arms a timer at the cache TTL minus a safety
    margin, when the economics say it pays; it then sends the insert-then-compress request on
    the warm cache. Its summary, with the recent turns, becomes the prefix that stands for the
    conversation so far, so the next request of the conversation is sent as summary + recent
    turns + what is new. Any request of the conversation meanwhile cancels the compaction.

    Call `activity` and `turn_ended` from the event loop.
    """

    def __init__(
        self,
        rewriter: Rewriter,
        upstream: str,
        folder: str | Any,
        config: Any = None,
        *,
        max_sessions: int = 64,
    ) -> None:
        self.rewriter = rewriter
        self.upstream = upstream.rstrip("/")
        self.folder = folder
        self.config = config
        self.max_sessions = max_sessions
        self.sessions: OrderedDict[str, _Idle] = OrderedDict()

    def activity(self, plan: Plan) -> None:
        """A request of the conversation arrived: cancel its timer or compaction."""
        s = self.sessions.pop(plan.conversation, None)
        if s is None:
            return
        s.compactor.preempt("request")
        if s.installed and plan.action != "idle":
            self.rewriter.forget(s.chain)  # the request went without it: do not switch later

    def turn_ended(self, plan: Plan, tap: Any, headers: Any, path: str) -> None:
        """The answer to `plan` is complete: arm the conversation's compaction if it pays."""
        from winnow.runtime.archive import AuditLog
        from winnow.runtime.llm import Conversation
        from winnow.serving.proxy_compress import idle_compactor

        if tap.stop_reason not in ("end_turn", "stop") or tap.message is None:
            return  # the agent is mid-loop: its tool results follow at once
        body = plan.body if plan.body is not None else plan.request_body()
        if body is None:
            return
        api = plan.api
        rest = {
            k: v
            for k, v in body.items()
            if k not in ("model", "messages", "system", "tools", "stream", "stream_options")
        }
        messages = list(body["messages"])
        system = body.get("system")
        if api == "openai":
            lead = leading_system(api, messages)
            if lead > 1 or (lead == 1 and set(messages[0]) != {"role", "content"}):
                return  # the compaction would fold the second into its summary
            system = messages[0]["content"] if lead else None
            messages = messages[lead:]
        conv = Conversation(
            api, str(body.get("model") or ""), [*messages, tap.message], system,
            body.get("tools"), rest,
        )  # fmt: skip
        base = self.upstream
        if api == "openai":
            base += path[: -len("/chat/completions")]
        keep = {
            k: v
            for k, v in headers.items()
            if k.lower() not in ("host", "content-length", "accept-encoding", "connection")
        }
        compactor, client = idle_compactor(
            conv,
            base,
            keep,
            config=self.config,
            classifier=getattr(self.rewriter.compressor, "classifier", "default"),
            audit=AuditLog(self.folder, plan.conversation),
            session_id=plan.conversation,
        )
        why = compactor.turn_ended(tap.usage)
        log.debug("winnow proxy: idle compaction of %s: %s", plan.conversation, why)
        if compactor.state != "armed":
            asyncio.get_running_loop().create_task(client.close())
            return
        s = _Idle(compactor, client)
        old = self.sessions.pop(plan.conversation, None)
        if old is not None:
            old.compactor.preempt("replaced")
        self.sessions[plan.conversation] = s
        while len(self.sessions) > self.max_sessions:
            _, gone = self.sessions.popitem(last=False)
            gone.compactor.preempt("too many idle sessions")
        s.watcher = asyncio.get_running_loop().create_task(self._watch(plan, s))

    async def _watch(self, plan: Plan, s: _Idle) -> None:
        try:
            await s.compactor.wait()
            if (
                s.compactor.state != "compacted_idle"
                or self.sessions.get(plan.conversation) is not s
            ):
                return
            s.chain = self.rewriter.remember_compacted(plan, s.compactor.conversation.messages[:-1])
            s.installed = True
        finally:
            await s.client.close()  # the credentials go with it

    async def close(self) -> None:
        for s in list(self.sessions.values()):
            s.compactor.preempt("shutdown")
            if s.watcher is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await s.watcher
        self.sessions.clear()
