"""OpenAI chat-completions messages.

A file holds a request (`{"model", "messages": [...]}`), a list of messages, JSON Lines of
requests (one session a line; batch-API lines `{"custom_id", "body": {...}}` too) or JSON
Lines of messages (one session). Roles system/developer/user/assistant/tool (and the legacy
`function`); an assistant's `tool_calls[{id, function{name, arguments}}]` become tool calls,
answered by `tool` messages through `tool_call_id`.

`conversations()` (the file shapes) is shared with the Anthropic Messages reader.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from winnow.data.readers import media
from winnow.data.readers.base import (
    BadRecord,
    ReadReport,
    SessionBuilder,
    guarded,
    head_objects,
    iter_json_lines,
    load_json,
    read_head,
    string,
    to_text,
)
from winnow.data.schema import Unit

NAME = "openai_chat"
_ROLE = re.compile(r'"role"\s*:\s*"(system|developer|user|assistant|tool|function)"')
_CONTENT = re.compile(r'"(content|tool_calls)"\s*:')
_TEXT_PARTS = {"text", "input_text", "output_text"}
_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def request_of(record: dict) -> dict | None:
    """The request inside a record: itself, a batch line's `body` or `params`, a log's `request`."""
    for r in (record, record.get("body"), record.get("params"), record.get("request")):
        if isinstance(r, dict) and isinstance(r.get("messages"), list):
            return r
    return None


def session_name(record: dict, default: str) -> str:
    for key in ("custom_id", "session_id", "conversation_id", "id"):
        if isinstance(record.get(key), str) and record[key]:
            return record[key]
    return default


Conversation = tuple[str, dict, list, int | None]  # (session id, request, messages, line)


def conversations(path: Path, report: ReadReport) -> Iterator[Conversation]:
    """Each conversation in a file of any shape.

    A log of successive requests of one conversation repeats every earlier message in each
    request: a request that starts with all of the previous one's messages continues its
    conversation, so only the longest is read (once, under the first request's name).
    """
    last: Conversation | None = None
    for conv in _requests(Path(path), report):
        if (
            last is not None
            and 0 < len(last[2]) <= len(conv[2])
            and conv[2][: len(last[2])] == last[2]
        ):
            report.skip("request repeating an earlier request's messages")
            last = (last[0], conv[1], conv[2], conv[3])
            continue
        if last is not None:
            yield last
        last = conv
    if last is not None:
        yield last


def _requests(path: Path, report: ReadReport) -> Iterator[Conversation]:
    head = read_head(path).lstrip()
    first_line = head.split("\n", 1)[0].strip()
    if head.startswith("[") or first_line == "{":
        data = load_json(path, report)
        records = data if isinstance(data, list) else [data] if data is not None else []
        if records and all(isinstance(r, dict) and "role" in r for r in records):
            yield path.stem, {}, records, None  # a bare list of messages
            return
        for n, r in enumerate(records):
            request = request_of(r) if isinstance(r, dict) else None
            if request is None:
                report.problem(path, None, f"item {n} is not a request with `messages`, skipped")
                continue
            name = path.stem if len(records) == 1 else f"{path.stem}-{n}"
            yield session_name(r, name), request, request["messages"], None
        return
    messages: list = []
    seen: set[str] = set()
    for lineno, r in enumerate_records(path, report):
        request = request_of(r)
        if request is not None:
            sid = session_name(r, f"{path.stem}-{lineno}")
            sid = sid if sid not in seen else f"{sid}-{lineno}"
            seen.add(sid)
            yield sid, request, request["messages"], lineno
        elif "role" in r:
            messages.append(r)
        else:
            report.skip("json line without messages")
    if messages:
        yield path.stem, {}, messages, None


def enumerate_records(path: Path, report: ReadReport) -> Iterator[tuple[int, dict]]:
    for lineno, obj in iter_json_lines(path, report):
        if isinstance(obj, dict):
            yield lineno, obj
        else:
            report.problem(
                path, lineno, f"expected an object, got {type(obj).__name__}, line skipped"
            )


def arguments_json(arguments: Any) -> str:
    """Tool arguments as compact JSON; a string that is not JSON is kept as it is."""
    if isinstance(arguments, str):
        try:
            return to_text(json.loads(arguments))
        except (ValueError, RecursionError):
            return arguments
    return to_text(arguments if arguments is not None else {})


class _Calls:
    """The tool calls of one conversation, for naming and linking their results."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # call id -> tool name
        self.legacy: list[str] = []  # legacy `function_call`s awaiting a `function` reply


class OpenAIChatReader:
    """Reads OpenAI chat-completions requests and message lists."""

    name = NAME

    def sniff(self, head: str) -> bool:
        if head.lstrip()[:1] not in ("{", "["):
            return False
        for obj in head_objects(head, limit=3):  # a complete first record: look at it
            return request_of(obj) is not None or (
                obj.get("role") in _ROLES and ("content" in obj or "tool_calls" in obj)
            )
        return bool(_ROLE.search(head) and _CONTENT.search(head))

    def read(self, path: Path, report: ReadReport) -> Iterator[Unit]:
        for session_id, request, messages, line in conversations(path, report):
            yield from parse_request(
                request, SessionBuilder(session_id), report, path, line, messages
            )


def parse_request(
    request: dict,
    s: SessionBuilder,
    report: ReadReport,
    path: str | Path = "request",
    line: int | None = None,
    messages: list | None = None,
) -> Iterator[Unit]:
    """The units of one request held in memory (or of a bare message list, with `request`
    empty); problems go to `report` as `path:line` lines.

    Each content part, tool call and assistant field becomes one unit that keeps it as
    `extra["raw"]` (contract C1), with where it sits (`msg`, `block`: the unit's position in
    its message; `field` when it is not `content`) and the message's other fields in order
    (`shell`; a `developer` message is a system unit whose shell says `developer`;
    `unit_fields` names the shell's fields the units stand for, nulled there). The request's
    other fields are shared by every unit as `extra["request"]`.
    """
    messages = request.get("messages") if messages is None else messages
    if not isinstance(messages, list):
        report.problem(path, line, "`messages` is not a list, request skipped")
        return
    shared: dict[str, Any] = {"format": NAME}
    if request:
        shared["request"] = {k: (None if k == "messages" else v) for k, v in request.items()}
    model = request.get("model") if isinstance(request.get("model"), str) else None
    calls = _Calls()
    for n, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in _ROLES:
            report.problem(path, line, f"message {n} has no known role ({role!r}), skipped")
            continue
        yield from guarded(report, path, line, s, _later(_message, s, n, m, calls, shared, model))


def _later(make: Any, *args: Any) -> Iterator[Unit]:
    """Build the units when iterated, so that `guarded` catches what building raises."""
    yield from make(*args)


def _message(
    s: SessionBuilder, n: int, m: dict, calls: _Calls, shared: dict, model: str | None
) -> list[Unit]:
    role = m["role"]
    where: dict[str, Any] = {**shared, "msg": n}
    shell: dict[str, Any] | None = None
    stood_for: list[str] = []
    if list(m) != ["role", "content"] or role not in ("system", "user", "assistant"):
        shell = where["shell"] = {}  # filled below, once the fields units stand for are known
        where["unit_fields"] = stood_for  # ...and named: a null the message sent stays null
    units: list[Unit] = []
    fields: set[str] = set()

    def unit(r: str, kind: str, text: str, raw: Any, field: str = "content", **kw: Any) -> None:
        extra = {**where, "raw": raw, "block": len(units)}
        if field != "content":
            extra["field"] = field
        media_tokens = kw.pop("media_tokens", 0)
        if media_tokens:
            extra["media_tokens"] = media_tokens
        fields.add(field)
        units.append(s.unit(r, kind, text, extra=extra, **kw))

    content = m.get("content")
    if role in ("system", "developer", "user"):
        _content(
            unit, "user" if role == "user" else "system", content, model, present="content" in m
        )
    elif role == "assistant":
        # not OpenAI's, but OpenAI-compatible servers (DeepSeek, vLLM, OpenRouter) send it
        for key in ("reasoning_content", "reasoning"):
            value = m.get(key)
            if isinstance(value, str) and value:
                unit("assistant", "thinking", value, value, key)
        _content(unit, "assistant", content, model, empty_ok=True)
        if isinstance(m.get("refusal"), str) and m["refusal"]:
            unit("assistant", "text", m["refusal"], m["refusal"], "refusal")
        if isinstance(m.get("audio"), dict):
            unit("assistant", "text", "[audio]", m["audio"], "audio")
        tool_calls = m.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            raise BadRecord(
                f"message {n} `tool_calls` is {type(tool_calls).__name__}, expected list"
            )
        for c in tool_calls or ():
            name, args = _call(c, n)
            call_id = string(c.get("id"), f"{s.session_id}:call:{s.index}")
            calls.names[call_id] = name
            unit("assistant", "tool_call", args, c, "tool_calls", tool_name=name, call_id=call_id)
        fc = m.get("function_call")
        if isinstance(fc, dict):
            name, args = _call({"function": fc}, n)
            call_id = f"{s.session_id}:call:{s.index}"
            calls.names[call_id] = name
            calls.legacy.append(call_id)
            unit(
                "assistant", "tool_call", args, fc, "function_call", tool_name=name, call_id=call_id
            )
        if not units:  # an empty assistant message stays, as it was
            unit("assistant", "text", "", content, "content" if "content" in m else "empty")
    else:
        answers = m.get("tool_call_id") if role == "tool" else next(iter(calls.legacy), None)
        if role != "tool" and calls.legacy:
            calls.legacy.pop(0)
        if not isinstance(answers, str):
            raise BadRecord(f"message {n} (`{role}`) answers no tool call")
        texts, tokens = _texts(content, model)
        unit(
            "tool",
            "tool_result",
            "\n".join(texts),
            content,
            tool_name=calls.names.get(answers) or string(m.get("name")),
            call_id=answers,
            media_tokens=tokens,
        )
    if shell is not None:
        shell.update((k, None if k in fields else v) for k, v in m.items())
        stood_for.extend(k for k in m if k in fields)
    return units


def _call(c: Any, n: int) -> tuple[str, str]:
    """(name, arguments as compact JSON) of a tool call: a function or a custom tool."""
    if isinstance(c, dict) and isinstance(c.get("custom"), dict):
        return string(c["custom"].get("name"), "custom"), to_text(c["custom"].get("input"))
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict):
        raise BadRecord(f"message {n} has a tool call without `function`")
    return string(fn.get("name"), "function"), arguments_json(fn.get("arguments"))


