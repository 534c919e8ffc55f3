"""The live conversation, and one streamed turn of it through an official SDK client.

    client = anthropic.AsyncAnthropic()            # or openai.AsyncOpenAI(base_url=...)
    conv = Conversation("anthropic", "claude-sonnet-4-5", messages=[], system="...", tools=[...])
    conv.append({"role": "user", "content": "hi"})
    done = await complete(client, conv)            # streamed; cancelling the task aborts it
    conv.append(done.message)

`Conversation.encode` puts `messages` last, so a request that only appends messages starts
with the exact bytes of the request before it: that is what keeps a provider's prefix cache
(and any byte-keyed cache in between) warm for the idle compaction request. The SDK's own
`messages.create(...)` / `chat.completions.create(...)` would serialize the body in its own
field order (`messages` before `system` and `tools`), so the body goes to the SDK already
encoded, through its generic `post(..., content=...)`: the SDK still does the transport,
authentication, retries, timeouts, SSE parsing, typed events and errors.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "APIS",
    "Completion",
    "Conversation",
    "LLMError",
    "client_api",
    "complete",
    "encode",
    "relaying_client",
    "stream_fold",
]

APIS = ("anthropic", "openai")
_PATHS = {"anthropic": "/v1/messages", "openai": "/chat/completions"}


_SURROGATE = re.compile("[\ud800-\udfff]")


def encode(body: dict[str, Any]) -> bytes:
    """The wire bytes of a request body: compact, UTF-8, key order kept.

    A lone surrogate (text cut in the middle of a pair) has no UTF-8 form: it goes as its
    JSON escape, which decodes to the same string."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    if _SURROGATE.search(text):
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text.encode()


