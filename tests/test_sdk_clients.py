"""The official `anthropic` and `openai` SDK clients send what winnow writes to a loopback
stand-in that validates every request like the real API (tests/api_validate.py) and answers
like it: every output of `winnow compress` (the round-trip corpus at several limits, its
cache-aware and cross-format outputs, real transcripts) and of the service's /v1/compress."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_validate import validate_anthropic, validate_openai
from llm_server import LLMServer

from winnow.cli import main

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

FIXTURES = Path(__file__).parent / "fixtures"
CORPUS = sorted((FIXTURES / "roundtrip").glob("*/*.json"))
TRANSCRIPTS = [
    FIXTURES / "demo_session.jsonl",  # Claude Code
    FIXTURES / "compressor" / "codex.jsonl",  # normalized units with categories
    FIXTURES / "readers_b" / "swe-agent__test-repo-i1.traj",
]
# The MCP connector is a beta: its requests go through `client.beta.messages.create`.
BETAS = {"mcp_servers": ["mcp-client-2025-04-04"]}


def api_of(path: Path) -> str:
    return "anthropic" if path.parent.name == "anthropic" else "openai"


def send(srv: LLMServer, body: dict) -> None:
    """`client.messages.create(**body)` / `client.chat.completions.create(**body)`, streamed
    to the end when the body asks for a stream; any 4xx raises."""
    if "max_tokens" in body and "messages" in body and "model" in body and _is_anthropic(body):
        client = anthropic.Anthropic(base_url=srv.base_url, api_key="test", max_retries=0)
        betas = [b for key, bs in BETAS.items() if key in body for b in bs]
        create = client.beta.messages.create if betas else client.messages.create
        out = create(**body, **({"betas": betas} if betas else {}))
    else:
        client = openai.OpenAI(base_url=srv.openai_base_url, api_key="test", max_retries=0)
        out = client.chat.completions.create(**body)
    if body.get("stream"):
        for _event in out:
            pass


def _is_anthropic(body: dict) -> bool:
    from winnow.data.readers.anthropic_messages import is_anthropic

    return is_anthropic(body) or not any(
        m.get("role") in ("tool", "developer", "function") or "tool_calls" in m
        for m in body["messages"]
    )


def compress(capsys, tmp_path: Path, path: Path, *argv: str) -> dict | None:
    """The body `winnow compress` writes; None when nothing was left under the limit."""
    out = tmp_path / "body.json"
    out.unlink(missing_ok=True)
    rc = main(["compress", str(path), *argv, "-o", str(out)])
    err = capsys.readouterr().err
    if rc == 1 and "nothing is left under the limit" in err:
        assert err.count("\n") == 1 and not out.exists()
        return None
    assert rc == 0, err
    return json.loads(out.read_text())


def stand_in(original: dict | None = None) -> LLMServer:
    """A stand-in that answers 400 to anything the real API would reject; with `original`,
    also to a last assistant turn whose thinking blocks changed."""

    def validate(api: str, body: object) -> list[str]:
        if api == "anthropic":
            return validate_anthropic(body, original)
        return validate_openai(body)

    return LLMServer(replies=["ok"], validate=validate)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_compress_output_of_the_corpus_is_accepted(capsys, tmp_path, path) -> None:
    original = json.loads(path.read_text())
    own = api_of(path)
    other = "openai" if own == "anthropic" else "anthropic"
    bodies = [
        compress(capsys, tmp_path, path, "--limit", limit, "--to", own, *policy)
        for limit, policy in (
            ("100%", ()),
            ("60%", ("--on-overflow", "summarize_largest")),
            ("30%", ("--on-overflow", "truncate_oldest")),
        )
    ]
    bodies.append(compress(capsys, tmp_path, path, "--limit", "50%", "--to", own, "--cache",
                           "--on-overflow", "truncate_oldest"))  # fmt: skip
    bodies.append(compress(capsys, tmp_path, path, "--limit", "100%", "--to", other))
    assert json.dumps(bodies[0]) == json.dumps(original)
    sent = [b for b in bodies if b is not None]
    # only truncating to 30% or 50% may leave nothing of a tiny request
    assert all(bodies[i] is not None for i in (0, 1, 4))
    with stand_in(original if own == "anthropic" else None) as srv:
        for body in sent:
            send(srv, body)
        assert [r.problems for r in srv.requests] == [[]] * len(sent)


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.name)
@pytest.mark.parametrize("to", ["anthropic", "openai"])
def test_transcripts_compress_to_requests_the_sdks_send(capsys, tmp_path, path, to) -> None:
    with stand_in() as srv:
        for argv in (("--limit", "30%"), ("--limit", "40%", "--cache")):
            body = compress(capsys, tmp_path, path, *argv, "--to", to,
                            "--on-overflow", "truncate_oldest")  # fmt: skip
            assert (
                body is not None and body["model"]
            )  # a complete request: the SDK needs model (and max_tokens)
            send(srv, body)
        assert [r.problems for r in srv.requests] == [[], []]


def test_service_outputs_are_sent_by_the_sdks() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from winnow.serving.service import create_app

    with TestClient(create_app()) as client, stand_in() as srv:
        for path in CORPUS:
            original = json.loads(path.read_text())
            for limit in (10**6, 60):
                r = client.post(
                    "/v1/compress",
                    json={
                        **original,
                        "token_limit": limit,
                        "on_must_keep_overflow": "truncate_oldest",
                    },
                )
                assert r.status_code == 200, (path.name, r.text)
                body = r.json()["body"]
                if limit == 10**6:
                    assert json.dumps(body) == json.dumps(original), path.name
                send(srv, body)
        assert all(r.problems == [] for r in srv.requests), [
            (i, r.problems) for i, r in enumerate(srv.requests) if r.problems
        ]