def _content(
    unit: Any,
    role: str,
    content: Any,
    model: str | None,
    empty_ok: bool = False,
    present: bool = True,
) -> None:
    """Units of a message's `content`: one a part, one for a string; an empty content makes
    an empty unit (which keeps the message) unless the message has other units (`empty_ok`);
    its field is `empty` when the message has no `content` at all (`present`)."""
    if isinstance(content, list) and content:
        for part in content:
            text, tokens = _part(part, model)
            unit(role, "text", text, part, media_tokens=tokens)
    elif isinstance(content, str) and (content or not empty_ok):
        unit(role, "text", content, content)
    elif content is None or isinstance(content, (str, list)):
        if not empty_ok:
            unit(role, "text", "", content, "content" if present else "empty")
    else:
        unit(role, "text", to_text(content), content)


def _part(part: Any, model: str | None) -> tuple[str, int]:
    """(text, media tokens) of one content part."""
    if isinstance(part, str):
        return part, 0
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in _TEXT_PARTS:
        return to_text(part.get("text")), 0
    if kind == "refusal":
        return to_text(part.get("refusal")), 0
    if kind == "image_url":
        image = part.get("image_url") if isinstance(part.get("image_url"), dict) else {}
        width, height = media.image_size(image.get("url")) or (None, None)
        return "[image]", media.openai_image_tokens(width, height, image.get("detail", "auto"))
    if kind == "input_audio":
        audio = part.get("input_audio") if isinstance(part.get("input_audio"), dict) else {}
        seconds = media.audio_seconds(audio.get("data"), audio.get("format"))
        return "[audio]", round((seconds or 0) * media.AUDIO_TOKENS_PER_SECOND)
    if kind == "file":
        file = part.get("file") if isinstance(part.get("file"), dict) else {}
        name = file.get("filename") or file.get("file_id") or "file"
        pages = media.pdf_pages(file.get("file_data"))
        return f"[file {to_text(name)}]", (pages or 1) * media.PDF_PAGE_TOKENS
    return f"[{kind if isinstance(kind, str) else 'part'}]", media.unknown_block_tokens(part)


def _texts(content: Any, model: str | None) -> tuple[list[str], int]:
    if isinstance(content, str):
        return [content], 0
    if content is None:
        return [""], 0
    if not isinstance(content, list):
        return [to_text(content)], 0
    texts, tokens = [], 0
    for part in content:
        text, n = _part(part, model)
        texts.append(text)
        tokens += n
    return texts or [""], tokens


READER = OpenAIChatReader()
