"""The service under hostile clients: any JSON body, bad field types, no credentials, slow bodies."""

from __future__ import annotations

import json
import socket
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_service import OPENAI, TOKEN, Server  # noqa: E402

from winnow.data.schema import CATEGORIES, KINDS, ROLES  # noqa: E402
from winnow.serving.service import ServiceConfig  # noqa: E402

UNIT = {"role": "user", "kind": "text", "text": "Add rate limiting to the login endpoint."}


@pytest.fixture(scope="module")
def url():
    with Server(ServiceConfig()) as u:
        yield u


@pytest.fixture(scope="module")
def client(url):
    with httpx.Client(base_url=url, timeout=30) as c:
        yield c


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("index", -1),
        ("index", "x"),
        ("index", {}),
        ("index", 10**400),
        ("index", 1e400),
        ("index", "²"),
        ("tool_name", 5),
        ("call_id", []),
        ("is_error", "yes"),
        ("scores", "zz"),
        ("scores", {"error": "high"}),
        ("scores", {"error": 1e400}),
        ("session_id", [1]),
        ("id", 7),
        ("text", None),
        ("role", "wizard"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/classify", "/v1/compress"])
def test_bad_field_types_are_a_422_naming_the_field(client, path, field, value):
    body = {"units": [UNIT, {**UNIT, field: value}], "token_limit": 50}
    # 10**400 goes as a 401-digit literal, 1e400 as Infinity (what Python clients send)
    content = json.dumps(body, allow_nan=True).encode()
    r = client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    if b"Infinity" in content:  # not JSON, though Python writes and reads it
        assert "Infinity" in detail
    else:
        assert "units[1]" in detail and field in detail, detail


def json_values(max_leaves: int = 12):
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(10**30), max_value=10**30)
        | st.floats()
        | st.sampled_from([float("nan"), float("inf"), -float("inf"), 10**400, -1, 2**63])
        | st.text(max_size=30)
    )
    return st.recursive(
        scalars,
        lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=10), ch, max_size=4),
        max_leaves=max_leaves,
    )


def field(plausible):
    """A plausible value of a field most of the time, any JSON value otherwise."""
    return st.one_of(plausible, plausible, json_values(4))


