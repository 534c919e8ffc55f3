"""Speed of the serving classifier: one unit's latency and batch throughput, beside a naive pipeline.

    python scripts/bench_classifier.py [--model DIR] [--int8] [--units N]

Single unit: one 1,000-character real unit, text in to category out (features, tokens,
ONNX Runtime, Prediction), one ORT thread; p50 / p99 over many calls.
Naive baseline: the same model behind what one writes first: the tokenizer's own truncation
and padding over the full text, the open regex cues of winnow.data.cues over the full text,
an ORT session with default options.
Batch: every unit of ../shared/traces (or the test fixture, repeated) through predict_proba,
in memory, on the machine's cores: the first pass (the encoder's word cache fills) and the
steady state of a long-lived classifier.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from winnow.classifier.features import unit_features  # noqa: E402
from winnow.data import cues  # noqa: E402
from winnow.serving.classifier import (  # noqa: E402
    ImportanceClassifier,
    default_model_path,
    graph_inputs,
)

TRACES = ROOT.parent / "shared" / "traces"
FIXTURE = ROOT / "tests" / "fixtures" / "classifier" / "sessions.jsonl"


def load_units(limit: int | None) -> list:
    from winnow.data.readers import read_paths

    src = TRACES if TRACES.exists() else FIXTURE
    units = list(read_paths([src]))
    while limit and len(units) < limit:
        units += units
    return units[:limit] if limit else units


def one_kilo_unit(units) -> dict:
    """A real assistant or tool unit cut to exactly 1,000 characters."""
    u = next(u for u in units if len(u.text) >= 1000 and u.kind == "tool_result")
    return {**u.to_dict(), "text": u.text[:1000]}


def timed(fn, n: int) -> list[float]:
    for _ in range(min(200, n)):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t) / 1e3)
    return out


def naive(model_dir: Path):
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    clf = ImportanceClassifier.load(model_dir)
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_truncation(clf.encoder.max_len)
    tok.enable_padding(length=clf.encoder.max_len)
    session = ort.InferenceSession(
        str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"]
    )

    def predict(u: dict) -> str:
        text = u["text"]
        ids = np.array([tok.encode(text).ids], dtype=np.int32)
        cues.cue_vector(text)  # what a regex feature pass costs
        feats = unit_features(u)[None]
        probs = session.run(None, graph_inputs(ids, feats))[0][0, 0]
        return clf.labels[int(probs.argmax())]

    return predict


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=default_model_path())
    ap.add_argument("--int8", action="store_true", help="also time the int8-quantised model")
    ap.add_argument("--units", type=int, help="batch size of the throughput run (default: all)")
    ap.add_argument("--calls", type=int, default=3000, help="single-unit calls (default: 3000)")
    args = ap.parse_args()

    units = load_units(args.units)
    unit = one_kilo_unit(units)
    print(f"model {args.model}; {len(units):,} units for the batch run; cpus {os.cpu_count()}")
    print(
        f"load average {os.getloadavg()[0]:.2f} (other work on the machine inflates every figure)"
    )
    models = [("fp32", args.model)]
    tmp = None
    if args.int8:
        from winnow.training.export import quantize_int8, write_checksums

        tmp = tempfile.TemporaryDirectory()
        q = Path(tmp.name) / args.model.name
        import shutil

        shutil.copytree(args.model, q)
        quantize_int8(args.model / "model.onnx", q / "model.onnx")
        write_checksums(q)
        models.append(("int8", q))

    for name, path in models:
        clf = ImportanceClassifier.load(path, threads=1)
        lat = timed(lambda c=clf: c.predict_one(unit), args.calls)
        print(
            f"[{name}] one 1,000-char unit, 1 thread: p50 {statistics.median(lat):.0f} us, "
            f"p99 {pct(lat, 99):.0f} us -> {clf.predict_one(unit).category}"
        )
        for threads in (1, 2):
            clf = ImportanceClassifier.load(path, threads=threads)
            clf.predict_proba(units[:50])  # warm-up; the encoder's word cache stays cold
            rates = []
            for _ in range(4):
                t = time.perf_counter()
                clf.predict_proba(units)
                rates.append(len(units) / (time.perf_counter() - t))
            print(
                f"[{name}] batch, {threads} ORT thread(s) + a preparing thread: first pass "
                f"(cold word cache) {rates[0]:,.0f} units/s, then {statistics.median(rates[1:]):,.0f} "
                "units/s (median of 3)"
            )

    fn = naive(args.model)
    lat = timed(lambda: fn(unit), max(300, args.calls // 5))
    print(
        f"[naive] one 1,000-char unit: p50 {statistics.median(lat):.0f} us, p99 {pct(lat, 99):.0f} us"
    )
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
