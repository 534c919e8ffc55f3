"""Time the lossless round trip of a large request body: `winnow.data.parse` (body -> units)
and `render.to_anthropic` (units -> body), beside json.loads + json.dumps of the same body
(what any proxy pays to read and write it at all).

    python scripts/bench_parse_render.py [--tokens 200000] [--runs 25]

The body is a real Claude Code session from ../shared/traces (the demo session when that is
absent) rendered as an Anthropic request and repeated, with renamed call ids, up to about
`--tokens` tokens (4 bytes a token). Prints p50 / p99 in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from winnow.data import parse
from winnow.data.readers import read_paths
from winnow.serving.render import to_anthropic

ROOT = Path(__file__).resolve().parents[1]


def big_body(tokens: int) -> dict:
    traces = ROOT.parent / "shared" / "traces" / "entireio-cli"
    source = traces if traces.is_dir() else ROOT / "tests" / "fixtures" / "demo_session.jsonl"
    sessions: dict[str, list] = {}
    for u in read_paths([source]):
        sessions.setdefault(u.session_id, []).append(u)
    body = to_anthropic(max(sessions.values(), key=len), model="claude-sonnet-4-6", tools=True)
    one = json.dumps(body["messages"])
    messages: list = []
    for r in range(max(1, tokens * 4 // len(one))):
        renamed = one.replace('"id": "', f'"id": "r{r}').replace(
            '"tool_use_id": "', f'"tool_use_id": "r{r}'
        )
        messages += json.loads(renamed)
    body["messages"] = messages
    return body


def timed(fn, runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=25)
    args = ap.parse_args()
    body = big_body(args.tokens)
    raw = json.dumps(body)
    units = list(parse(body))
    assert to_anthropic(units) == body, "the round trip must give the body back"
    print(
        f"body: {len(raw) // 4:,} tokens (bytes / 4), {len(body['messages'])} messages, {len(units)} units"
    )
    for name, fn in (
        ("parse (body -> units)", lambda: list(parse(body))),
        ("render (units -> body)", lambda: to_anthropic(units)),
        ("baseline: json.loads + json.dumps", lambda: json.dumps(json.loads(raw))),
    ):
        p50, p99 = timed(fn, args.runs)
        print(f"{name:36s} p50 {p50:6.1f} ms   p99 {p99:6.1f} ms")


if __name__ == "__main__":
    main()
