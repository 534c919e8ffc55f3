"""`winnow proxy` with the official SDKs, against a loopback stand-in that validates like the APIs."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from proxy_upstream import Turn, Upstream  # noqa: E402

from winnow.serving.proxy import ProxyConfig, ProxyServer, resolve_budget  # noqa: E402
from winnow.serving.proxy_audit import read_audit, report  # noqa: E402
from winnow.serving.proxy_compress import default_compressor  # noqa: E402
from winnow.serving.proxy_state import Rewriter, RewriterConfig  # noqa: E402

MODEL = "claude-sonnet-4-6"
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {"name": "bash", "parameters": TOOLS[0]["input_schema"]},
    }
]
LOG_LINE = "PASSED tests/test_api.py::test_endpoint_{i} in 0.{i:02d}s (worker gw{w})\n"


@pytest.fixture(scope="module")
def compressor():
    return default_compressor()


def proxy(up: Upstream, compressor: Any, budget: int, audit: Path | None = None, **kw: Any):
    rewriter = Rewriter(RewriterConfig(budget=budget, **kw), compressor=compressor)
    config = ProxyConfig(upstream=up.base_url, port=0, audit_dir=audit)
    return ProxyServer(config, rewriter=rewriter)


def tool_log(i: int) -> str:
    return "".join(LOG_LINE.format(i=i * 7 + k, w=k % 4) for k in range(40))


class Agent:
    """An agent that runs the tests until it has made `steps` calls, thinking as it goes.

    It counts requests per conversation (its `x-conv` header), not messages: the proxy may
    have compressed them away."""

    def __init__(self, steps: int = 12) -> None:
        self.steps = steps
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, rec) -> Turn:
        conv = rec.headers.get("x-conv", "")
        with self.lock:
            n = self.seen[conv] = self.seen.get(conv, -1) + 1
        if n >= self.steps:
            return Turn(text="All tests pass now.", thinking=f"done after {n} steps")
        calls = [("Bash", {"command": f"pytest -x tests/test_api.py -k case{n}"})]
        return Turn(text=f"Step {n}: running the tests.", tool_calls=calls, thinking=f"step {n}")


def replay_anthropic(client, *, stream: bool, steps: int = 14, beta: bool = False):
    """Drive a tool loop as an agent harness does: append each answer and its tool results."""
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": "Fix the failing API tests in tests/test_api.py without touching the "
            "database schema; keep the public endpoints unchanged.",
        }
    ]
    sent = []
    api = client.beta.messages if beta else client.messages
    for _ in range(steps):
        kw: dict[str, Any] = dict(model=MODEL, max_tokens=1024, messages=messages, tools=TOOLS)
        if beta:  # what Claude Code sends: POST /v1/messages?beta=true
            kw["extra_query"] = {"beta": "true"}
        if stream:
            with api.stream(**kw) as s:
                msg = s.get_final_message()
        else:
            msg = api.create(**kw)
        sent.append([dict(m) for m in messages])
        blocks = [b.model_dump(exclude_none=True) for b in msg.content]
        for b in blocks:
            b.pop("citations", None)
        messages = [*messages, {"role": "assistant", "content": blocks}]
        uses = [b for b in blocks if b["type"] == "tool_use"]
        if not uses:
            break
        results = [
            {"type": "tool_result", "tool_use_id": b["id"], "content": tool_log(len(messages))}
            for b in uses
        ]
        messages.append({"role": "user", "content": results})
    return messages, sent


def encoded(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def test_budget_from_window_and_threshold():
    assert resolve_budget(None, 200_000, environ={}) == 80_000  # HARNESS_CTX_THRESHOLD 40
    assert resolve_budget(None, 200_000, environ={"HARNESS_CTX_THRESHOLD": "25"}) == 50_000
    assert resolve_budget("30%", 100_000) == 30_000
    assert resolve_budget("12000", 100_000) == 12_000
    for bad in ("0", "-5", "150%", "x"):
        with pytest.raises(ValueError):
            resolve_budget(bad, 100_000)


def recording_client() -> tuple[Any, list[Any]]:
    """An httpx client for an SDK that keeps every request it sends."""
    sent: list[Any] = []
    hook = {"request": [lambda r: sent.append((r.read(), dict(r.headers)))]}
    try:  # recent SDKs speak httpx2, older ones httpx
        import httpx2 as client_httpx
    except ImportError:
        client_httpx = httpx
    return client_httpx.Client(event_hooks=hook), sent


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_under_budget_goes_byte_identical(compressor, stream, tmp_path):
    with Upstream(Agent()) as up, proxy(up, compressor, 10**6, tmp_path) as px:
        http, sdk_sent = recording_client()
        client = anthropic.Anthropic(
            base_url=px.base_url,
            api_key="sk-test",
            max_retries=0,
            default_headers={"x-custom": "kept"},
            http_client=http,
        )
        replay_anthropic(client, stream=stream, steps=3, beta=True)
        assert not up.problems()
        assert [r.raw for r in up.requests] == [raw for raw, _ in sdk_sent]  # byte for byte
        for rec, (_raw, headers) in zip(up.requests, sdk_sent):
            assert rec.query == "beta=true"
            for k, v in headers.items():  # credentials and all, but the connection's own
                if k.lower() not in ("host", "connection"):
                    assert rec.headers[k.lower()] == v
            assert "sk-test" in rec.headers.get("x-api-key", rec.headers.get("authorization"))
            assert rec.headers["x-custom"] == "kept"
    audit = (tmp_path / "proxy.audit.jsonl").read_text()
    assert "sk-test" not in audit  # credentials are never written
    assert {r["action"] for r in read_audit(tmp_path)} == {"passthrough"}


def test_streamed_bytes_pass_through_as_sent_as_they_come(compressor):
    turn = Turn(text="x" * 160, thinking="plan", chunk_chars=8, chunk_delay=0.05)  # about 1 s
    with Upstream(lambda r: turn) as up, proxy(up, compressor, 10**6) as px:
        body = {"model": MODEL, "max_tokens": 64, "stream": True}
        body["messages"] = [{"role": "user", "content": "hi"}]
        with httpx.Client() as h:
            with h.stream("POST", px.base_url + "/v1/messages", json=body) as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                assert r.headers["request-id"].startswith("req_")
                t0 = time.monotonic()
                chunks = [(time.monotonic() - t0, c) for c in r.iter_raw()]
        got = b"".join(c for _t, c in chunks)
        assert got == up.requests[-1].sent and got.count(b"content_block_delta") > 20
        first_text = next(t for t, c in chunks if b"text_delta" in c)
        assert first_text < chunks[-1][0] - 0.5  # relayed as it came, not at the end


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_over_budget_compressed_valid_and_prefix_stable(compressor, stream, tmp_path):
    with Upstream(Agent(20)) as up, proxy(up, compressor, 6_000, tmp_path) as px:
        client = anthropic.Anthropic(base_url=px.base_url, api_key="sk-test", max_retries=0)
        final, sent = replay_anthropic(client, stream=stream, steps=21)
        assert final[-1]["content"][-1]["text"] == "All tests pass now."
        assert not up.problems()  # pairs, roles, signed thinking of the last turn, <= 4 markers
    records = list(read_audit(tmp_path))
    actions = [r["action"] for r in records]
    assert actions[0] == "passthrough" and "compact" in actions and "reuse" in actions
    # older thinking is left out of the compressed history whole, and the audit says so
    assert all(r["dropped_blocks"]["thinking"] > 0 for r in records if r["action"] == "compact")
    for rec, req, client_msgs in zip(records, up.requests, sent):
        assert rec["tokens_out"] <= 6_000 or rec["action"] == "passthrough"
        if rec["action"] == "passthrough":
            assert req.body["messages"] == client_msgs
            continue
        assert rec["tokens_out"] < rec["tokens_in"]
        assert req.body["messages"][0] == client_msgs[0]  # the task, kept: as it came
        # the tail (the last assistant turn on) goes as the client sent it, thinking included
        tail = client_msgs[rec["covered"] :]
        assert req.body["messages"][-len(tail) :] == tail
        assert tail[0]["role"] == "assistant" and tail[0]["content"][0]["type"] == "thinking"
    # requests that reuse a prefix start with its exact bytes, and the stand-in reads them cached
    pairs = 0
    for i in range(1, len(records)):
        a, b = records[i - 1], records[i]
        if b["action"] != "reuse" or b["prefix_hash"] != a.get("prefix_hash"):
            continue
        first_tail = encoded(sent[i - 1][a["covered"]])
        cut = up.requests[i - 1].raw.index(first_tail)
        assert up.requests[i].raw[:cut] == up.requests[i - 1].raw[:cut]
        if cut // 4 > 1024 + 64:  # the stand-in's minimum cacheable length, like the API's
            assert b["usage"]["cache_read_input_tokens"] >= cut // 4 - 64
            pairs += 1
    assert pairs >= 2
    # one cache breakpoint closes the compressed prefix
    marked = [r for r in up.requests if b'"cache_control"' in r.raw]
    assert marked and all(r.raw.count(b'"cache_control"') <= 4 for r in up.requests)


def openai_loop(client, *, stream: bool, steps: int = 10):
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Never push to main."},
        {"role": "user", "content": "Make the API tests pass; do not change the schema."},
    ]
    for _ in range(steps):
        kw = dict(model="gpt-4.1", messages=messages, tools=OPENAI_TOOLS)
        if stream:
            text, calls = "", {}
            for chunk in client.chat.completions.create(stream=True, **kw):
                for ch in chunk.choices:
                    text += ch.delta.content or ""
                    for c in ch.delta.tool_calls or ():
                        calls[c.index] = c.model_dump(exclude_none=True)
            msg = {"role": "assistant", "content": text or None}
            if calls:
                msg["tool_calls"] = [
                    {k: v for k, v in c.items() if k != "index"} for c in calls.values()
                ]
        else:
            out = client.chat.completions.create(**kw).choices[0].message
            msg = out.model_dump(exclude_none=True)
            msg.pop("refusal", None)
        messages.append(msg)
        if not msg.get("tool_calls"):
            break
        for c in msg["tool_calls"]:
            messages.append(
                {"role": "tool", "tool_call_id": c["id"], "content": tool_log(len(messages))}
            )
    return messages


def openai_script() -> Any:
    n = iter(range(100))

    def answer(rec) -> Turn:
        if next(n) >= 8:
            return Turn(text="Done: the tests pass.")
        return Turn(text="", tool_calls=[("bash", {"command": "pytest -k api"})])

    return answer


@pytest.mark.parametrize("stream", [False, True])
def test_openai_through_the_proxy(compressor, stream, tmp_path):
    with Upstream(openai_script()) as up, proxy(up, compressor, 2_000, tmp_path) as px:
        client = openai.OpenAI(base_url=px.base_url + "/v1", api_key="sk-test", max_retries=0)
        final = openai_loop(client, stream=stream)
        assert final[-1]["content"] == "Done: the tests pass."
        assert not up.problems()
        assert up.requests[-1].headers["authorization"] == "Bearer sk-test"
    records = list(read_audit(tmp_path))
    assert records[0]["action"] == "passthrough"
    assert up.requests[0].raw.startswith(b"{") and "compact" in [r["action"] for r in records]
    for req in up.requests:  # the system message stays first and whole
        assert req.body["messages"][0] == final[0]


def test_upstream_errors_pass_through_unchanged(compressor, tmp_path):
    turns = [Turn(status=529, text="Overloaded"), Turn(status=429, text="slow down")]
    with Upstream(turns) as up, proxy(up, compressor, 10**6, tmp_path) as px:
        body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client() as h:
            r = h.post(px.base_url + "/v1/messages", json=body)
            assert r.status_code == 529 and r.content == up.requests[-1].sent
            assert r.headers["x-stand-in"] == "yes"
        client = openai.OpenAI(base_url=px.base_url + "/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.RateLimitError) as e:
            client.chat.completions.create(
                model="gpt-4.1", messages=[{"role": "user", "content": "x"}]
            )
        assert e.value.body["message"] == "slow down"
    statuses = [r["status"] for r in read_audit(tmp_path)]
    assert statuses == [529, 429]


class Broken:
    """A compressor whose classifier fails: the proxy must send the request as it came."""

    def __init__(self, real):
        self.counter = real.counter

    def compress(self, *a, **kw):
        raise RuntimeError("classifier exploded")


def test_fail_open_on_compression_error(compressor, tmp_path):
    with Upstream(Agent()) as up:
        rewriter = Rewriter(RewriterConfig(budget=1_500), compressor=Broken(compressor))
        config = ProxyConfig(upstream=up.base_url, port=0, audit_dir=tmp_path)
        with ProxyServer(config, rewriter=rewriter) as px:
            client = anthropic.Anthropic(base_url=px.base_url, api_key="k", max_retries=0)
            final, sent = replay_anthropic(client, stream=True, steps=6)
        assert len(final) == 13 and len(up.requests) == 6 and not up.problems()
        for req, msgs in zip(up.requests, sent):
            assert req.body["messages"] == msgs
    records = list(read_audit(tmp_path))
    assert [r["action"] for r in records][-1] == "failed_open"
    assert "classifier exploded" in records[-1]["error"]


def test_other_paths_and_count_tokens(compressor):
    with Upstream() as up, proxy(up, compressor, 10**6) as px, httpx.Client() as h:
        r = h.get(px.base_url + "/v1/models?limit=5", headers={"x-api-key": "k"})
        assert r.status_code == 200 and r.json()["data"][0]["id"] == "claude-test"
        assert up.requests[-1].query == "limit=5" and up.requests[-1].headers["x-api-key"] == "k"
        assert h.get(px.base_url + "/nope").status_code == 404
        client = anthropic.Anthropic(base_url=px.base_url, api_key="k", max_retries=0)
        n = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert n.input_tokens > 0 and up.requests[-1].path == "/v1/messages/count_tokens"


def test_upstream_down_and_timeout(compressor, tmp_path):
    with Upstream(lambda r: Turn(stall=3.0)) as up:
        config = ProxyConfig(upstream=up.base_url, port=0, timeout_s=0.5, audit_dir=tmp_path)
        body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        with (
            ProxyServer(config, rewriter=Rewriter(compressor=compressor)) as px,
            httpx.Client() as h,
        ):
            r = h.post(px.base_url + "/v1/messages", json=body, timeout=10)
            assert r.status_code == 504 and r.json()["error"]["type"] == "timeout_error"
    dead = ProxyConfig(upstream="http://127.0.0.1:9", port=0, connect_timeout_s=1)
    with ProxyServer(dead, rewriter=Rewriter(compressor=compressor)) as px, httpx.Client() as h:
        r = h.post(px.base_url + "/v1/messages", json=body, timeout=10)
        assert r.status_code == 502 and r.json()["type"] == "error"


def test_many_concurrent_conversations_bounded_state(compressor):
    with Upstream(Agent()) as up, proxy(up, compressor, 2_500, max_prefixes=4) as px:
        errors: list[BaseException] = []

        def one(k: int) -> None:
            try:
                client = anthropic.Anthropic(
                    base_url=px.base_url,
                    api_key="k",
                    max_retries=0,
                    default_headers={"x-conv": str(k)},
                )
                msgs = [{"role": "user", "content": f"Conversation {k}: fix test case {k}."}]
                for _ in range(7):
                    m = client.messages.create(
                        model=MODEL, max_tokens=64, messages=msgs, tools=TOOLS
                    )
                    blocks = [b.model_dump(exclude_none=True) for b in m.content]
                    msgs = [*msgs, {"role": "assistant", "content": blocks}]
                    msgs.append(
                        {
                            "role": "user",
                            "content": [
                                {
                                    "type": "tool_result",
                                    "tool_use_id": b["id"],
                                    "content": tool_log(k),
                                }
                                for b in blocks
                                if b["type"] == "tool_use"
                            ],
                        }
                    )
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=one, args=(k,)) for k in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors and not up.problems()
        assert len(up.requests) == 12 * 7
        assert px.proxy.rewriter.prefixes() <= 4


def test_report_prints_savings(compressor, tmp_path, capsys):
    from winnow.cli import main

    with Upstream(Agent(20)) as up, proxy(up, compressor, 6_000, tmp_path) as px:
        client = anthropic.Anthropic(base_url=px.base_url, api_key="sk-test", max_retries=0)
        replay_anthropic(client, stream=True, steps=21)
    (tmp_path / "proxy.audit.jsonl").open("a").write("{not json\n")
    rows = report(read_audit(tmp_path))
    assert len(rows) == 1 and rows[0].saved > 0.3 and rows[0].cache_read_share > 0.2
    assert main(["proxy", "report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert rows[0].conversation in out and f"{rows[0].saved:.0%}" in out
    assert "proxy.audit.jsonl:" in out and "not JSON" in out


def test_cli_checks_and_loopback_warning(monkeypatch, capsys):
    from winnow.cli import main

    assert main(["proxy"]) == 1
    assert "--upstream" in capsys.readouterr().err
    assert main(["proxy", "--upstream", "ftp://x"]) == 1
    assert main(["proxy", "--upstream", "http://x", "--budget", "0"]) == 1
    assert "--budget" in capsys.readouterr().err
    assert main(["proxy", "--upstream", "http://x", "--port", "65536"]) == 1
    assert "--port" in capsys.readouterr().err
    import uvicorn

    served = {}

    def run(server, sockets):  # serves nothing: the socket is bound, then closed
        served.update(host=server.config.host, port=sockets[0].getsockname()[1])
        sockets[0].close()

    monkeypatch.setattr(uvicorn.Server, "run", run)
    assert (
        main(["proxy", "--upstream", "http://127.0.0.1:1", "--host", "0.0.0.0", "--port", "0"]) == 0
    )
    err = capsys.readouterr().err
    assert "warning: listening on 0.0.0.0" in err
    assert served["host"] == "0.0.0.0" and served["port"] > 0
    assert f"http://0.0.0.0:{served['port']} ->" in err  # the port taken, not 0
    assert main(["proxy", "--upstream", "http://127.0.0.1:1", "--port", "0"]) == 0
    assert "warning" not in capsys.readouterr().err
    with socket.socket() as taken:  # a port in use: one line, exit 1
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        assert main(["proxy", "--upstream", "http://127.0.0.1:1", "--port", port]) == 1
        err = capsys.readouterr().err
        assert port in err and len(err.strip().splitlines()) == 1


def test_a_stream_that_stalls_ends_with_the_apis_error_event(compressor, tmp_path):
    stall = Turn(text="x" * 64, chunk_chars=8, chunk_delay=1.5)
    with Upstream(lambda r: stall) as up:
        config = ProxyConfig(upstream=up.base_url, port=0, timeout_s=0.4, audit_dir=tmp_path)
        with ProxyServer(config, rewriter=Rewriter(compressor=compressor)) as px:
            body = {"model": MODEL, "max_tokens": 8, "stream": True}
            body["messages"] = [{"role": "user", "content": "hi"}]
            with httpx.Client(timeout=10) as h:
                got = h.post(px.base_url + "/v1/messages", json=body).content
    assert got.startswith(b"event: message_start")
    assert got.rstrip().endswith(b"}") and b"event: error" in got and b"timed out" in got
    (rec,) = read_audit(tmp_path)
    assert rec["error"] == "upstream read timed out"


def test_the_winnow_proxy_command_serves(tmp_path):
    import re
    import subprocess
    import sys

    with Upstream(Agent()) as up:
        cmd = [sys.executable, "-m", "winnow.cli", "proxy", "--upstream", up.base_url]
        cmd += [
            "--port",
            "0",  # any free port: the first line says which
            "--budget",
            "50%",
            "--window",
            "8000",
            "--audit",
            str(tmp_path),
        ]
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stderr is not None
            first = proc.stderr.readline()
            port = re.match(r"winnow proxy: http://127\.0\.0\.1:(\d+) -> ", first)
            assert port and int(port.group(1)) > 0, first
            url = f"http://127.0.0.1:{port.group(1)}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(url + "/v1/models", timeout=1)
                    break
                except httpx.TransportError:
                    assert proc.poll() is None and time.monotonic() < deadline
                    time.sleep(0.2)
            client = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0)
            final, _ = replay_anthropic(client, stream=True, steps=13)
            assert final[-1]["content"][-1]["text"] == "All tests pass now."
        finally:
            proc.terminate()
            err = proc.communicate(timeout=30)[1]
    assert "budget 4,000 tokens" in first and "sk-test" not in first + err
    assert not up.problems()
    assert {"compact", "reuse"} <= {r["action"] for r in read_audit(tmp_path)}


def test_report_reads_an_audit_with_a_bom_a_deep_line_and_a_cut_end(tmp_path, capsys):
    """As files edited on Windows, or left by a proxy killed mid-write, hold them."""
    from winnow.cli import main

    rec = {"type": "request", "conversation": "c1", "action": "compact"}
    lines = [json.dumps({**rec, "tokens_in": 1000, "tokens_out": 400}) for _ in range(2)]
    path = tmp_path / "proxy.audit.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    path.write_bytes(
        b"\xef\xbb\xbf" + "\n".join([lines[0], deep, lines[1], lines[1][:30]]).encode()
    )
    problems: list[str] = []
    rows = report(read_audit(tmp_path, problems))
    assert [(r.requests, r.tokens_in, r.tokens_out) for r in rows] == [(2, 2000, 800)]
    assert [p.split(": ")[0] for p in problems] == [f"{path}:2", f"{path}:4"]
    assert main(["proxy", "report", str(tmp_path)]) == 0
    assert "60%" in capsys.readouterr().out
