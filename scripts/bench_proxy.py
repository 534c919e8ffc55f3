"""What `winnow proxy` costs and saves: added latency, tokens sent, cache reads. Prints figures.

    python scripts/bench_proxy.py [--traces ../shared/traces] [--requests 60] [--quick]

Latency: a growing Claude Code conversation (real sessions from the traces, rendered as
Anthropic requests) at about 50K and 200K tokens of history, each request posted directly to a
trivial loopback upstream (it reads the body and answers a canned message, so its own time is
the same either way) and through the proxy, alternately; the added latency is the difference,
request by request, p50 / p99. Three proxies: the budget above the history (every request goes
through unchanged), the budget at 40% of it with the prefix memo (the proxy as shipped), and
the same with the memo off (every request compressed from scratch: the baseline the memo
replaces). The proxy's own figure (`added_ms` in its audit: parse, plan, serialize) is beside.

Savings: the largest real Claude Code session replayed request by request (each ends at a user
message, with a breakpoint on its newest block as Claude Code places it) to the test stand-in
(tests/proxy_upstream.py: it validates every request and reports cache reads as the longest
prefix shared byte for byte with an earlier request, from 1,024 tokens), directly and through
the proxy at the default budget (40% of a 200K window). Tokens are the stand-in's (bytes / 4);
cost is in base-input-token equivalents at Anthropic's 5-minute cache prices (read 0.1,
write 1.25).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402

from winnow.data.readers import read_paths  # noqa: E402
from winnow.serving.proxy import ProxyConfig, ProxyServer  # noqa: E402
from winnow.serving.proxy_audit import read_audit, report, usage_figures  # noqa: E402
from winnow.serving.proxy_compress import default_compressor  # noqa: E402
from winnow.serving.proxy_state import Rewriter, RewriterConfig  # noqa: E402
from winnow.serving.render import to_anthropic  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
EPHEMERAL = {"type": "ephemeral"}
ANSWER = json.dumps(
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
).encode()


class _Trivial(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        import socket

        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *a: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)


def claude_sessions(traces: Path, n: int) -> list[Path]:
    """The `n` largest Claude Code sessions of the traces (by bytes)."""
    out = []
    for p in sorted(traces.rglob("full.jsonl"), key=lambda p: p.stat().st_size, reverse=True):
        first = next(iter(read_paths([p])), None)
        if first is not None and first.extra.get("format") == "claude_code":
            out.append(p)
            if len(out) == n:
                break
    return out


def body_of(path: Path) -> dict[str, Any]:
    units = list(read_paths([path]))
    body = to_anthropic(units, tools=True)
    body.update(model="claude-sonnet-4-6", max_tokens=4096)
    return body


def growing(messages: list[dict[str, Any]], counter: Any, start: int, n: int) -> list[list]:
    """`n` requests of a growing conversation whose first holds about `start` tokens: each ends
    at a user message, with the newest block marked for caching, as Claude Code sends it."""
    tokens, k = 0, 0
    from winnow.serving.proxy_compress import message_tokens

    while k < len(messages) and tokens < start:
        tokens += message_tokens("anthropic", messages[k], counter)
        k += 1
    ends = [i + 1 for i in range(k - 1, len(messages)) if messages[i]["role"] == "user"]
    return [_marked(messages[:e]) for e in ends[:n]]


def _marked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    last = messages[-1]
    content = list(last["content"])
    content[-1] = {**content[-1], "cache_control": EPHEMERAL}
    return [*messages[:-1], {**last, "content": content}]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def latency(args: argparse.Namespace, compressor: Any) -> None:
    sessions = [body_of(p) for p in claude_sessions(args.traces, 3)]
    messages: list[dict[str, Any]] = []
    for b in sessions:  # one long conversation: the sessions one after another
        for m in b["messages"]:
            if messages and messages[-1]["role"] == m["role"]:
                messages[-1] = {**m, "content": messages[-1]["content"] + m["content"]}
            else:
                messages.append(m)
    base = {k: v for k, v in sessions[0].items() if k != "messages"}
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Trivial)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    up_url = f"http://127.0.0.1:{upstream.server_address[1]}"
    print("added latency per request (ms; through the proxy minus direct, same requests)")
    print(f"{'history':>8} {'proxy':<34} {'p50':>7} {'p99':>7} {'own p50':>8} {'own p99':>8}")
    for size in (50_000, 200_000):
        reqs = growing(messages, compressor.counter, size, args.requests)
        bodies = [json.dumps({**base, "messages": m}).encode() for m in reqs]
        variants = [
            ("budget above it: unchanged", 10**7, 256),
            ("budget 40%, prefix memo (shipped)", int(size * 0.4), 256),
            ("budget 40%, memo off (baseline)", int(size * 0.4), 0),
        ]
        for name, budget, memo in variants:
            n = len(bodies) if memo else min(len(bodies), args.requests_no_memo)
            audit = Path(tempfile.mkdtemp())
            rewriter = Rewriter(
                RewriterConfig(budget=budget, max_prefixes=memo), compressor=compressor
            )
            config = ProxyConfig(upstream=up_url, port=0, audit_dir=audit)
            added: list[float] = []
            with ProxyServer(config, rewriter=rewriter) as px, httpx.Client(timeout=600) as h:
                for i, data in enumerate(bodies[:n]):
                    order = [up_url, px.base_url] if i % 2 else [px.base_url, up_url]
                    took = {}
                    for url in order:
                        t = time.perf_counter()
                        r = h.post(url + "/v1/messages", content=data)
                        took[url] = (time.perf_counter() - t) * 1000
                        assert r.status_code == 200, r.text[:200]
                    added.append(took[px.base_url] - took[up_url])
            own = [r["added_ms"] for r in read_audit(audit)]
            print(
                f"{size // 1000:>7}K {name:<34} {pct(added, 0.5):7.1f} {pct(added, 0.99):7.1f} "
                f"{pct(own, 0.5):8.1f} {pct(own, 0.99):8.1f}   ({n} requests)"
            )
    upstream.shutdown()


def savings(args: argparse.Namespace, compressor: Any) -> None:
    from proxy_upstream import Turn, Upstream

    path = claude_sessions(args.traces, 1)[0]
    body = body_of(path)
    reqs = growing(body["messages"], compressor.counter, 0, 10**6)
    if args.quick:
        reqs = reqs[::3]
    base = {k: v for k, v in body.items() if k != "messages"}
    print(
        f"\nreplayed session: {path.relative_to(args.traces)} ({len(reqs)} requests, "
        f"{len(body['messages'])} messages); stand-in tokens; cost at Anthropic's cache prices"
    )
    print(
        f"{'':<30} {'input tokens':>13} {'cache reads':>12} {'share':>6} {'cost':>12} {'invalid':>8}"
    )
    for name in ("direct", *(f"proxy, budget {b:,}" for b in args.budgets)):
        with Upstream(lambda rec: Turn(text="ok")) as up:
            url = up.base_url
            px = None
            if name != "direct":
                audit = Path(tempfile.mkdtemp())
                budget = int(name.rsplit(" ", 1)[1].replace(",", ""))
                rewriter = Rewriter(RewriterConfig(budget=budget), compressor=compressor)
                px = ProxyServer(
                    ProxyConfig(upstream=url, port=0, audit_dir=audit), rewriter=rewriter
                ).start()
                url = px.base_url
            with httpx.Client(timeout=600) as h:
                for m in reqs:
                    r = h.post(url + "/v1/messages", json={**base, "messages": m})
                    assert r.status_code == 200, r.text[:300]
            if px is not None:
                px.stop()
            fresh = read = write = 0
            for rec in up.messages_requests():
                f, c, w = usage_figures(rec.usage)
                fresh, read, write = fresh + f, read + c, write + w
            total = fresh + read + write
            cost = fresh + 0.1 * read + 1.25 * write
            print(
                f"{name:<30} {total:>13,} {read:>12,} {read / total:>6.0%} {cost:>12,.0f} "
                f"{len(up.problems()):>8}"
            )
            if px is not None:
                (r,) = report(read_audit(audit))
                print(
                    f"  proxy audit: {r.compressions} compressions, {r.requests - r.rewritten} "
                    f"requests unchanged, winnow's count {r.tokens_in:,} -> {r.tokens_out:,} "
                    f"({r.saved:.0%} saved)"
                )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", type=Path, default=TRACES)
    p.add_argument("--requests", type=int, default=60, help="requests per latency run")
    p.add_argument("--requests-no-memo", type=int, default=12)
    p.add_argument("--quick", action="store_true", help="fewer requests")
    p.add_argument(
        "--budgets",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[80_000, 40_000],
        help="proxy budgets for the savings replay (default: 80000,40000: 40%% of 200K / 100K)",
    )
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument("--skip-savings", action="store_true")
    args = p.parse_args()
    if not args.traces.is_dir():
        print(f"bench_proxy: {args.traces}: no traces folder (pass --traces)", file=sys.stderr)
        return 1
    if args.quick:
        args.requests, args.requests_no_memo = 20, 4
    compressor = default_compressor()
    compressor.compress(list(read_paths([claude_sessions(args.traces, 1)[0]]))[:50], 500)
    if not args.skip_latency:
        latency(args, compressor)
    if not args.skip_savings:
        savings(args, compressor)
    return 0


if __name__ == "__main__":
    sys.exit(main())