UNITS = st.fixed_dictionaries(
    {},
    optional={
        "role": field(st.sampled_from(ROLES)),
        "kind": field(st.sampled_from(KINDS)),
        "text": field(st.text(max_size=200)),
        "index": field(st.integers(min_value=-5, max_value=2**40)),
        "id": field(st.text(max_size=10)),
        "session_id": field(st.text(max_size=10)),
        "tool_name": field(st.sampled_from(["Bash", "Read", "Edit", None])),
        "call_id": field(st.sampled_from(["c1", "c2", None])),
        "is_error": field(st.booleans()),
        "category": field(st.sampled_from(CATEGORIES)),
        "scores": field(st.dictionaries(st.sampled_from(CATEGORIES), st.floats(0, 1))),
    },
)
BLOCKS = st.fixed_dictionaries(
    {"type": field(st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image"]))},
    optional={
        "text": field(st.text(max_size=100)),
        "id": field(st.sampled_from(["t1", "t2"])),
        "tool_use_id": field(st.sampled_from(["t1", "t2"])),
        "name": field(st.sampled_from(["Bash", "Read"])),
        "input": json_values(6),
        "content": field(st.text(max_size=100)),
        "thinking": field(st.text(max_size=50)),
        "is_error": field(st.booleans()),
    },
)
MESSAGES = st.fixed_dictionaries(
    {
        "role": field(st.sampled_from(["user", "assistant", "system", "tool"])),
        "content": field(st.text(max_size=200) | st.lists(BLOCKS, max_size=3)),
    },
    optional={
        "tool_calls": json_values(6),
        "tool_call_id": field(st.sampled_from(["t1", "t2"])),
    },
)
BODIES = st.one_of(
    json_values(),
    st.fixed_dictionaries(
        {},
        optional={
            "format": field(st.sampled_from(["units", "openai", "anthropic"])),
            "units": field(st.lists(UNITS, max_size=5)),
            "messages": field(st.lists(MESSAGES, max_size=5)),
            "system": field(st.text(max_size=50)),
            "token_limit": field(
                st.integers(min_value=-10, max_value=10**6)
                | st.floats(-1, 2)
                | st.sampled_from(["30%", "0.3", "500", "150%", "0%", "x"])
            ),
            "on_must_keep_overflow": field(
                st.sampled_from(["summarize", "error", "summarize_largest", "truncate_oldest"])
            ),
            "model": json_values(3),
        },
    ),
)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=BODIES, path=st.sampled_from(["/v1/classify", "/v1/compress"]))
@example(body=float("nan"), path="/v1/classify")
@example(body={"units": [{**UNIT, "scores": {"error": float("inf")}}]}, path="/v1/compress")
@example(
    body={"messages": [{"role": "user", "content": "x"}], "model": 10**400}, path="/v1/compress"
)
def test_the_service_never_answers_500_to_any_json_body(client, body, path):
    content = json.dumps(body, allow_nan=True).encode()
    r = client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code < 500, (r.status_code, r.text[:300])
    if r.status_code >= 400:
        detail = r.json()["detail"]
        assert detail  # a reason, as a string or FastAPI's list of field errors


def raw_request(port: int, head: bytes, body: bytes = b"", timeout: float = 10.0) -> bytes:
    """Send a request head and part of a body on a raw socket; the response (till close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head + body)
        chunks = []
        while True:
            try:
                data = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                break
            chunks.append(data)
            if b"\r\n\r\n" in b"".join(chunks) and b'"}' in b"".join(chunks):
                break
        return b"".join(chunks)


def _head(length: int, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{auth}\r\n"
    ).encode()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_auth_is_checked_before_the_body_is_read():
    with Server(ServiceConfig(token=TOKEN)) as u:
        t0 = time.monotonic()
        # a 7 MiB body is declared and not one byte of it is sent: the 401 comes at once
        answer = raw_request(_port(u), _head(7 << 20, token="wrong"))
        assert answer.startswith(b"HTTP/1.1 401") and time.monotonic() - t0 < 5
        answer = raw_request(_port(u), _head(7 << 20))
        assert answer.startswith(b"HTTP/1.1 401")
        ok = httpx.post(
            f"{u}/v1/classify", json=OPENAI, headers={"authorization": f"Bearer {TOKEN}"}
        )
        assert ok.status_code == 200


def test_a_stalled_body_times_out_and_uploads_are_capped():
    config = ServiceConfig(body_timeout_s=1.0, max_uploads=2)
    with Server(config) as u:
        port = _port(u)
        stalled = []
        for _ in range(2):  # two uploads that send half their body, then nothing
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(_head(100_000) + b"{" * 50_000)
            stalled.append(s)
        time.sleep(0.3)
        t0 = time.monotonic()
        answer = raw_request(port, _head(10), b'{"units":[')
        assert answer.startswith(b"HTTP/1.1 503") and b"retry-after" in answer.lower()
        assert time.monotonic() - t0 < 1.0  # refused at once, not queued
        assert httpx.get(f"{u}/healthz").status_code == 200  # no body: never refused
        for s in stalled:  # each stalled upload gets its 408 once the timeout has passed
            s.settimeout(5)
            answer = s.recv(65536)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
            s.close()
        assert time.monotonic() - t0 < 4
        r = httpx.post(f"{u}/v1/classify", json=OPENAI, timeout=30)  # and the service goes on
        assert r.status_code == 200


def test_bodies_being_received_share_one_memory_budget():
    mib = 1024 * 1024
    config = ServiceConfig(max_bytes=mib, max_buffered_bytes=2 * mib, max_uploads=10)
    with Server(config) as u:
        port, stalled = _port(u), []
        for _ in range(2):  # two uploads of 0.9 MiB each, stalled before their end
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(_head(mib - 10) + b"x" * (9 * mib // 10))
            stalled.append(s)
        time.sleep(0.5)
        # a third would take the total past 2 MiB: refused as soon as it does
        answer = raw_request(port, _head(mib - 10), b"x" * (9 * mib // 10))
        assert answer.startswith(b"HTTP/1.1 503"), answer[:80]
        for s in stalled:
            s.close()
        time.sleep(0.3)  # their bytes are freed with them: a body as large goes through
        big = {"units": [{**UNIT, "text": "x" * (9 * mib // 10)}]}
        r = httpx.post(f"{u}/v1/classify", json=big, timeout=30)
        assert r.status_code == 200, r.text[:200]
