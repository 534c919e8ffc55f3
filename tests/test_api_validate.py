"""The request validators of tests/api_validate.py: what they accept, what they reject, and that
their field tables still cover the installed official SDKs."""

from __future__ import annotations

import copy
import typing

import pytest
from api_validate import (
    ANTHROPIC_BLOCKS,
    ANTHROPIC_TOP,
    OPENAI_MESSAGES,
    OPENAI_PARTS,
    OPENAI_TOP,
    validate_anthropic,
    validate_openai,
)

SIG = "EqQBCkgIARABGAIiQL2fB3FxSx0ZsW7l1yXrF8c8m0n8Q1o7G4k6cXl3oDx2Zk0hXK8dQ1T5ZcV9pE3a"
ANTHROPIC = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 1024,
    "thinking": {"type": "enabled", "budget_tokens": 2000},
    "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
    "system": [
        {
            "type": "text",
            "text": "You are a coding agent.",
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
        }
    ],
    "messages": [
        {"role": "user", "content": "Run the tests."},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should run pytest.", "signature": SIG},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "Bash",
                    "input": {"command": "pytest"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "2 passed"},
                {"type": "text", "text": "and then?", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ],
}
OPENAI = {
    "model": "gpt-4o",
    "messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "name": "ada", "content": [{"type": "text", "text": "Run the tests."}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "2 passed"},
        {"role": "assistant", "content": "All green."},
    ],
}


def test_valid_bodies_pass() -> None:
    assert validate_anthropic(ANTHROPIC, ANTHROPIC) == []
    assert validate_openai(OPENAI) == []


def _mutated(body: dict, path: list, value: object) -> dict:
    out = copy.deepcopy(body)
    node = out
    for k in path[:-1]:
        node = node[k]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (["winnow"], {"tokens": 1}, "winnow: unknown top-level field"),
        (["max_tokens"], KeyError, "max_tokens: required"),
        (["messages", 0, "role"], "assistant", "first message must use the user role"),
        (["messages", 2, "content", 0, "tool_use_id"], "toolu_99", "unexpected tool_use_id"),
        (["messages", 2, "content"], [{"type": "text", "text": "hi"}], "without tool_result"),
        (["messages", 0, "content"], [{"type": "text", "text": "  "}], "non-whitespace"),
        (["messages", 1, "content", 0, "signature"], KeyError, "must carry its signature"),
        (
            ["messages", 1, "content", 0],
            {"type": "text", "text": "[thinking] x"},
            "start with its thinking",
        ),
        (["messages", 1, "content", 1, "input"], "pytest", "input: must be an object"),
        (["messages", 1, "content", 1, "id"], "toolu 01", "must match"),
        (["messages", 0, "content"], [{"type": "hologram"}], "unknown block type"),
        (["messages", 0, "content"], [{"type": "text", "text": "x", "winnow": 1}], "unknown field"),
        (["tools"], KeyError, "must define tools"),
        (
            ["messages", 1, "content"],
            [
                {"type": "text", "text": "Let me run them."},
                {"type": "thinking", "thinking": "I should run pytest.", "signature": SIG},
                {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {}},
            ],
            "first block must be `thinking` or `redacted_thinking`",
        ),
        (  # the API's 400 when compression leaves an assistant turn only its thinking
            ["messages", 1, "content", 1],
            {"type": "redacted_thinking", "data": "EmwKAhgB"},
            "final block in an assistant message cannot be `thinking`",
        ),
        (
            ["messages", 0, "content"],
            [{"type": "tool_use", "id": "a", "name": "b", "input": {}}],
            "belong in assistant",
        ),
    ],
)
def test_anthropic_rejections(path, value, needle) -> None:
    problems = validate_anthropic(_mutated(ANTHROPIC, path, value))
    assert any(needle in p for p in problems), problems


def test_anthropic_results_must_come_first_and_breakpoints_are_counted() -> None:
    body = copy.deepcopy(ANTHROPIC)
    body["messages"][2]["content"].reverse()
    assert any("must come first" in p for p in validate_anthropic(body))
    body = copy.deepcopy(ANTHROPIC)
    body["cache_control"] = {"type": "ephemeral"}
    for b in (body["messages"][1]["content"][1], body["messages"][2]["content"][0]):
        b["cache_control"] = {"type": "ephemeral"}
    assert any("maximum of 4" in p for p in validate_anthropic(body))  # 3 + 1 + automatic
    body = copy.deepcopy(ANTHROPIC)
    body["messages"][2]["content"][1]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    body["messages"][1]["content"][1]["cache_control"] = {"type": "ephemeral", "ttl": "5m"}
    assert any("cannot come after" in p for p in validate_anthropic(body))


