"""The HTTP service against a real uvicorn server on loopback, including a bounded load test."""

from __future__ import annotations

import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from api_validate import validate_anthropic, validate_openai  # noqa: E402

from winnow.data.readers import ReadReport, read_file  # noqa: E402
from winnow.data.schema import CATEGORIES  # noqa: E402
from winnow.serving.service import ServiceConfig, create_app  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "batch"
TOKEN = "s3cret-token"

OPENAI = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {
            "role": "user",
            "content": "Add rate limiting to the login endpoint, max 5 tries a minute.",
        },
        {
            "role": "assistant",
            "content": "Let me look at the handler.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "app/login.py"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "def login(req):\n    return check(req.user, req.pw)\n",
        },
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "thanks"},
    ],
}
ANTHROPIC = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 1024,
    "system": "You are a coding agent.",
    "messages": [
        {"role": "user", "content": "Fix the failing test in tests/test_auth.py"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running the tests first."},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest -q"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": "FAILED tests/test_auth.py::test_lockout - AssertionError",
                }
            ],
        },
    ],
}


class Server:
    """A uvicorn server on an ephemeral loopback port, run in a thread."""

    def __init__(self, config: ServiceConfig):
        self.server = uvicorn.Server(
            uvicorn.Config(create_app(config), host="127.0.0.1", port=0, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def url():
    with Server(ServiceConfig()) as u:
        yield u


@pytest.fixture(scope="module")
def guarded_url():
    with Server(ServiceConfig(token=TOKEN, max_bytes=4096)) as u:
        yield u


@pytest.fixture(scope="module")
def client(url):
    with httpx.Client(base_url=url, timeout=30) as c:
        yield c


def real_units(name: str = "claude_code_short.jsonl") -> list[dict]:
    return [u.to_dict() for u in read_file(FIXTURES / name, ReadReport())]


def test_health_model_and_docs(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    info = client.get("/v1/model").json()
    assert info["labels"] == list(CATEGORIES)
    assert info["name"] and info["version"]
    assert info["sha256"] and all(len(h) == 64 for h in info["sha256"].values())  # per model file
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/classify", "/v1/compress", "/v1/model", "/healthz"} <= set(paths)


def test_classify_normalized_units(client):
    units = real_units()
    r = client.post("/v1/classify", json={"units": units})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["format"] == "units"
    assert [u["id"] for u in body["units"]] == [u["id"] for u in units]
    for u in body["units"]:
        assert u["category"] in CATEGORIES
        assert set(u["scores"]) == set(CATEGORIES)
        assert sum(u["scores"].values()) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("body,fmt,n", [(OPENAI, "openai", 7), (ANTHROPIC, "anthropic", 5)])
def test_classify_provider_bodies(client, body, fmt, n):
    r = client.post("/v1/classify", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["format"] == fmt and len(out["units"]) == n
    assert not any("source" in u for u in out["units"])  # no server paths leak
    kinds = [u["kind"] for u in out["units"]]
    assert "tool_call" in kinds and "tool_result" in kinds


@pytest.mark.parametrize("body,fmt", [(OPENAI, "openai"), (ANTHROPIC, "anthropic")])
def test_compress_answers_in_the_input_format(client, body, fmt):
    req = {**body, "token_limit": 40, "on_must_keep_overflow": "truncate_oldest"}
    r = client.post("/v1/compress", json=req)
    assert r.status_code == 200, r.text
    out = r.json()
    assert set(out) == {"body", "winnow"}  # the provider body holds provider fields only
    sent = out["body"]
    assert sent["model"] == body["model"]  # other request fields carried through
    assert list(sent) == list(body)  # in their order
    validate = validate_openai if fmt == "openai" else validate_anthropic
    assert validate(sent) == []
    w = out["winnow"]
    assert w["format"] == fmt and w["token_limit"] == 40
    assert w["tokens_after"] <= min(40, w["tokens_before"])


@pytest.mark.parametrize("body", [OPENAI, ANTHROPIC])
def test_compress_under_no_pressure_returns_the_body_unchanged(client, body):
    r = client.post("/v1/compress", json={"token_limit": 10**6, **body})
    assert r.status_code == 200, r.text
    assert json.dumps(r.json()["body"]) == json.dumps(body)  # JSON-equal, key order kept


def test_compress_must_keep_overflow_is_a_clear_422_when_asked(client):
    req = {**OPENAI, "token_limit": 5, "on_must_keep_overflow": "error"}
    r = client.post("/v1/compress", json=req)
    assert r.status_code == 422 and "must-keep" in r.json()["detail"]


def test_compress_degrades_gracefully_by_default(client):
    """As the library and the CLI: must-keep units over the limit are summarized, not a 422."""
    r = client.post("/v1/compress", json={**OPENAI, "token_limit": 5})
    assert r.status_code == 200, r.text
    w = r.json()["winnow"]
    assert w["tokens_after"] <= 5 < w["tokens_before"]


@pytest.mark.parametrize("limit", [0.5, "50%", "0.5"])
def test_compress_takes_a_share_of_the_conversation(client, limit):
    units = real_units("copilot.jsonl")
    whole = client.post("/v1/compress", json={"units": units, "token_limit": 10**9}).json()
    before = whole["winnow"]["tokens_before"]
    r = client.post("/v1/compress", json={"units": units, "token_limit": limit})
    assert r.status_code == 200, r.text
    w = r.json()["winnow"]
    assert w["token_limit"] == before // 2  # the share resolved against the tokens as sent
    assert w["tokens_before"] == before and w["tokens_after"] <= before // 2


def test_compress_takes_a_count_as_a_string(client):
    units = real_units("copilot.jsonl")
    r = client.post("/v1/compress", json={"units": units, "token_limit": "300"})
    assert r.status_code == 200, r.text
    assert r.json()["winnow"]["token_limit"] == 300
    assert r.json()["winnow"]["tokens_after"] <= 300


@pytest.mark.parametrize("policy", ["error", "summarize", "summarize_largest", "truncate_oldest"])
@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": "hi"}]},
        {"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]},
        {"units": [{"role": "user", "kind": "text", "text": "hi"}]},
    ],
)
def test_compress_with_nothing_left_is_a_clear_422(client, body, policy):
    """Under a limit that holds nothing, no empty (invalid) request comes back as a 200."""
    r = client.post(
        "/v1/compress", json={**body, "token_limit": 1, "on_must_keep_overflow": policy}
    )
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "limit" in detail and "\n" not in detail


def test_compress_of_a_request_without_a_message_is_a_clear_422(client):
    r = client.post(
        "/v1/compress",
        json={"messages": [{"role": "system", "content": "You are terse."}], "token_limit": 99},
    )
    assert r.status_code == 422 and "user or assistant" in r.json()["detail"]


def test_compress_normalized_units_fits_the_limit(client):
    units = real_units("copilot.jsonl")
    before = client.post("/v1/compress", json={"units": units, "token_limit": 10**9}).json()
    limit = before["winnow"]["tokens_before"] // 2
    req = {"units": units, "token_limit": limit, "on_must_keep_overflow": "truncate_oldest"}
    r = client.post("/v1/compress", json=req)
    assert r.status_code == 200, r.text
    assert r.json()["winnow"]["tokens_after"] <= limit
    assert r.json()["body"]["units"]


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"{not json", "JSON"),
        (b"[1, 2]", "object"),
        (json.dumps({"hello": "world"}).encode(), "units"),
        (json.dumps({"units": [{"role": "wizard", "kind": "text", "text": "x"}]}).encode(), "role"),
        (json.dumps({"units": [{"role": "user", "kind": "text"}]}).encode(), "text"),
        (json.dumps({"messages": "hi"}).encode(), "messages"),
        (json.dumps({"format": "openai", "units": []}).encode(), "messages"),
        (json.dumps({"format": "xml", "messages": []}).encode(), "format"),
        (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), "role"),
    ],
)
def test_malformed_classify_is_a_clear_4xx(client, content, needle):
    r = client.post("/v1/classify", content=content, headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500, r.text
    assert needle.lower() in r.text.lower()


def test_compress_needs_a_positive_token_limit(client):
    bad = [0, -3, "many", 1.5, 0.0, "0%", "-20%", True, None, [30], "30 %%"]
    for extra in [{}] + [{"token_limit": v} for v in bad]:
        r = client.post("/v1/compress", json={**OPENAI, **extra})
        assert r.status_code == 422 and "token_limit" in r.text


def test_bearer_token_and_size_limit(guarded_url):
    with httpx.Client(base_url=guarded_url, timeout=30) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/v1/model").status_code == 401
        assert (
            c.post(
                "/v1/classify", json=OPENAI, headers={"authorization": "Bearer nope"}
            ).status_code
            == 401
        )
        ok = {"authorization": f"Bearer {TOKEN}"}
        assert c.post("/v1/classify", json=OPENAI, headers=ok).status_code == 200
        big = {"units": [{"role": "user", "kind": "text", "text": "x" * 5000}]}
        r = c.post("/v1/classify", json=big, headers=ok)
        assert r.status_code == 413 and "4096" in r.text

        def chunks():  # no content-length: the limit holds on the streamed body too
            yield b'{"units": [{"role": "user", "kind": "text", "text": "'
            for _ in range(10):
                yield b"y" * 1000
            yield b'"}]}'

        r = c.post(
            "/v1/classify", content=chunks(), headers={**ok, "content-type": "application/json"}
        )
        assert r.status_code == 413


@pytest.mark.slow
def test_load_500_requests_over_4_threads(client, url):
    bodies = [OPENAI, ANTHROPIC, {"units": real_units("claude_code_small.jsonl")}]
    n, threads = 500, 4

    def worker(k: int) -> list[tuple[int, float]]:
        out = []
        with httpx.Client(base_url=url, timeout=60) as c:
            for i in range(k, n, threads):
                t0 = time.perf_counter()
                r = c.post("/v1/classify", json=bodies[i % len(bodies)])
                out.append((r.status_code, time.perf_counter() - t0))
        return out

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        results = [x for part in pool.map(worker, range(threads)) for x in part]
    wall = time.perf_counter() - t0
    latencies = sorted(s for _, s in results)
    assert len(results) == n and all(code == 200 for code, _ in results)
    p99 = latencies[int(0.99 * (n - 1))]
    print(
        f"\nload test: {n} classify requests over {threads} threads in {wall:.1f}s: "
        f"{n / wall:.0f} req/s, p50 {statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
    )


def test_serve_with_a_bad_model_is_one_line(tmp_path, capsys):
    from winnow.cli import main

    assert main(["serve", "--model", str(tmp_path), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert str(tmp_path) in err and len(err.strip().splitlines()) == 1
