"""Lossless round trip of real request shapes (contract C1): every block type of both APIs comes
back unchanged through `winnow.data.parse` + the renderer, through the compressor under a limit
that needs no compression (library and CLI), through winnow's normalized JSON Lines, and
what the renderer has to repair it repairs honestly."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
from api_validate import validate_anthropic, validate_openai

from winnow.cli import main
from winnow.data import Unit, parse
from winnow.data.readers import ReadReport, read_file
from winnow.serving.cache import CacheAwareCompressor, CacheConfig
from winnow.serving.compressor import SemanticCompressor
from winnow.serving.render import min_cacheable_tokens, to_anthropic, to_openai
from winnow.serving.tokens import HeuristicCounter, unit_tokens

CORPUS_DIR = Path(__file__).parent / "fixtures" / "roundtrip"
CORPUS = sorted(CORPUS_DIR.glob("*/*.json"))
IDS = [f"{p.parent.name}/{p.stem}" for p in CORPUS]


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def same(a: object, b: object) -> bool:
    """JSON-equal with the key order kept."""
    return json.dumps(a) == json.dumps(b)


def render(path: Path, units: list[Unit]) -> dict:
    return (to_anthropic if path.parent.name == "anthropic" else to_openai)(units)


def _types(body: dict, api: str) -> set[str]:
    found = set()
    for m in body["messages"]:
        found.add(f"role:{m['role']}")
        found |= {f"field:{k}" for k in m if k not in ("role", "content")}
        content = m.get("content")
        for b in content if isinstance(content, list) else ():
            found.add(b["type"])
            found |= {f"{b['type']}.{k}" for k in ("citations", "cache_control", "is_error")} & {
                f"{b['type']}.{k}" for k in b
            }
            if b["type"] == "image":
                found.add(f"image:{b['source']['type']}")
            if b["type"] == "tool_result" and isinstance(b.get("content"), list):
                found |= {f"tool_result>{part['type']}" for part in b["content"]}
        for c in m.get("tool_calls") or ():
            found.add(f"tool_call:{c['type']}")
    return found


def test_the_corpus_holds_every_block_type_of_both_apis() -> None:
    anthropic = set().union(*(_types(load(p), "a") for p in CORPUS if p.parent.name == "anthropic"))
    openai = set().union(*(_types(load(p), "o") for p in CORPUS if p.parent.name == "openai"))
    assert {
        "text.citations",
        "image:base64",
        "image:url",
        "document",
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "bash_code_execution_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "thinking",
        "redacted_thinking",
        "text.cache_control",
        "image.cache_control",
        "document.cache_control",
        "tool_use",
        "tool_result.is_error",
        "tool_result>image",
        "tool_result>search_result",
        "role:system",
    } <= anthropic
    assert {
        "role:developer",
        "field:name",
        "image_url",
        "input_audio",
        "file",
        "refusal",
        "field:refusal",
        "tool_call:function",
        "tool_call:custom",
        "field:function_call",
        "role:function",
        "field:audio",
        "role:tool",
    } <= openai


@pytest.mark.parametrize("path", CORPUS, ids=IDS)
def test_parse_and_render_give_the_body_back(path) -> None:
    body = load(path)
    report = ReadReport()
    units = list(parse(body, report=report))
    assert report.problems == [] and units
    fmt = "anthropic_messages" if path.parent.name == "anthropic" else "openai_chat"
    assert dict(report.formats) == {fmt: 1}
    assert same(render(path, units), body)
    assert all(u.extra["raw"] is not None or u.text == "" for u in units)


@pytest.mark.parametrize("path", CORPUS, ids=IDS)
def test_compress_at_100_percent_returns_each_body_unchanged(capsys, tmp_path, path) -> None:
    body = load(path)
    to = "anthropic" if path.parent.name == "anthropic" else "openai"
    out = tmp_path / "out.json"
    assert main(["compress", str(path), "--limit", "100%", "--to", to, "-o", str(out)]) == 0
    capsys.readouterr()
    assert same(json.loads(out.read_text()), body)
    # the library: the compressor under a limit that needs nothing, then the result's own body
    units = list(parse(body))
    compressor = SemanticCompressor()
    total = sum(unit_tokens(u, compressor.counter) for u in units)
    result = compressor.compress(units, total)
    assert same(result.to_anthropic() if to == "anthropic" else result.to_openai(), body)


def test_normalized_json_lines_keep_the_request_once_and_come_back(capsys, tmp_path) -> None:
    path = CORPUS_DIR / "anthropic" / "thinking_tool_loop.json"
    jsonl = tmp_path / "units.jsonl"
    assert main(["compress", str(path), "--limit", "100%", "-o", str(jsonl)]) == 0
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert sum("request" in line for line in lines) == 1  # not repeated on every line
    assert lines[0]["request"]["thinking"] == {"type": "enabled", "budget_tokens": 10000}
    out = tmp_path / "body.json"
    assert (
        main(["compress", str(jsonl), "--limit", "100%", "--to", "anthropic", "-o", str(out)]) == 0
    )
    capsys.readouterr()
    assert same(json.loads(out.read_text()), load(path))


def test_json_lines_of_requests_give_one_body_each(capsys, tmp_path) -> None:
    bodies = [load(p) for p in CORPUS if p.parent.name == "openai"][:3]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    rc = main(["compress", str(requests), "--limit", "100%", "--to", "openai", "-o", "-"])
    out, _err = capsys.readouterr()
    assert rc == 0 and [json.loads(line) for line in out.splitlines()] == bodies
    folder = tmp_path / "out"
    assert (
        main(["compress", str(requests), "--limit", "100%", "--to", "openai", "-o", str(folder)])
        == 0
    )
    capsys.readouterr()
    written = sorted(folder.glob("*.json"))
    assert len(written) == 3 and sorted(map(json.dumps, map(load, written))) == sorted(
        map(json.dumps, bodies)
    )
    taken = tmp_path / "bodies.json"  # a file name, not a folder: said, nothing written
    rc = main(["compress", str(requests), "--limit", "100%", "--to", "openai", "-o", str(taken)])
    _out, err = capsys.readouterr()
    assert rc == 1 and err.count("\n") == 1 and "3 sessions need a folder" in err
    assert not taken.exists()


def test_cache_breakpoints_respect_the_requests_own() -> None:
    for name in ("cache_control", "images", "thinking_tool_loop"):
        body = load(CORPUS_DIR / "anthropic" / f"{name}.json")
        units = list(parse(body))
        cac = CacheAwareCompressor(
            SemanticCompressor(token_counter=HeuristicCounter()),
            CacheConfig(
                model=body["model"], min_cacheable_tokens=1, keep_last_steps=1, split_every=1
            ),
        )
        out = cac.compress(units, 10**6).to_anthropic()
        assert validate_anthropic(out, body) == [], name
        marks = json.dumps(out).count('"cache_control"')
        if name == "cache_control":  # four of its own already: winnow adds none, moves none
            assert marks == json.dumps(body).count('"cache_control"') == 4
        else:
            assert json.dumps(body).count('"cache_control"') < marks <= 4
        for key in out:  # every field of the request is still there, in its order
            assert key == "messages" or key == "system" or out[key] == body[key]
        # (the compressor may drop a system prompt it finds droppable: then `system` goes)
        assert list(out) == [k for k in body if k != "system" or "system" in out]


def test_a_provider_thinking_block_is_never_text_and_the_loop_keeps_it(caplog) -> None:
    body = load(CORPUS_DIR / "anthropic" / "thinking_tool_loop.json")
    units = list(parse(body))
    # what a careless compressor might do: rewrite every thinking unit (C1 says drop raw)
    out = [
        dataclasses.replace(
            u,
            text="summary of thinking",
            extra={**{k: v for k, v in u.extra.items() if k != "raw"}, "strategy": "summarize"},
        )
        if u.kind == "thinking"
        else u
        for u in units
    ]
    with caplog.at_level(logging.WARNING, logger="winnow.serving.render"):
        rendered = to_anthropic(out)
    text = json.dumps(rendered)
    assert "summary of thinking" not in text  # never sent as text
    assert validate_anthropic(rendered, body) == []  # the tool loop's own thinking is back
    last = rendered["messages"][-2]["content"]
    assert [b["type"] for b in last[:2]] == ["redacted_thinking", "thinking"]
    older = rendered["messages"][1]["content"]
    assert [b["type"] for b in older] == ["tool_use"]  # an older one may go, whole
    assert "put back" in caplog.text and "never text" in caplog.text


def transcript_units(pairs: list[tuple[str, str, str, str | None]]) -> list[Unit]:
    return [
        Unit(f"s:{i}", "s", i, role, kind, text, tool_name="Bash" if call else None, call_id=call)
        for i, (role, kind, text, call) in enumerate(pairs)
    ]


def test_duplicate_call_ids_are_made_unique_and_orphans_are_tool_notes() -> None:
    units = transcript_units(
        [
            ("user", "text", "run the tests twice", None),
            ("assistant", "tool_call", '{"command":"pytest"}', "toolu_1"),
            ("tool", "tool_result", "1 failed", "toolu_1"),
            ("assistant", "tool_call", '{"command":"pytest"}', "toolu_1"),  # a resume reused it
            ("tool", "tool_result", "2 passed", "toolu_1"),
            ("tool", "tool_result", "stale output", "toolu_9"),  # its call was dropped
        ]
    )
    body = to_anthropic(units, model="claude-sonnet-4-6", tools=True)
    assert validate_anthropic(body) == []
    ids = [b["id"] for m in body["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert ids == ["toolu_1", "toolu_1_2"]
    note = body["messages"][-1]["content"][-1]
    assert note["type"] == "text" and note["text"].startswith("[tool note: result of a Bash call")
    openai_body = to_openai(units, model="gpt-4o", tools=True)
    assert validate_openai(openai_body) == []
    assert [m["role"] for m in openai_body["messages"]][-2:] == ["tool", "user"]
    assert openai_body["messages"][-1]["content"].startswith("[tool note:")


def test_unreadable_blocks_are_units_with_their_documented_cost() -> None:
    body = load(CORPUS_DIR / "anthropic" / "images.json")
    units = list(parse(body))
    images = [u for u in units if u.text == "[image]"]
    # 120 x 80 px: 120 * 80 / 750 = 12.8 -> 13 tokens; a URL or a file of unknown size: the
    # most one image can cost on Claude Opus 4.8 (a model that reads 2,576-px images)
    assert [u.extra["media_tokens"] for u in images] == [13, 4784, 4784]
    assert all(u.role == "user" and u.kind == "text" for u in images)
    counter = HeuristicCounter()
    assert (
        unit_tokens(images[0], counter)
        == unit_tokens(Unit("x", "s", 0, "user", "text", "[image]"), counter) + 13
    )
    pdf = next(
        u for u in parse(load(CORPUS_DIR / "anthropic" / "documents.json")) if "Quarterly" in u.text
    )
    assert pdf.extra["media_tokens"] == 2 * 3000  # two pages
    parts = {
        u.text: u.extra.get("media_tokens")
        for u in parse(load(CORPUS_DIR / "openai" / "multimodal.json"))
    }
    assert parts["[image]"] in (85, 255)  # low detail: 85; our 120x80 image at high: 1 tile
    assert parts["[audio]"] == 5  # 0.5 s at 10 tokens a second
    assert parts["[file sync-log.pdf]"] == 6000


def test_cache_minimums_by_model_and_a_warning_for_unknown_models(caplog) -> None:
    assert min_cacheable_tokens("claude-opus-4-5") == 4096
    assert min_cacheable_tokens("claude-opus-4-5-20251101") == 4096
    assert min_cacheable_tokens("anthropic/claude-opus-4.6") == 4096
    assert min_cacheable_tokens("claude-haiku-4-5") == 4096
    assert min_cacheable_tokens("claude-opus-4-8") == 1024
    assert min_cacheable_tokens("claude-3-5-haiku-20241022") == 2048
    assert min_cacheable_tokens("anthropic.claude-sonnet-4-6-v1:0") == 1024
    with caplog.at_level(logging.WARNING, logger="winnow.serving.render"):
        assert min_cacheable_tokens("claude-nova-1") == 4096
    assert len(caplog.records) == 1 and "claude-nova-1" in caplog.text


def test_a_request_file_and_its_in_memory_parse_agree(tmp_path) -> None:
    path = CORPUS_DIR / "openai" / "tools.json"
    from_file = list(read_file(path))
    in_memory = list(parse(load(path), session_id="tools"))
    strip = lambda u: {k: v for k, v in u.to_dict().items() if k != "source"}  # noqa: E731
    assert [strip(u) for u in from_file] == [strip(u) for u in in_memory]


def test_extract_keeps_a_requests_fields_once_and_gives_them_back(tmp_path) -> None:
    from winnow.data.extract import extract, load_units

    bodies = [load(p) for p in CORPUS if p.parent.name == "anthropic"][:4]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    extract([path], tmp_path / "units.parquet")
    import pyarrow.parquet as pq

    extras = pq.read_table(tmp_path / "units.parquet").column("extra").to_pylist()
    assert sum('"request"' in (e or "") for e in extras) == len(bodies)  # once a session
    units = list(load_units(tmp_path / "units.parquet"))
    by_session: dict[str, list[Unit]] = {}
    for u in units:
        by_session.setdefault(u.session_id, []).append(u)
    assert [same(to_anthropic(us), b) for us, b in zip(by_session.values(), bodies)] == [True] * 4


def test_a_rewritten_media_unit_no_longer_costs_its_media() -> None:
    image = next(
        u for u in parse(load(CORPUS_DIR / "anthropic" / "images.json")) if u.text == "[image]"
    )
    counter = HeuristicCounter()
    rewritten = dataclasses.replace(
        image,
        extra={**{k: v for k, v in image.extra.items() if k != "raw"}, "strategy": "summarize"},
    )
    assert (
        unit_tokens(image, counter) - unit_tokens(rewritten, counter) == image.extra["media_tokens"]
    )


def test_the_latest_units_request_wins() -> None:
    """A growing conversation's prefix is memoized: its units carry the earlier request; the body
    takes the fields of the latest (changed tools, a new max_tokens)."""
    body = load(CORPUS_DIR / "anthropic" / "tool_results_rich.json")
    later = {
        **body,
        "max_tokens": 8000,
        "messages": [*body["messages"], {"role": "assistant", "content": "Done."}],
    }
    early = list(parse(body))
    late = list(parse(later))
    out = to_anthropic([*early, late[-1]])
    assert out["max_tokens"] == 8000 and out["messages"][-1] == {
        "role": "assistant",
        "content": "Done.",
    }


@pytest.mark.parametrize(
    "name, to",
    [("openai/tools.json", "anthropic"), ("anthropic/thinking_tool_loop.json", "openai")],
)
def test_a_request_written_for_the_other_api_keeps_its_tool_definitions(
    tmp_path, capsys, name, to
) -> None:
    """The agent's own tools (description, JSON schema) carry over; stubs with an empty
    schema would leave the model guessing every argument."""
    body = load(CORPUS_DIR / name)
    out = tmp_path / "body.json"
    assert main(["compress", str(CORPUS_DIR / name), "--limit", "100%", "--to", to, "-o", str(out)]) == 0  # fmt: skip
    capsys.readouterr()
    sent = json.loads(out.read_text())
    if to == "anthropic":
        want = [
            {
                "name": t["function"]["name"],
                **(
                    {"description": t["function"]["description"]}
                    if "description" in t["function"]
                    else {}
                ),  # fmt: skip
                "input_schema": t["function"]["parameters"],
            }
            for t in body["tools"]
        ]
        assert sent["tools"] == want and not validate_anthropic(sent)
    else:
        want = [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                },
            }
            for t in body["tools"]
        ]
        assert sent["tools"] == want and not validate_openai(sent)


def test_an_assistant_turn_left_only_its_thinking_is_not_sent() -> None:
    """When compression drops an assistant turn's text and tool calls (and their results) but
    keeps its thinking, the API would answer 400 ('The final block in an assistant message
    cannot be `thinking`'): the orphan thinking goes whole, as the API allows for older turns."""
    body = load(CORPUS_DIR / "anthropic" / "thinking_tool_loop.json")
    units = list(parse(body))
    kept = [u for u in units if u.role != "tool" and (u.role == "user" or u.kind == "thinking")]
    sent = to_anthropic(kept)
    assert not validate_anthropic(sent), validate_anthropic(sent)
    assert not any(m["role"] == "assistant" for m in sent["messages"])  # nothing but thinking


def test_a_repeated_call_id_of_64_characters_is_renamed_apart() -> None:
    """Two calls with one id (a client's bug) are renamed `<id>_2`; at the APIs' 64-character
    limit the suffix must not be cut off again."""
    cid = "toolu_" + "x" * 58  # 64 characters
    turn = [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": cid, "name": "run", "input": {}}],
        },  # fmt: skip
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": "ok"}]},
    ]
    body = {"model": "claude-sonnet-4-6", "max_tokens": 100, "tools": [{"name": "run", "input_schema": {"type": "object"}}]}  # fmt: skip
    body["messages"] = [{"role": "user", "content": "Run it twice."}, *turn, *turn]
    sent = to_anthropic(list(parse(body)))
    assert not validate_anthropic(sent), validate_anthropic(sent)


def test_an_image_sent_to_the_other_api_is_a_text_note_and_says_so(caplog) -> None:
    units = list(parse(load(CORPUS_DIR / "anthropic" / "images.json")))
    with caplog.at_level("WARNING", logger="winnow.serving.render"):
        body = to_openai(units, model="gpt-4o")
        to_openai(units, model="gpt-4o")  # counted and rendered again: said once
    assert validate_openai(body) == []
    said = [r.getMessage() for r in caplog.records if "has no openai_chat form" in r.getMessage()]
    assert len(said) == 3 and all("'[image]'" in m for m in said)
    assert not [r for r in caplog.records if "no anthropic" in r.getMessage()]
