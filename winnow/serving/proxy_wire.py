"""The bytes of a proxied request: its body read with where each message sits in the client's
own text, and digests of messages blind to where the client put its cache_control markers.

    parsed = parse_request(raw)                 # parsed.body as json.loads reads it
    a, b = parsed.spans[i]                      # where message i sits in parsed.text
    text_digest(parsed.text[a:b])               # its digest, from the client's own bytes
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MARKER",
    "Parsed",
    "Scanner",
    "dumps",
    "hash_text",
    "message_digest",
    "parse_request",
    "skip_space",
    "text_digest",
    "text_key",
]

# A cache_control marker with its comma, however the client spaced it: JSON strings hold no
# bare quote, so this matches keys only; every branch starts with a literal (linear).
MARKER = re.compile(
    r',\s*"cache_control"\s*:\s*\{[^{}]*\}|"cache_control"\s*:\s*\{[^{}]*\}\s*,?\s*'
)


# ASCII output: the encoder's fast path (about 10x faster on non-ASCII text), and any string
# encodes, lone surrogates included. Used for digests and for the bytes sent upstream alike.
dumps = json.JSONEncoder(separators=(",", ":")).encode


def message_digest(message: Any) -> bytes:
    """A digest of a message's content, blind to where the client put cache_control markers."""
    return text_digest(dumps(message))


def text_digest(text: str) -> bytes:
    """A digest of a message's JSON text, its cache_control markers left out."""
    if '"cache_control"' in text:
        text = MARKER.sub("", text)
    return hash_text(text)


def hash_text(text: str, size: int = 16) -> bytes:
    """A `size`-byte digest of a text (lone surrogates included)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=size).digest()


def text_key(text: str) -> int:
    """An in-process key of a long text: Python's own string hash (SipHash, keyed per process,
    so no client can aim at a collision), with no encoding: about 3x faster than a digest of
    the UTF-8 bytes on the ~1 MB texts a 200K-token request holds (scripts/bench_proxy.py)."""
    return hash((len(text), text))


_WS = re.compile(r"[ \t\n\r]*")
_decoder = json.JSONDecoder()


def skip_space(text: str, i: int) -> int:
    """The position of the first non-whitespace character at or after `i`."""
    m = _WS.match(text, i)
    return m.end() if m else i


@dataclass
class Parsed:
    """A request body and where each of its messages sits in the client's own text."""

    body: Any
    text: str = ""
    spans: list[Any] | None = None  # (start, end) of each message in `text`
    array: tuple[int, int] = (0, 0)  # of the messages list, brackets included


class Scanner:
    """The standard decoder stepped value by value through a top-level object, so that the
    messages list can be entered (its items' spans kept) or skipped over by a known prefix."""

    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0

    def peek(self) -> str:
        self.i = skip_space(self.text, self.i)
        return self.text[self.i]

    def take(self, ch: str) -> None:
        if self.peek() != ch:
            raise ValueError(f"expected {ch!r} at {self.i}")
        self.i += 1

    def value(self) -> Any:
        self.peek()
        value, self.i = _decoder.raw_decode(self.text, self.i)
        return value

    def key(self) -> str:
        if self.peek() != '"':
            raise ValueError(f"expected a key at {self.i}")
        key = self.value()
        self.take(":")
        return key

    def more(self, close: str) -> bool:
        """After an item: True when another follows (its comma taken), False at `close`."""
        if self.peek() == ",":
            self.i += 1
            return True
        self.take(close)
        return False

    def items(self) -> tuple[list[Any], list[tuple[int, int]]]:
        """The items of a list whose `[` is taken, and their spans; ends after its `]`."""
        values: list[Any] = []
        spans: list[tuple[int, int]] = []
        if self.peek() == "]":
            self.i += 1
            return values, spans
        while True:
            self.peek()
            start = self.i
            values.append(self.value())
            spans.append((start, self.i))
            if not self.more("]"):
                return values, spans

    def end(self) -> None:
        if skip_space(self.text, self.i) != len(self.text):
            raise ValueError("extra data")


def parse_request(raw: bytes, text: str | None = None) -> Parsed:
    """The body as `json.loads` reads it, and the span of each message in the text: their
    digests come from the client's own bytes (no re-serialization), and the bytes sent upstream
    are the client's but for the compressed prefix."""
    try:
        return _scan(raw.decode("utf-8") if text is None else text)
    except (ValueError, IndexError):
        return Parsed(json.loads(raw))  # the standard reader's answer (or its error)


def _scan(text: str) -> Parsed:
    s = Scanner(text)
    if s.peek() != "{":
        return Parsed(json.loads(text))
    s.i += 1
    body: dict[str, Any] = {}
    out = Parsed(body, text)
    if s.peek() == "}":
        s.i += 1
    else:
        while True:
            key = s.key()
            if key == "messages" and s.peek() == "[":
                begin = s.i
                s.i += 1
                body[key], out.spans = s.items()
                out.array = (begin, s.i)
            else:
                body[key] = s.value()
                if key == "messages":
                    out.spans = None
            if not s.more("}"):
                break
    s.end()
    return out
