"""The HTTP service: classify and compress conversations over a small FastAPI app.

    winnow serve --port 8000            # docs at http://127.0.0.1:8000/docs

Requests carry normalized units (`{"units": [...]}`), an OpenAI chat body (`{"messages": [...]}`)
or an Anthropic Messages body (`{"system": ..., "messages": [...]}`), read in memory. /v1/compress
answers `{"body": ..., "winnow": {...}}`: `body` is the compressed request in the input's format,
complete (every field and block winnow did not change is as it was, so it can be sent to the
provider as it is), and `winnow` holds winnow's figures. Bad input is a 4xx with a one-line
`detail`, never a 500.

Before any body is read, an ASGI guard checks the bearer token (401), the declared size
(413) and the uploads in flight (503 past `max_uploads`); a body must then arrive within
`body_timeout_s` (408) and under `max_bytes` (413), and all bodies being received together
stay under `max_buffered_bytes` (503): however many clients stall mid-upload, they hold at
most that much memory, for at most the timeout.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
)

from winnow import __version__
from winnow.data.readers import ReadReport, parse
from winnow.data.readers.anthropic_messages import is_anthropic
from winnow.data.readers.base import BadRecord
from winnow.data.readers.normalized import unit_from_record
from winnow.data.schema import Unit

Format = Literal["units", "openai", "anthropic"]


@dataclass
class ServiceConfig:
    """How the service runs."""

    model: str | None = None  # model directory; None = the shipped default
    token: str | None = None  # when set, /v1/* require `Authorization: Bearer <token>`
    max_bytes: int = 8 * 1024 * 1024  # larger request bodies get 413
    threads: int = 1  # onnxruntime intra-op threads per request
    body_timeout_s: float = 30.0  # a body not received in full by then gets 408
    max_uploads: int = 8  # request bodies read at once; more get 503
    max_buffered_bytes: int = 32 * 1024 * 1024  # of all bodies being read; past it, 503


class ConversationIn(BaseModel):
    """Normalized units, an OpenAI chat body or an Anthropic Messages body."""

    model_config = ConfigDict(extra="allow")
    format: Format | None = Field(
        None, description="input format; guessed from the body when absent"
    )
    units: list[dict[str, Any]] | None = Field(None, description="normalized units (SCHEMA.md)")
    messages: list[dict[str, Any]] | None = Field(None, description="OpenAI or Anthropic messages")
    system: str | list[dict[str, Any]] | None = Field(None, description="Anthropic system prompt")


class CompressIn(ConversationIn):
    token_limit: StrictInt | StrictFloat | StrictStr = Field(
        ...,
        description="the compressed conversation's token budget: a count (20000) or a share of "
        'the conversation\'s tokens as sent (0.3, or "30%")',
    )
    on_must_keep_overflow: Literal["summarize", "error", "summarize_largest", "truncate_oldest"] = (
        Field(
            "summarize",
            description="when must-keep units alone exceed the limit: summarize them lowest "
            "value first (the library's and the CLI's default), 422, summarize the largest of "
            "them first, or drop the oldest",
        )
    )

    @field_validator("token_limit")
    @classmethod
    def _a_count_or_a_share(cls, v: int | float | str) -> int | float | str:
        from winnow.serving.compressor import resolve_limit

        resolve_limit(v, 1)  # its form (a share is checked against any total): ValueError
        return v


class _Guard:
    """ASGI middleware: auth, size, concurrency and time limits, all before the app runs.

    The body is read here and replayed to the app: an error raised from the app's own read
    would be turned into a 400 by FastAPI's body parsing.
    """

    def __init__(self, app: Any, config: ServiceConfig):
        self.app, self.config = app, config
        self.uploads = 0  # bodies being read now (one event loop: no lock needed)
        self.buffered = 0  # their bytes so far
        # one body of the largest size always fits, whatever the two settings say
        self.budget = max(config.max_buffered_bytes, config.max_bytes + 65536)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        cfg, headers = self.config, dict(scope["headers"])
        refusal = self._refusal(scope["path"], headers)
        if refusal is not None:  # answered without reading a byte of the body
            return await refusal(scope, receive, send)
        if headers.get(b"content-length", b"0") == b"0" and b"transfer-encoding" not in headers:
            return await self.app(scope, receive, send)  # no body: nothing to hold
        if self.uploads >= cfg.max_uploads:
            busy = _refuse(
                503, f"{cfg.max_uploads} uploads in progress; retry", {"retry-after": "1"}
            )
            return await busy(scope, receive, send)
        self.uploads += 1
        body = bytearray()
        try:
            done = await asyncio.wait_for(self._read(receive, body), cfg.body_timeout_s)
        except asyncio.TimeoutError:
            late = _refuse(408, f"request body not received within {cfg.body_timeout_s:g} s")
            return await late(scope, receive, send)
        except _Full:
            full = _refuse(
                503, "too many request bodies being received; retry", {"retry-after": "1"}
            )
            return await full(scope, receive, send)
        finally:
            self.uploads -= 1
            self.buffered -= len(body)
        if not done:  # the client went away
            return None
        if len(body) > cfg.max_bytes:
            return await self._too_big()(scope, receive, send)
        if (b"NaN" in body or b"Infinity" in body) and _nonstandard_json(body):
            # Python's parser takes them; the answer, which may echo them, could not be written
            bad = _error(422, "request body holds NaN or Infinity, which JSON does not have")
            return await bad(scope, receive, send)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    def _refusal(self, path: str, headers: dict[bytes, bytes]) -> JSONResponse | None:
        cfg = self.config
        if cfg.token is not None and path.startswith("/v1/"):
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, f"Bearer {cfg.token}".encode()):
                return _refuse(401, "missing or wrong bearer token", {"www-authenticate": "Bearer"})
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > cfg.max_bytes:
            return self._too_big()
        return None

    def _too_big(self) -> JSONResponse:
        return _refuse(413, f"request body over {self.config.max_bytes} bytes")

    async def _read(self, receive: Any, body: bytearray) -> bool:
        """Read the body into `body`; False when the client disconnected. Stops one chunk
        past `max_bytes`; `_Full` past `max_buffered_bytes` of all bodies together."""
        more = True
        while more and len(body) <= self.config.max_bytes:
            message = await receive()
            if message["type"] != "http.request":
                return False
            chunk = message.get("body", b"")
            if self.buffered + len(chunk) > self.budget:
                raise _Full
            body += chunk
            self.buffered += len(chunk)
            more = message.get("more_body", False)
        return True


class _Full(Exception):
    pass


def _nonstandard_json(body: bytearray) -> bool:
    def reject(name: str) -> None:
        raise _NonStandard(name)

    try:
        json.loads(body, parse_constant=reject)
    except _NonStandard:
        return True
    except (ValueError, RecursionError):  # not JSON at all: FastAPI says so
        return False
    return False


class _NonStandard(Exception):
    pass


def _refuse(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An answer given before the body was read in full: the connection closes with it, so
    that the rest of the body is never read."""
    return _error(status, detail, {**(headers or {}), "connection": "close"})


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status, headers=headers)


