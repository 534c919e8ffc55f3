"""Time a full retrain of the default model from ../shared/traces (extract -> ... -> model dir).

    python scripts/bench_retrain.py [--traces DIR] [--teacher DIR] [--cache DIR] [--output DIR]

Runs `winnow release` as the lead does (with `--teacher`, its embeddings come from the cache
when a previous run filled it: run twice to time the cached case). Writes to a temporary
directory unless --output is given (the shipped models/winnow-small is left alone) and prints
the time of each step and the total. The goal is under 5 minutes on a 2-core machine with the
teacher's embeddings cached. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from winnow.training import release  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--output", type=Path, help="model directory to write (default: a temporary one)"
    )
    ap.add_argument(
        "--traces",
        type=Path,
        default=release.DEFAULT_TRACES,
        help="transcripts (default: ../shared/traces beside the repository)",
    )
    ap.add_argument("--teacher", help="sentence encoder folder (distillation)")
    ap.add_argument("--cache", help="teacher embeddings cache")
    args = ap.parse_args()
    if not args.traces.exists():
        print(f"no traces at {args.traces}; nothing to time")
        return 0
    argv = ["--traces", str(args.traces)]
    argv += ["--teacher", args.teacher] if args.teacher else []
    argv += ["--cache", args.cache] if args.cache else []
    with tempfile.TemporaryDirectory() as tmp:
        out = args.output or Path(tmp) / "winnow-small"
        print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
        start = time.perf_counter()
        rc = release.main([*argv, "-o", str(out)])
        total = time.perf_counter() - start
        if rc:
            print(f"release failed (exit {rc})")
            return rc
        steps = json.loads((out / "metrics.json").read_text())["release_seconds"]
        print("steps (s): " + ", ".join(f"{k} {v}" for k, v in steps.items()))
        print(f"full retrain: {total:.0f} s ({total / 60:.1f} min; goal < 5 min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
