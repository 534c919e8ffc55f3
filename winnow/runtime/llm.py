"""The live conversation and a minimal streaming client for the Anthropic and OpenAI APIs.

    conv = Conversation("anthropic", "claude-sonnet-4-5", messages=[], system="...", tools=[...])
    client = LLMClient("https://api.anthropic.com", api="anthropic", api_key=KEY)
    conv.append({"role": "user", "content": "hi"})
    done = await client.complete(conv)        # always streamed; cancelling the task aborts it
    conv.append(done.message)

`Conversation.encode` puts `messages` last, so a request that only appends messages starts
with the exact bytes of the request before it: that is what keeps a provider's prefix cache
warm for the idle compaction request.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["APIS", "Completion", "Conversation", "LLMClient", "LLMError", "encode"]

APIS = ("anthropic", "openai")


def encode(body: dict[str, Any]) -> bytes:
    """The wire bytes of a request body: compact, UTF-8, key order kept."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


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
    """A finished response: the assistant message to append, its text and real usage."""

    message: dict[str, Any]
    text: str
    usage: dict[str, Any]
    stop_reason: str | None
    request_bytes: int


class LLMError(Exception):
    """A failed call, in one line."""


class LLMClient:
    """Streams a conversation's next answer from an Anthropic or OpenAI compatible endpoint.

    `base_url` is what the official SDK takes: the host root for Anthropic (…/v1/messages is
    appended), the …/v1 root for OpenAI (…/chat/completions is appended).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api: str = "anthropic",
        api_key: str = "",
        timeout: float = 600.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        if api not in APIS:
            raise ValueError(f"api must be one of {APIS}, got {api!r}")
        self.api = api
        root = base_url.rstrip("/")
        self.url = f"{root}/v1/messages" if api == "anthropic" else f"{root}/chat/completions"
        auth = (
            {"x-api-key": api_key, "anthropic-version": "2023-06-01"} if api == "anthropic" else {}
        )
        if api == "openai" and api_key:
            auth = {"authorization": f"Bearer {api_key}"}
        self.headers = {"content-type": "application/json", **auth, **(headers or {})}
        self.timeout = timeout
        self._http: Any = None

    async def complete(
        self,
        conversation: Conversation,
        extra: Sequence[dict[str, Any]] = (),
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        """Send the conversation (plus `extra` messages) and gather the streamed answer."""
        import httpx

        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout)
        data = conversation.encode(extra)
        parser = _AnthropicStream() if self.api == "anthropic" else _OpenAIStream()
        try:
            async with self._http.stream(
                "POST", self.url, content=data, headers=self.headers
            ) as resp:
                if resp.status_code >= 400:
                    raw = (await resp.aread()).decode("utf-8", "replace")
                    raise LLMError(
                        f"HTTP {resp.status_code} from {self.url}: {_error_message(raw)}"
                    )
                async for line in resp.aiter_lines():
                    if line.startswith("data:"):
                        piece = parser.feed(line[5:].strip())
                        if piece and on_text:
                            on_text(piece)
        except httpx.HTTPError as e:
            raise LLMError(f"{type(e).__name__} talking to {self.url}: {e}") from e
        except (ValueError, KeyError) as e:
            raise LLMError(f"malformed stream event from {self.url}: {e}") from e
        return parser.result(len(data))

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _error_message(raw: str) -> str:
    try:
        err = json.loads(raw).get("error")
        return str(err.get("message") if isinstance(err, dict) else err)
    except (ValueError, AttributeError):
        return raw.strip().splitlines()[0][:200] if raw.strip() else "(empty body)"


class _AnthropicStream:
    """Folds Messages API stream events into the final message."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, str] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None

    def feed(self, data: str) -> str | None:
        ev = json.loads(data)
        kind = ev.get("type")
        if kind == "message_start":
            self.usage = dict(ev["message"].get("usage") or {})
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
                self.partial_json[ev["index"]] = (
                    self.partial_json.get(ev["index"], "") + delta["partial_json"]
                )
        elif kind == "content_block_stop":
            raw = self.partial_json.pop(ev["index"], None)
            if raw is not None:
                self.blocks[ev["index"]]["input"] = json.loads(raw) if raw.strip() else {}
        elif kind == "message_delta":
            self.usage.update({k: v for k, v in (ev.get("usage") or {}).items() if v is not None})
            self.stop_reason = (ev.get("delta") or {}).get("stop_reason")
        elif kind == "error":
            raise LLMError(f"stream error: {(ev.get('error') or {}).get('message', data[:200])}")
        return None

    def result(self, request_bytes: int) -> Completion:
        content = [self.blocks[i] for i in sorted(self.blocks)]
        text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
        message = {"role": "assistant", "content": content}
        return Completion(message, text, self.usage, self.stop_reason, request_bytes)


class _OpenAIStream:
    """Folds chat.completion.chunk events into the final message."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None

    def feed(self, data: str) -> str | None:
        if data == "[DONE]":
            return None
        ev = json.loads(data)
        if ev.get("error"):
            raise LLMError(f"stream error: {_error_message(data)}")
        if ev.get("usage"):
            self.usage = ev["usage"]
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
        return piece

    def result(self, request_bytes: int) -> Completion:
        text = "".join(self.text)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return Completion(message, text, self.usage, self.stop_reason, request_bytes)