def detect_format(body: ConversationIn) -> Format:
    """The format of a request body: explicit `format`, else `units`, else guessed from messages."""
    if body.format:
        return body.format
    if body.units is not None:
        return "units"
    if body.messages is None:
        raise ValueError("body needs `units` (normalized) or `messages` (OpenAI / Anthropic)")
    extra = body.model_extra or {}
    if is_anthropic({"messages": body.messages, **({"system": 1} if body.system else {}), **extra}):
        return "anthropic"
    return "openai"


# Fields of winnow's own in a request to the service, not the provider's.
WINNOW_FIELDS = ("format", "units", "token_limit", "on_must_keep_overflow")


def parse_units(body: ConversationIn, fmt: Format, raw: dict[str, Any] | None = None) -> list[Unit]:
    """The normalized units of a request body, read in memory; ValueError with a readable
    reason when malformed. `raw` is the body as sent (its field order is kept)."""
    if fmt == "units":
        if body.units is None:
            raise ValueError("format `units` needs a `units` list")
        return [_check_unit(d, i) for i, d in enumerate(body.units)]
    if body.messages is None:
        raise ValueError(f"format `{fmt}` needs a `messages` list")
    doc = raw if raw is not None else body.model_dump(exclude_none=True)
    doc = {k: v for k, v in doc.items() if k not in WINNOW_FIELDS}
    report = ReadReport()
    name = "openai_chat" if fmt == "openai" else "anthropic_messages"
    units = list(parse(doc, name, report, session_id="body"))
    if report.problems:
        raise ValueError(report.problems[0])
    return units


_INTERNAL = ("raw", "request", "shell")  # how to write a unit back as its block: not for clients


def _check_unit(d: Any, i: int) -> Unit:
    """A request's unit, every field type checked as the normalized reader checks a line."""
    if not isinstance(d, dict):
        raise ValueError(f"units[{i}] is not an object")
    try:
        return unit_from_record({"id": f"request:{i}", "session_id": "request", **d}, i)
    except BadRecord as e:
        raise ValueError(f"units[{i}]: {e}") from None


