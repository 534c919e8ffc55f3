"""Tool pairs through compression: whatever units the compressor leaves (a call or its result
rewritten, dropped, or kept as its own block; OpenAI's legacy `function_call` and new-style
`tool_calls`), the renderer writes a request the API accepts (tests/api_validate.py), each
pair in one style, and the request's own tool definitions alone."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from api_validate import validate_anthropic, validate_openai
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from winnow.data import Unit, parse
from winnow.serving.render import to_anthropic, to_openai

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
# What the openai SDK sends for a legacy function-calling turn (`functions=`, `function_call=`).
LEGACY = {
    "model": "gpt-3.5-turbo-0613",
    "functions": [WEATHER],
    "function_call": "auto",
    "messages": [
        {"role": "user", "content": "Do I need an umbrella in Oslo today?"},
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        },
        {"role": "function", "name": "get_weather", "content": '{"rain_mm": 6}'},
        {"role": "assistant", "content": "Yes: 6 mm of rain is expected."},
    ],
}


def rewritten(u: Unit, text: str, strategy: str = "placeholder") -> Unit:
    """`u` as the compressor rewrites it (contract C1: marked, and without its raw block)."""
    extra = {k: v for k, v in u.extra.items() if k != "raw"}
    return dataclasses.replace(u, text=text, extra={**extra, "strategy": strategy})


def legacy_units() -> list[Unit]:
    units = list(parse(json.loads(json.dumps(LEGACY)), "openai_chat"))
    assert [u.kind for u in units] == ["text", "tool_call", "tool_result", "text"]
    return units


def test_a_legacy_call_rewritten_keeps_its_raw_function_message_in_legacy_style() -> None:
    # `compress --on-overflow truncate_oldest` left this: the user's request and the answer
    # dropped, the function_call made a stand-in, the function message kept as it came
    request, call, result, _answer = legacy_units()
    body = to_openai([rewritten(call, "{}"), result], tools=True, model="gpt-4o")
    assert validate_openai(body) == []
    assert "tools" not in body and body["functions"] == [WEATHER]  # no stub list beside them
    assistant, function = body["messages"]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "get_weather", "arguments": "{}"},
    }
    assert function == LEGACY["messages"][2]  # the client's own message, as it came


def test_a_legacy_result_rewritten_answers_its_raw_call_as_a_function_message() -> None:
    request, call, result, answer = legacy_units()
    body = to_openai([request, call, rewritten(result, "rain", "summarize"), answer])
    assert validate_openai(body) == []
    assert body["messages"][1] == LEGACY["messages"][1]
    assert body["messages"][2] == {"role": "function", "name": "get_weather", "content": "rain"}


def test_a_legacy_result_whose_call_went_is_a_user_note_and_an_unanswered_call_stays() -> None:
    request, call, result, answer = legacy_units()
    body = to_openai([request, result, answer])
    assert validate_openai(body) == []
    note = body["messages"][1]
    assert note["role"] == "user" and note["content"].startswith("[tool note: result of a")
    # a function_call without its function message is valid as it is: nothing invented
    body = to_openai([request, call, answer])
    assert validate_openai(body) == []
    assert body["messages"] == [LEGACY["messages"][i] for i in (0, 1, 3)]


def test_a_result_whose_new_style_call_went_is_a_user_note_not_a_tool_message() -> None:
    body = {
        "model": "gpt-4o",
        "tools": [{"type": "function", "function": WEATHER}],
        "messages": [
            {"role": "user", "content": "Oslo?"},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        ],
    }
    units = [u for u in parse(body, "openai_chat") if u.kind != "tool_call"]
    out = to_openai(units)
    assert validate_openai(out) == []
    assert out["messages"][1] == {"role": "assistant", "content": "Checking."}  # no null keys
    assert out["messages"][2]["role"] == "user"


def test_the_nulls_a_client_sends_come_back_and_none_are_invented() -> None:
    # the openai SDK's `message.model_dump()` appended to the history carries explicit nulls
    message = {"role": "assistant", "content": "Done.", "tool_calls": None, "function_call": None}
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Go."}, message]}
    assert json.dumps(to_openai(list(parse(body, "openai_chat")))) == json.dumps(body)


def test_a_legacy_request_rendered_for_anthropic_gets_its_functions_as_tools() -> None:
    body = to_anthropic(legacy_units(), tools=True, model="claude-sonnet-4-6")
    assert validate_anthropic(body) == []
    assert body["tools"] == [
        {"name": "get_weather", "description": WEATHER["description"],
         "input_schema": WEATHER["parameters"]},
    ]  # fmt: skip


# --- any units the compressor may leave -------------------------------------------------------

_words = st.text(alphabet="abcdefgh xyz", min_size=1, max_size=12).filter(str.strip)


@st.composite
def openai_requests(draw: Any) -> dict[str, Any]:
    """A valid chat request: text turns, new-style tool calls (tool messages) or, in a legacy
    request, function calls (function messages); system, named and list-content messages."""
    legacy = draw(st.booleans())
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append(
            {"role": draw(st.sampled_from(["system", "developer"])), "content": "Be terse."}
        )
    user = draw(_words)
    msgs.append(
        draw(
            st.sampled_from(
                [
                    {"role": "user", "content": user},
                    {"role": "user", "content": [{"type": "text", "text": user}]},
                    {"role": "user", "name": "ana", "content": user},
                ]
            )
        )
    )
    for turn in range(draw(st.integers(1, 4))):
        text = draw(st.one_of(st.none(), _words))
        if draw(st.booleans()):
            msgs.append({"role": "assistant", "content": text or "ok"})
        elif legacy:
            call = {"name": "get_weather", "arguments": json.dumps({"city": draw(_words)})}
            msgs.append({"role": "assistant", "content": text, "function_call": call})
            msgs.append({"role": "function", "name": "get_weather", "content": draw(_words)})
        else:
            calls = [
                {
                    "id": f"call_{turn}_{j}",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                }
                for j in range(draw(st.integers(1, 3)))
            ]
            msgs.append({"role": "assistant", "content": text, "tool_calls": calls})
            msgs += [
                {"role": "tool", "tool_call_id": c["id"], "content": draw(_words)} for c in calls
            ]
        if draw(st.booleans()):
            msgs.append({"role": "user", "content": draw(_words)})
    body: dict[str, Any] = {"model": "gpt-4o", "messages": msgs}
    if legacy:
        body["functions"] = [WEATHER]
    else:
        body["tools"] = [{"type": "function", "function": WEATHER}]
    assert validate_openai(body) == []
    return body


@st.composite
def anthropic_requests(draw: Any) -> dict[str, Any]:
    """A valid Messages request: text turns and tool loops (several calls a turn)."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": draw(_words)}]
    for turn in range(draw(st.integers(1, 4))):
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            blocks.append({"type": "text", "text": draw(_words)})
        uses = [
            {"type": "tool_use", "id": f"toolu_{turn}_{j}", "name": "get_weather", "input": {}}
            for j in range(draw(st.integers(0, 2)))
        ]
        msgs.append(
            {"role": "assistant", "content": blocks + uses or [{"type": "text", "text": "ok"}]}
        )
        results = [
            {"type": "tool_result", "tool_use_id": u["id"], "content": draw(_words)} for u in uses
        ]
        extra = [{"type": "text", "text": draw(_words)}] if draw(st.booleans()) or not uses else []
        msgs.append({"role": "user", "content": results + extra})
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 256,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": msgs,
    }
    assert validate_anthropic(body) == []
    return body