@dataclass
class Conversation:
    """Everything a turn sends, in the provider's own message format.

    `version` changes with every mutation: a compaction computed on a snapshot applies only
    if the conversation is still at the version it read.
    """

    api: str
    model: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    system: Any = None
    tools: list[dict[str, Any]] | None = None
    params: dict[str, Any] = field(default_factory=lambda: {"max_tokens": 4096})
    version: int = 0

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ValueError(f"api must be one of {APIS}, got {self.api!r}")

    def body(self, extra: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        """The streamed request body, with `extra` messages appended; `messages` is the last key."""
        body: dict[str, Any] = {"model": self.model, **self.params, "stream": True}
        messages = [*self.messages, *extra]
        if self.api == "anthropic":
            if self.system is not None:
                body["system"] = self.system
        else:
            body["stream_options"] = {"include_usage": True}
            if self.system is not None:
                messages = [{"role": "system", "content": self.system}, *messages]
        if self.tools:
            body["tools"] = self.tools
        body["messages"] = messages
        return body

    def encode(self, extra: Sequence[dict[str, Any]] = ()) -> bytes:
        return encode(self.body(extra))

    @property
    def max_output_tokens(self) -> int | None:
        """The answer's token limit the request sets, less a thinking budget; None if unset."""
        p = self.params
        limit = p.get("max_tokens") or p.get("max_completion_tokens")
        if not isinstance(limit, int) or isinstance(limit, bool):
            return None
        thinking = p.get("thinking")
        if isinstance(thinking, dict) and isinstance(thinking.get("budget_tokens"), int):
            limit -= thinking["budget_tokens"]  # Anthropic counts thinking inside max_tokens
        return max(0, limit)

    def append(self, *messages: dict[str, Any]) -> None:
        self.messages.extend(messages)
        self.version += 1

    def replace(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages
        self.version += 1

    def snapshot(self) -> Conversation:
        """A deep copy that later turns cannot change."""
        return copy.deepcopy(self)


@dataclass
class Completion:
    """A streamed response: the assistant message to append, its text and real usage.

    `ended` says the stream reached its proper end: Anthropic's `message_stop`; OpenAI's
    finish reason (the SDK swallows `[DONE]`, and only the usage chunk may follow the finish
    reason). A stream that closed early still yields a Completion, with `ended` False: only
    the caller knows whether a partial answer is of any use.
    """

    message: dict[str, Any]
    text: str
    usage: dict[str, Any]
    stop_reason: str | None
    request_bytes: int
    ended: bool = True


class LLMError(Exception):
    """A failed call, in one line."""


def client_api(client: Any) -> str:
    """ "anthropic" or "openai" for an official async SDK client; TypeError for anything else."""
    for api, cls in (("anthropic", "AsyncAnthropic"), ("openai", "AsyncOpenAI")):
        try:
            module = __import__(api)
        except ImportError:
            continue
        if isinstance(client, getattr(module, cls)):
            return api
    raise TypeError(
        f"expected an anthropic.AsyncAnthropic or openai.AsyncOpenAI client, "
        f"got {type(client).__name__}"
    )


def relaying_client(api: str, base_url: str, headers: Mapping[str, str], **options: Any) -> Any:
    """The official async SDK client of `api` that sends a relayed request's `headers` (its
    credentials, version, betas) and no credentials of its own (a proxy's idle compaction
    speaks for its client). `options` go to the SDK (timeout, max_retries, ...)."""
    sdk: Any = importlib.import_module(api)  # anthropic or openai
    base = sdk.AsyncAnthropic if api == "anthropic" else sdk.AsyncOpenAI

    class Relaying(base):  # type: ignore[misc, valid-type]
        def _validate_headers(self, *args: Any, **kwargs: Any) -> None:
            return None  # the relayed headers authenticate, or the upstream says they do not

    # an explicit key, so that the SDK never reads the proxy's own from the environment; it is
    # left out below unless the relayed headers carry one under the same name
    client = Relaying(base_url=base_url, api_key="relayed", **options)
    spelling = {k.lower(): k for k in client.default_headers}  # the SDK merges by exact name
    relayed: dict[str, Any] = {spelling.get(k.lower(), k): v for k, v in headers.items()}
    given = {k.lower() for k in relayed}
    for name in ("X-Api-Key", "Authorization"):
        if name.lower() not in given:
            relayed[spelling.get(name.lower(), name)] = sdk.Omit()
    return client.with_options(default_headers=relayed)


async def complete(
    client: Any,
    conversation: Conversation,
    extra: Sequence[dict[str, Any]] = (),
    on_text: Callable[[str], None] | None = None,
) -> Completion:
    """Send the conversation (plus `extra` messages) and gather the streamed answer.

    The request body is exactly `conversation.encode(extra)`. Any failure (HTTP error,
    timeout, reset, malformed event) is one `LLMError`; cancelling the calling task closes
    the connection at once.
    """
    api = client_api(client)
    if api != conversation.api:
        raise ValueError(f"a {api} client cannot send a {conversation.api} conversation")
    data = conversation.encode(extra)
    folder = stream_fold(api)
    try:
        stream = await _post(client, api, data)
        async with stream:
            async for event in stream:
                piece = folder.feed(event.model_dump(mode="json", exclude_none=True))
                if piece and on_text:
                    on_text(piece)
    except Exception as e:  # noqa: BLE001 - SDK, transport and decoding errors alike: one line
        raise LLMError(_describe(e)) from e
    return folder.result(len(data))


async def _post(client: Any, api: str, data: bytes) -> Any:
    if api == "anthropic":
        import anthropic
        from anthropic.types import RawMessageStreamEvent

        stream_cls: Any = anthropic.AsyncStream[RawMessageStreamEvent]
    else:
        import openai
        from openai.types.chat import ChatCompletionChunk

        stream_cls = openai.AsyncStream[ChatCompletionChunk]
    # SDKs before `content=` took the raw bytes as `body` (deprecated since)
    key = "content" if "content" in inspect.signature(client.post).parameters else "body"
    return await client.post(
        _PATHS[api],
        cast_to=object,
        stream=True,
        stream_cls=stream_cls,
        options={"headers": {"Content-Type": "application/json"}},
        **{key: data},
    )


def _describe(e: Exception) -> str:
    """One line for an SDK or transport error."""
    status = getattr(e, "status_code", None)
    body = getattr(e, "body", None)
    message = None
    if isinstance(body, dict):
        err = body.get("error", body)
        message = err.get("message") if isinstance(err, dict) else err
    message = str(message or getattr(e, "message", None) or e)
    if not message:  # transport errors often carry no text
        message = "timed out" if "Timeout" in type(e).__name__ else "connection lost"
    message = " ".join(message.split())[:300]
    where = getattr(getattr(e, "request", None), "url", None)
    where = f" from {where}" if where else ""
    if status is not None:
        return f"HTTP {status}{where}: {message}"
    return f"{type(e).__name__}{where}: {message}"


def stream_fold(api: str) -> AnthropicFold | OpenAIFold:
    """The fold of `api`'s response events into its final message (shared with the proxy's tap)."""
    return AnthropicFold() if api == "anthropic" else OpenAIFold()


class AnthropicFold:
    """Folds Messages API stream events (as dicts) into the final message."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, str] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.ended = False

    def feed(self, ev: dict[str, Any]) -> str | None:
        """Fold one event; the text it adds, if any."""
        kind = ev.get("type")
        if kind == "message_start":
            self.usage = dict((ev.get("message") or {}).get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[ev["index"]] = dict(ev["content_block"])
        elif kind == "content_block_delta":
            block, delta = self.blocks[ev["index"]], ev["delta"]
            dt = delta.get("type")
            if dt == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
                return delta["text"]
            if dt == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif dt == "signature_delta":
                block["signature"] = delta["signature"]
            elif dt == "input_json_delta":
                i = ev["index"]
                self.partial_json[i] = self.partial_json.get(i, "") + delta["partial_json"]
        elif kind == "content_block_stop":
            raw = self.partial_json.pop(ev["index"], None)
            if raw is not None:
                self.blocks[ev["index"]]["input"] = json.loads(raw) if raw.strip() else {}
        elif kind == "message_delta":
            self.usage.update({k: v for k, v in (ev.get("usage") or {}).items() if v is not None})
            self.stop_reason = (ev.get("delta") or {}).get("stop_reason") or self.stop_reason
        elif kind == "message_stop":
            self.ended = True
        return None

    def load(self, body: dict[str, Any]) -> None:
        """A whole (not streamed) response body."""
        self.usage = body.get("usage") or {}
        self.stop_reason = body.get("stop_reason")
        self.blocks = dict(enumerate(body.get("content") or []))
        self.ended = True

    @property
    def message(self) -> dict[str, Any]:
        return {"role": "assistant", "content": [self.blocks[i] for i in sorted(self.blocks)]}

    def result(self, request_bytes: int) -> Completion:
        message = self.message
        text = "".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")
        return Completion(message, text, self.usage, self.stop_reason, request_bytes, self.ended)


class OpenAIFold:
    """Folds chat.completion.chunk events (as dicts) into the final message."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.ended = False

    def feed(self, ev: dict[str, Any]) -> str | None:
        """Fold one chunk; the text it adds, if any."""
        piece = None
        for choice in ev.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                piece = delta["content"]
                self.text.append(piece)
            for call in delta.get("tool_calls") or ():
                slot = self.calls.setdefault(
                    call.get("index", 0),
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                slot["id"] = call.get("id") or slot["id"]
                fn = call.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            self.stop_reason = choice.get("finish_reason") or self.stop_reason
        if ev.get("usage"):
            self.usage = ev["usage"]
        self.ended = self.stop_reason is not None
        return piece

    def load(self, body: dict[str, Any]) -> None:
        """A whole (not streamed) response body."""
        self.usage = body.get("usage") or {}
        choice = (body.get("choices") or [{}])[0]
        self.stop_reason = choice.get("finish_reason")
        msg = choice.get("message") or {}
        self.text = [msg.get("content") or ""]
        self.calls = dict(enumerate(msg.get("tool_calls") or []))
        self.ended = True

    @property
    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message

    def result(self, request_bytes: int) -> Completion:
        text = "".join(self.text)
        return Completion(
            self.message, text, self.usage, self.stop_reason, request_bytes, self.ended
        )
