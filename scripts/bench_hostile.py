"""Time per KB of hostile texts: the labeller, the features and the compressor, old code vs new.

    .venv/bin/python scripts/bench_hostile.py [--ref 64fead8] [--chars 4000] [--cap 120]

The hostile texts and the five-unit session they go into are those of tests/test_hostile.py.
The old code is `git archive REF` in a temporary folder, run in a subprocess beside one
running this checkout, one text at a time, alternately, on the thread's CPU time (the best
of three for the new code, one run for the old). A run past `--cap` seconds is stopped and
shown as at least its time. Prints, per component, the worst text of each side.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "64fead8"  # main before issue 14's rewrites

MEASURE = r"""
import json, sys, time
sys.path.insert(0, {tests!r})
import winnow
from test_hostile import HOSTILE, run, session
name, component, n, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
units = session(HOSTILE[name](n))
run(component, session(HOSTILE[name](200)))  # warm up
best = float("inf")
for _ in range(repeat):
    t0 = time.thread_time()
    run(component, units)
    best = min(best, time.thread_time() - t0)
kb = sum(len(u.text) for u in units) / 1024
print(json.dumps({{"ms_per_kb": 1e3 * best / kb, "winnow": winnow.__file__}}))
"""


def measure(root: Path, name: str, component: str, n: int, repeat: int, cap: float) -> float:
    """ms per KB, or -cap_ms_per_kb (negative: stopped at the cap)."""
    code = MEASURE.format(tests=str(ROOT / "tests"))
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, name, component, str(n), str(repeat)],
            capture_output=True, text=True, timeout=cap, env=env, cwd=root,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return -1e3 * cap / (6 * n / 1024)
    if out.returncode:  # shown as a crash, with its last line
        print(f"  {root.name}: {name}/{component}: {out.stderr.strip().splitlines()[-1]}")
        return float("nan")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(result["winnow"]).resolve().is_relative_to(root.resolve()), result
    return result["ms_per_kb"]


def shown(ms: float) -> str:
    if ms != ms:
        return "crash"
    return f"> {-ms:,.1f}" if ms < 0 else f"{ms:,.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default=BEFORE, help="git revision of the old code")
    parser.add_argument("--chars", type=int, default=4000, help="characters a unit")
    parser.add_argument("--cap", type=float, default=120.0, help="seconds before a run is stopped")
    parser.add_argument("--components", nargs="+", default=["labeller", "features", "compressor"])
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from test_hostile import HOSTILE

    archive = subprocess.run(["git", "archive", args.ref, "winnow"], cwd=ROOT, capture_output=True)
    if archive.returncode:
        raise SystemExit(f"bench_hostile: git archive {args.ref}: {archive.stderr.decode()}")
    with tempfile.TemporaryDirectory() as tmp:
        tarfile.open(fileobj=io.BytesIO(archive.stdout)).extractall(tmp)
        old_root = Path(tmp)
        print(f"{args.chars:,} characters a unit, 6 units; ms of CPU per KB; old = {args.ref}")
        print(f"{'component':11s} {'text':18s} {'new':>10s} {'old':>10s}")
        for component in args.components:
            rows = []
            for name in HOSTILE:
                new = measure(ROOT, name, component, args.chars, 3, args.cap)
                old = measure(old_root, name, component, args.chars, 1, args.cap)
                rows.append((name, new, old))
                print(f"{component:11s} {name:18s} {shown(new):>10s} {shown(old):>10s}", flush=True)
            worst_new = max(rows, key=lambda r: r[1] if r[1] == r[1] else float("inf"))
            worst_old = max(rows, key=lambda r: abs(r[2]) if r[2] == r[2] else -1.0)
            print(
                f"WORST {component}: new {shown(worst_new[1])} ms/KB ({worst_new[0]}; old on it "
                f"{shown(worst_new[2])}); old {shown(worst_old[2])} ms/KB ({worst_old[0]}; new on "
                f"it {shown(worst_old[1])})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