def render(units: list[Unit], fmt: Format) -> dict[str, Any]:
    """Units back into the request's format: every field winnow did not change as it was."""
    if fmt == "units":
        return {"units": [u.to_dict() for u in units]}
    from winnow.serving import render as r

    return r.to_openai(units) if fmt == "openai" else r.to_anthropic(units)


def _conversation(body: dict[str, Any], fmt: Format) -> bool:
    """Whether a rendered body holds a user or assistant message (for units: any unit)."""
    if fmt == "units":
        return bool(body["units"])
    return any(
        isinstance(m, dict) and m.get("role") in ("user", "assistant")
        for m in body.get("messages") or ()
    )


def create_app(config: ServiceConfig | None = None) -> FastAPI:
    """The FastAPI app; loads the model once (ValueError when it cannot)."""
    from winnow.serving.classifier import ImportanceClassifier
    from winnow.serving.compressor import OVERFLOW_POLICIES, CompressorConfig, SemanticCompressor

    config = config or ServiceConfig()
    classifier = ImportanceClassifier.load(config.model, threads=config.threads)
    compressors = {
        policy: SemanticCompressor(
            classifier, config=CompressorConfig(on_must_keep_overflow=policy)
        )
        for policy in OVERFLOW_POLICIES
    }
    app = FastAPI(
        title="winnow",
        version=__version__,
        description="Classify the units of a coding-agent conversation by importance and compress it.",
    )
    app.add_middleware(_Guard, config=config)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own answer echoes each bad input: a whole upload, or values JSON cannot hold
        errors = [{k: e[k] for k in ("loc", "msg", "type") if k in e} for e in exc.errors()]
        return JSONResponse({"detail": errors}, 422)

    @app.exception_handler(RecursionError)
    async def too_deep(request: Request, exc: RecursionError) -> JSONResponse:
        # JSON nested deeper than Python's parser recurses (FastAPI would answer 500)
        return _error(422, "request body nested too deeply")

    def authorize(request: Request) -> None:
        if config.token is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {config.token}".encode()):
            raise HTTPException(
                401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"}
            )

    def units_of(body: ConversationIn, raw: Any = None) -> tuple[Format, list[Unit]]:
        try:
            fmt = detect_format(body)
            return fmt, parse_units(body, fmt, raw if isinstance(raw, dict) else None)
        except (ValueError, KeyError, TypeError) as e:
            raise HTTPException(422, str(e)) from None

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/model", dependencies=[Depends(authorize)])
    def model() -> dict[str, Any]:
        """Name, version, labels and sha256 of the loaded model."""
        info = classifier.info
        return {k: info[k] for k in ("name", "version", "labels", "sha256")}

    @app.post("/v1/classify", dependencies=[Depends(authorize)])
    def classify(body: ConversationIn) -> dict[str, Any]:
        """Each unit with its category and a score per category."""
        fmt, units = units_of(body)
        preds = classifier.predict(units) if units else []
        out = []
        for u, p in zip(units, preds, strict=True):
            d = {k: v for k, v in u.to_dict().items() if k not in _INTERNAL}
            d.update(category=p.category, scores={c: float(x) for c, x in p.scores.items()})
            out.append(d)
        return {"format": fmt, "model": classifier.info["name"], "units": out}

    @app.post("/v1/compress", dependencies=[Depends(authorize)])
    async def compress(body: CompressIn, request: Request) -> dict[str, Any]:
        """The conversation compressed under `token_limit` (a count, or a share of its tokens
        as sent: 0.3 or "30%"): `body`, a complete request in the input's format (send it as
        it is), and `winnow`, the figures (`token_limit` resolved to a count)."""
        raw = await request.json()  # the body as sent: its fields in their order

        def work() -> dict[str, Any]:
            fmt, units = units_of(body, raw)
            try:
                result = compressors[body.on_must_keep_overflow].compress(units, body.token_limit)
            except ValueError as e:  # MustKeepOverflow: the request cannot be met as asked
                raise HTTPException(422, str(e)) from None
            out = render(result.units, fmt)
            if not _conversation(out, fmt):  # the API rejects a request without one
                if not _conversation(render(units, fmt), fmt):
                    raise HTTPException(422, "the request has no user or assistant message")
                raise HTTPException(
                    422,
                    f"nothing is left under the token_limit of {body.token_limit:,} tokens "
                    f"(the conversation holds {result.tokens_before:,}), and an empty request "
                    "is no request: raise token_limit",
                )
            return {
                "body": out,
                "winnow": {
                    "format": fmt,
                    "token_limit": result.token_limit,
                    "tokens_before": result.tokens_before,
                    "tokens_after": result.tokens_after,
                },
            }

        return await run_in_threadpool(work)

    return app
