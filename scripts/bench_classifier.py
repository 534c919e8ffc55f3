"""Speed of the serving classifier beside a baseline model: one unit's latency, live
(incremental) classification and batch throughput, measured interleaved.

    python scripts/bench_classifier.py [--model DIR] [--vs DIR | --vs-rev REV] [--traces DIR]

Single unit: one 1,000-character real unit, text in to category out, one ORT thread; p50 /
p99 over many calls, the two models alternating in blocks so that the machine's drift hits
both alike. Live: a real session fed unit by unit through `SessionClassifier.add`
(the old way for a live classifier with history was `predict(units[:i + 1])`, whose cost
grows with the session). Batch: every unit of the traces through `predict_proba`, in memory,
one and two ORT threads beside the preparing thread, alternating, median of the repeats.
`--vs-rev REV` takes the baseline from git history (models/winnow-small at REV). Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from winnow.serving.classifier import ImportanceClassifier, default_model_path  # noqa: E402
from winnow.serving.session import SessionClassifier  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
FIXTURE = ROOT / "tests" / "fixtures" / "classifier" / "sessions.jsonl"


def load_units(traces: Path, limit: int | None) -> list:
    from winnow.data.readers import read_paths

    src = traces if traces.exists() else FIXTURE
    units = list(read_paths([src]))
    while limit and len(units) < limit:
        units += units
    return units[:limit] if limit else units


def model_at(rev: str, tmp: Path) -> Path:
    """models/winnow-small as committed at `rev`, written under `tmp`."""
    out = tmp / f"winnow-small@{rev}"
    out.mkdir()
    names = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:models/winnow-small"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for name in names:
        data = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:models/winnow-small/{name}"],
            capture_output=True, check=True,
        ).stdout  # fmt: skip
        (out / name).write_bytes(data)
    return out


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t) / 1e3)
    return out


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100)[q - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=default_model_path())
    ap.add_argument("--vs", type=Path, help="baseline model directory")
    ap.add_argument("--vs-rev", help="baseline: models/winnow-small at this git revision")
    ap.add_argument("--traces", type=Path, default=TRACES)
    ap.add_argument("--units", type=int, help="units of the batch run (default: all)")
    ap.add_argument("--calls", type=int, default=3000, help="single-unit calls per model")
    ap.add_argument("--repeats", type=int, default=5, help="batch passes per model and setting")
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory()
    models = {"new": args.model}
    if args.vs_rev:
        models["old"] = model_at(args.vs_rev, Path(tmp.name))
    elif args.vs:
        models["old"] = args.vs
    units = load_units(args.traces, args.units)
    kilo = next(u for u in units if len(u.text) >= 1000 and u.kind == "tool_result")
    kilo = replace(kilo, text=kilo.text[:1000])
    print(f"{len(units):,} units for the batch run; cpus {os.cpu_count()}; load average "
          f"{os.getloadavg()[0]:.2f} (other work on the machine inflates every figure)")  # fmt: skip
    for name, path in models.items():
        print(f"[{name}] {path}")

    # One unit, interleaved in blocks of 200 calls.
    single = {k: ImportanceClassifier.load(p, threads=1) for k, p in models.items()}
    lat: dict[str, list[float]] = {k: [] for k in models}
    for clf in single.values():
        timed(lambda c=clf: c.predict_one(kilo), 200)  # warm-up
    for _ in range(max(1, args.calls // 200)):
        for k, clf in single.items():
            lat[k] += timed(lambda c=clf: c.predict_one(kilo), 200)
    for k, xs in lat.items():
        print(f"[{k}] one 1,000-char unit, 1 thread: p50 {statistics.median(xs):.0f} us, "
              f"p99 {pct(xs, 99):.0f} us -> {single[k].predict_one(kilo).category}")  # fmt: skip

    # Live: the longest session of the traces (up to 400 units), unit by unit.
    sessions: dict[str, list] = {}
    for u in units:
        sessions.setdefault(u.session_id, []).append(u)
    live = max(sessions.values(), key=len)[:400]
    for k, clf in single.items():
        sc = SessionClassifier(clf)
        t = time.perf_counter()
        sc.extend(live)
        per = (time.perf_counter() - t) / len(live) * 1e6
        first, last = live[: len(live) // 10], live[-len(live) // 10 :]
        sc.reset()
        t = time.perf_counter()
        sc.extend(first)
        head = (time.perf_counter() - t) / len(first) * 1e6
        sc.reset()
        sc.extend(live[: -len(last)])
        t = time.perf_counter()
        sc.extend(last)
        tail = (time.perf_counter() - t) / len(last) * 1e6
        print(f"[{k}] live session of {len(live)} units, unit by unit: {per:.0f} us/unit "
              f"(first tenth {head:.0f}, last tenth {tail:.0f})")  # fmt: skip

    # Batch, alternating models, per thread setting.
    for threads in (1, 2):
        clfs = {k: ImportanceClassifier.load(p, threads=threads) for k, p in models.items()}
        rates: dict[str, list[float]] = {k: [] for k in models}
        for clf in clfs.values():
            clf.predict_proba(units)  # first pass: caches fill
        for _ in range(args.repeats):
            for k, clf in clfs.items():
                t = time.perf_counter()
                clf.predict_proba(units)
                rates[k].append(len(units) / (time.perf_counter() - t))
        for k, rs in rates.items():
            print(f"[{k}] batch, {threads} ORT thread(s) + a preparing thread: "
                  f"{statistics.median(rs):,.0f} units/s (median of {len(rs)}; "
                  f"min {min(rs):,.0f}, max {max(rs):,.0f})")  # fmt: skip
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