@st.composite
def transcript_units(draw: Any) -> list[Unit]:
    """Units of an agent transcript (no provider blocks): calls and results by id."""
    units: list[Unit] = []
    for n in range(draw(st.integers(1, 10))):
        role, kind = draw(
            st.sampled_from(
                [
                    ("user", "text"),
                    ("assistant", "text"),
                    ("assistant", "tool_call"),
                    ("tool", "tool_result"),
                    ("system", "text"),
                ]
            )
        )
        call = f"c{draw(st.integers(0, 3))}" if kind != "text" else None
        text = '{"command": "ls"}' if kind == "tool_call" else draw(_words)
        units.append(Unit(f"t:{n}", "t", n, role, kind, text, tool_name="Bash", call_id=call))
    return units


def compressed(draw: Any, units: list[Unit]) -> list[Unit]:
    """What the compressor may leave of `units`: each kept, rewritten or dropped; sometimes a
    note of its own among them."""
    out = []
    for u in units:
        action = draw(st.sampled_from(["keep", "keep", "rewrite", "drop"]))
        if action == "keep":
            out.append(u)
        elif action == "rewrite":
            out.append(rewritten(u, "{}" if u.kind == "tool_call" else "[summary] " + u.text[:8]))
        if draw(st.integers(0, 9)) == 0:
            role = draw(st.sampled_from(["user", "assistant"]))
            out.append(Unit(f"note:{len(out)}", u.session_id, u.index, role, "text", "[note] x"))
    return out


def sent(body: dict[str, Any]) -> bool:
    """Whether winnow writes this body at all (`compress` names and skips one without a user
    or assistant message)."""
    return any(m.get("role") in ("user", "assistant") for m in body.get("messages") or ())


def check_openai(body: dict[str, Any], request: dict[str, Any] | None) -> None:
    if not sent(body):
        return
    assert validate_openai(body) == [], json.dumps(body)
    if request is not None:  # the request's own tool definitions, and no list of the other style
        assert ("tools" in body) == ("tools" in request), json.dumps(body)
        assert ("functions" in body) == ("functions" in request)
    for m in body["messages"]:  # no empty call field invented
        assert m.get("tool_calls", 0) is not None and m.get("function_call", 0) is not None, m
        assert m.get("tool_calls", [0]) != []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), openai_requests())
def test_any_compression_of_an_openai_request_renders_valid_requests(data, req) -> None:
    units = compressed(data.draw, list(parse(req, "openai_chat")))
    native = any(u.extra.get("format") == "openai_chat" for u in units)  # else a new request
    check_openai(to_openai(units, tools=True, model="gpt-4o"), req if native else None)
    body = to_anthropic(units, tools=True, model="claude-sonnet-4-6")
    if sent(body):
        assert validate_anthropic(body) == [], json.dumps(body)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), anthropic_requests())
def test_any_compression_of_an_anthropic_request_renders_valid_requests(data, req) -> None:
    units = compressed(data.draw, list(parse(req, "anthropic_messages")))
    body = to_anthropic(units, tools=True, model="claude-sonnet-4-6")
    if sent(body):
        assert validate_anthropic(body) == [], json.dumps(body)
    check_openai(to_openai(units, tools=True, model="gpt-4o"), None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), transcript_units())
def test_any_compression_of_a_transcript_renders_valid_requests(data, units) -> None:
    units = compressed(data.draw, units)
    body = to_anthropic(units, tools=True, model="claude-sonnet-4-6")
    if sent(body):
        assert validate_anthropic(body) == [], json.dumps(body)
    check_openai(to_openai(units, tools=True, model="gpt-4o"), None)
