"""`winnow cib` end to end against the tests' loopback stand-in model, no network, no GPU.

    python scripts/cib_standin.py -o out/cib-standin                  # window 16,000, n=25
    python scripts/cib_standin.py -o out/x -- --n 4 --buckets 20,80    # more `winnow cib` flags

The stand-in (tests/cib_standin.py) answers from the context it is sent, is misled by
passages that compete with the question's relations and not by filler, and reports its own
`usage.prompt_tokens`: it shows that the pipeline measures what it claims, not how a real
model behaves.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from cib_standin import StandIn  # noqa: E402

from winnow.cli import main as winnow  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="out/cib-standin")
    ap.add_argument("--window", default="16000")
    ap.add_argument("--n", default="25")
    ap.add_argument("rest", nargs="*", help="more `winnow cib` arguments, after --")
    args = ap.parse_args()
    with StandIn(lifetime=3600) as model:
        argv = ["cib", "--base-url", model.url, "--model", "stand-in", "--window", args.window]
        argv += ["--n", args.n, "--max-retries", "0", "-o", args.output, *args.rest]
        code = winnow(argv)
        if model.problems:
            print(f"the stand-in rejected {len(model.problems)} requests: {model.problems[0]}")
            return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