def test_anthropic_thinking_must_match_the_original() -> None:
    changed = copy.deepcopy(ANTHROPIC)
    changed["messages"][1]["content"][0]["thinking"] = "I should run pytest -q."
    assert validate_anthropic(changed) == []  # alone, it looks valid...
    assert any("unchanged" in p for p in validate_anthropic(changed, ANTHROPIC))


def test_anthropic_server_tools_pair_within_the_assistant_turn() -> None:
    body = copy.deepcopy(ANTHROPIC)
    use = {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"query": "x"},
    }
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    body["messages"][1]["content"][1:1] = [use, result]
    assert validate_anthropic(body) == []
    body["messages"][1]["content"].remove(result)
    assert any("without a result" in p for p in validate_anthropic(body))


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (["winnow"], {}, "winnow: unknown top-level field"),
        (["model"], KeyError, "model: required"),
        (["messages", 3, "tool_call_id"], "call_9", "must be a response"),
        (["messages", 3], {"role": "user", "content": "hi"}, "must be followed by tool messages"),
        (["messages", 2, "tool_calls", 0, "function", "arguments"], {}, "must be a string"),
        (
            ["messages", 0, "content"],
            [{"type": "image_url", "image_url": {"url": "x"}}],
            "not allowed in a developer",
        ),
        (["messages", 4, "content"], None, "required unless tool_calls"),
        (["messages", 1, "colour"], "red", "unknown field"),
        (["messages", 1, "role"], "wizard", "unknown role"),
    ],
)
def test_openai_rejections(path, value, needle) -> None:
    problems = validate_openai(_mutated(OPENAI, path, value))
    assert any(needle in p for p in problems), problems


def _literal(tp: typing.Any) -> str:
    """The string of a `Literal["x"]`, however wrapped (Required[...], ...)."""
    while not isinstance(tp, str):
        tp = typing.get_args(tp)[0]
    return tp


def _typed_fields(td: typing.Any) -> set[str]:
    return set(typing.get_type_hints(td)) if hasattr(td, "__annotations__") else set()


def _union(tp: typing.Any) -> list[typing.Any]:
    args = typing.get_args(tp)
    return [x for a in args for x in _union(a)] if args else [tp]


def test_tables_cover_the_installed_anthropic_sdk() -> None:
    anthropic = pytest.importorskip("anthropic")
    from anthropic.types import message_create_params as mcp
    from anthropic.types.message_content_param import MessageContentParam

    top = _typed_fields(mcp.MessageCreateParamsNonStreaming)
    assert top <= ANTHROPIC_TOP, top - ANTHROPIC_TOP
    items = typing.get_args(typing.get_args(MessageContentParam)[1])[0]
    for td in _union(items):
        fields = getattr(td, "__annotations__", {})
        if "type" not in fields or getattr(td, "model_fields", None) is not None:
            continue  # response models accepted as params: same shapes as their params
        kind = _literal(typing.get_type_hints(td)["type"])
        assert kind in ANTHROPIC_BLOCKS, kind
        assert set(fields) - {"type"} <= ANTHROPIC_BLOCKS[kind], (kind, anthropic.__version__)


def test_tables_cover_the_installed_openai_sdk() -> None:
    pytest.importorskip("openai")
    from openai.types.chat import completion_create_params as ccp
    from openai.types.chat.chat_completion_content_part_param import ChatCompletionContentPartParam
    from openai.types.chat.chat_completion_message_param import ChatCompletionMessageParam

    assert _typed_fields(ccp.CompletionCreateParamsNonStreaming) <= OPENAI_TOP
    for td in _union(ChatCompletionMessageParam):
        hints = typing.get_type_hints(td)
        role = _literal(hints["role"])
        assert set(hints) - {"role"} <= OPENAI_MESSAGES[role], role
    for td in _union(ChatCompletionContentPartParam):
        hints = typing.get_type_hints(td)
        kind = _literal(hints["type"])
        assert set(hints) - {"type"} <= OPENAI_PARTS[kind], kind
