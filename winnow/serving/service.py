"""The HTTP service: classify and compress conversations over a small FastAPI app.

    winnow serve --port 8000            # docs at http://127.0.0.1:8000/docs

Requests carry normalized units (`{"units": [...]}`), an OpenAI chat body (`{"messages": [...]}`)
or an Anthropic Messages body (`{"system": ..., "messages": [...]}`), read in memory. /v1/compress
answers `{"body": ..., "winnow": {...}}`: `body` is the compressed request in the input's format,
complete (every field and block winnow did not change is as it was, so it can be sent to the
provider as it is), and `winnow` holds winnow's figures. Bad input is a 4xx with a one-line
`detail`, never a 500.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from winnow import __version__
from winnow.data.readers import ReadReport, parse
from winnow.data.readers.anthropic_messages import is_anthropic
from winnow.data.schema import KINDS, ROLES, Unit

Format = Literal["units", "openai", "anthropic"]


@dataclass
class ServiceConfig:
    """How the service runs."""

    model: str | None = None  # model directory; None = the shipped default
    token: str | None = None  # when set, /v1/* require `Authorization: Bearer <token>`
    max_bytes: int = 8 * 1024 * 1024  # larger request bodies get 413
    threads: int = 1  # onnxruntime intra-op threads per request


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
    token_limit: int = Field(..., gt=0, description="the compressed conversation's token budget")
    on_must_keep_overflow: Literal["error", "summarize_largest", "truncate_oldest"] = Field(
        "error",
        description="when must-keep units alone exceed the limit: 422, summarize the largest "
        "of them first, or drop the oldest",
    )


class _BodyLimit:
    """ASGI middleware answering 413 to a body over `max_bytes`, declared or streamed.

    The body is read here, up to the limit, and replayed to the app: an error raised from the
    app's own read would be turned into a 400 by FastAPI's body parsing.
    """

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_big = JSONResponse({"detail": f"request body over {self.max_bytes} bytes"}, 413)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await too_big(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await too_big(scope, receive, send)
            more = message.get("more_body", False)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)


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
    if not isinstance(d, dict):
        raise ValueError(f"units[{i}] is not an object")
    for key, allowed in (("role", ROLES), ("kind", KINDS)):
        if d.get(key) not in allowed:
            raise ValueError(f"units[{i}].{key} must be one of {', '.join(allowed)}")
    if not isinstance(d.get("text"), str):
        raise ValueError(f"units[{i}].text must be a string")
    d = {"id": f"request:{i}", "session_id": "request", "index": i, **d}
    return Unit.from_dict(d)


def render(units: list[Unit], fmt: Format) -> dict[str, Any]:
    """Units back into the request's format: every field winnow did not change as it was."""
    if fmt == "units":
        return {"units": [u.to_dict() for u in units]}
    from winnow.serving import render as r

    return r.to_openai(units) if fmt == "openai" else r.to_anthropic(units)


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
    app.add_middleware(_BodyLimit, max_bytes=config.max_bytes)

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
        """The conversation compressed under `token_limit`: `body`, a complete request in the
        input's format (send it as it is), and `winnow`, the figures."""
        raw = await request.json()  # the body as sent: its fields in their order

        def work() -> dict[str, Any]:
            fmt, units = units_of(body, raw)
            try:
                result = compressors[body.on_must_keep_overflow].compress(units, body.token_limit)
            except ValueError as e:  # MustKeepOverflow: the request cannot be met as asked
                raise HTTPException(422, str(e)) from None
            return {
                "body": render(result.units, fmt),
                "winnow": {
                    "format": fmt,
                    "token_limit": body.token_limit,
                    "tokens_before": result.tokens_before,
                    "tokens_after": result.tokens_after,
                },
            }

        return await run_in_threadpool(work)

    return app
