"""What the providers charge for the blocks winnow cannot read: images, documents, audio, files.

A reader keeps such a block whole (C1) and records its cost in `unit.extra["media_tokens"]`,
which `winnow.serving.tokens.unit_tokens` adds. Figures from the providers' documentation,
checked 2026-12-01:

- Anthropic images (Vision guide): about width * height / 750 tokens. An image whose long edge
  is over 1,568 px (or over ~1,600 tokens) is first scaled down, so one image costs at most
  ~1,600 tokens; Claude Opus 4.7 and the models after it read up to 2,576 px on the long edge,
  at most ~4,784 tokens. Size unknown (a URL, a file id): that maximum.
- Anthropic PDFs (PDF support guide): each page costs its text, 1,500-3,000 tokens by density,
  plus the page seen as an image; we count 3,000 a page. Page count unknown: one page.
- OpenAI images (Images and vision guide, GPT-4o family): `detail: low` 85 tokens; otherwise
  the image is fit in 2048 x 2048, its short side scaled to 768, and each 512-px tile costs
  170 plus 85 for the whole. Size unknown: the most tiles that scaling allows (8, 1,445 tokens).
- OpenAI audio: no per-second cost is documented; we count 10 tokens a second (one per 100 ms,
  the rate reported for gpt-4o audio input), the duration from a WAV header, else from the size
  at 128 kbit/s.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from typing import Any

ANTHROPIC_MAX_EDGE, ANTHROPIC_MAX_IMAGE = 1568, 1600
HIGH_RES_MAX_EDGE, HIGH_RES_MAX_IMAGE = 2576, 4784
PDF_PAGE_TOKENS = 3000
OPENAI_LOW, OPENAI_TILE, OPENAI_MAX_IMAGE = 85, 170, 85 + 8 * 170
AUDIO_TOKENS_PER_SECOND = 10
UNKNOWN_CHARS_PER_TOKEN = 4  # a block of a type winnow does not know: its JSON, ~4 chars a token

# Claude Opus 4.7 and later, and every model of generation 5 or later, read larger images.
_HIGH_RES = re.compile(r"opus-4-[7-9]|(opus|sonnet|haiku|fable|mythos)-([5-9]|\d\d)|claude-([5-9])")
_HEAD_CHARS = 256 * 1024  # base64 chars decoded to find an image's size (its header)


def is_high_res(model: str | None) -> bool:
    return bool(model) and bool(_HIGH_RES.search(str(model).lower().replace(".", "-")))


def anthropic_image_tokens(width: int | None, height: int | None, model: str | None) -> int:
    """Tokens of one image on Claude (see the module docstring)."""
    edge, cap = (
        (HIGH_RES_MAX_EDGE, HIGH_RES_MAX_IMAGE)
        if is_high_res(model)
        else (ANTHROPIC_MAX_EDGE, ANTHROPIC_MAX_IMAGE)
    )
    if not width or not height:
        return cap
    scale = min(1.0, edge / max(width, height))
    return min(cap, math.ceil(width * scale * height * scale / 750))


def openai_image_tokens(width: int | None, height: int | None, detail: Any = "auto") -> int:
    """Tokens of one image on the GPT-4o family (see the module docstring)."""
    if detail == "low":
        return OPENAI_LOW
    if not width or not height:
        return OPENAI_MAX_IMAGE
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    return OPENAI_LOW + OPENAI_TILE * math.ceil(w / 512) * math.ceil(h / 512)


def image_size(data: Any) -> tuple[int, int] | None:
    """(width, height) of a base64 PNG, GIF, WebP or JPEG (or a data: URL of one); None when
    the header cannot be read."""
    if not isinstance(data, str):
        return None
    if data.startswith("data:"):
        data = data.partition(",")[2]
    head = _b64_prefix(data, _HEAD_CHARS)
    if head is None:
        return None
    try:
        return _size(head)
    except (struct.error, IndexError, ValueError):
        return None


def pdf_pages(data: Any) -> int | None:
    """Pages of a base64 PDF (or a data: URL of one): its `/Type /Page` objects."""
    if not isinstance(data, str):
        return None
    if data.startswith("data:"):
        data = data.partition(",")[2]
    raw = _b64_prefix(data, len(data))
    if raw is None or not raw.startswith(b"%PDF"):
        return None
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", raw)) or None


def audio_seconds(data: Any, fmt: Any) -> float | None:
    """Duration of base64 audio: from a WAV header, else from the size at 128 kbit/s."""
    if not isinstance(data, str):
        return None
    head = _b64_prefix(data, 4096)
    if head is None:
        return None
    size = len(data) * 3 // 4
    if fmt == "wav" and head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        pos = 12
        while pos + 8 <= len(head):
            chunk, length = head[pos : pos + 4], struct.unpack("<I", head[pos + 4 : pos + 8])[0]
            if chunk == b"fmt " and pos + 20 <= len(head):
                byte_rate = struct.unpack("<I", head[pos + 16 : pos + 20])[0]
                return size / byte_rate if byte_rate else None
            pos += 8 + length + (length & 1)
    return size / (128_000 / 8)


def unknown_block_tokens(block: Any) -> int:
    import json

    try:
        return math.ceil(len(json.dumps(block, ensure_ascii=False)) / UNKNOWN_CHARS_PER_TOKEN)
    except (TypeError, ValueError, RecursionError):
        return 0


def _b64_prefix(data: str, chars: int) -> bytes | None:
    chunk = data[: chars - chars % 4].strip()
    try:
        return base64.b64decode(chunk + "=" * (-len(chunk) % 4), validate=False)
    except (binascii.Error, ValueError):
        return None


def _size(b: bytes) -> tuple[int, int] | None:
    if b[:8] == b"\x89PNG\r\n\x1a\n":
        return struct.unpack(">II", b[16:24])
    if b[:6] in (b"GIF87a", b"GIF89a"):
        return struct.unpack("<HH", b[6:10])
    if b[:4] == b"RIFF" and b[8:12] == b"WEBP":
        kind = b[12:16]
        if kind == b"VP8 ":
            w, h = struct.unpack("<HH", b[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if kind == b"VP8L":
            bits = struct.unpack("<I", b[21:25])[0]
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if kind == b"VP8X":
            return (
                int.from_bytes(b[24:27], "little") + 1,
                int.from_bytes(b[27:30], "little") + 1,
            )
        return None
    if b[:2] == b"\xff\xd8":  # JPEG: walk the markers to the frame header
        pos = 2
        while pos + 9 < len(b):
            if b[pos] != 0xFF:
                return None
            marker = b[pos + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                pos += 2
                continue
            length = struct.unpack(">H", b[pos + 2 : pos + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack(">HH", b[pos + 5 : pos + 9])
                return w, h
            pos += 2 + length
    return None


__all__ = [
    "anthropic_image_tokens",
    "audio_seconds",
    "image_size",
    "is_high_res",
    "openai_image_tokens",
    "pdf_pages",
    "unknown_block_tokens",
]
