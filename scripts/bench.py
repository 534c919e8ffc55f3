"""Every performance figure of winnow beside its baseline, measured in one run.

    make bench                                  # the same as the next line
    python scripts/bench.py                     # about 5 minutes on 2 cores
    python scripts/bench.py --quick             # about a minute: smaller samples, no Ray, no retrain
    python scripts/bench.py --traces DIR        # on your own transcripts

A script of the source tree, not of the installed package: it measures the checkout it sits
in (its fixtures, ../shared/traces beside the repository when present) and needs the extras
of `make test` (torch for the eager baseline, transformers for the BERT one, ray, fastapi).

Timings depend on the machine and on whatever else runs on it; compare a figure only with
the baseline printed beside it, which was measured in the same run on the same inputs.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from winnow.data.schema import Unit  # noqa: E402

DEFAULT_TRACES = REPO.parent / "shared" / "traces"
FIXTURES = REPO / "tests" / "fixtures" / "batch"

STEPS = ("latency", "batch", "service", "compression", "retrain", "install", "bert")

# LLMLingua-2's token classifier is bert-base-multilingual-cased: these are its dimensions.
BERT_BASE_MULTILINGUAL = dict(
    vocab_size=119547,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=512,
)


@dataclass
class BenchConfig:
    """What to measure and on how much input."""

    traces: Path = DEFAULT_TRACES if DEFAULT_TRACES.is_dir() else FIXTURES
    model: str | None = None
    latency_units: int = 300  # single-unit calls timed (after a warm-up)
    requests: int = 500  # HTTP classify requests, over 4 client threads
    batch_files: int = 0  # transcript files scored by each batch engine; 0 = all
    bert_units: int = 16  # units run through the BERT-base baseline (about 0.3-1 s each)
    session_tokens: int = 250_000  # size of the session built for the compression figure
    ray: bool = True
    retrain: bool = True

    @classmethod
    def quick(cls, **kw: Any) -> BenchConfig:
        base = dict(
            latency_units=100, requests=100, batch_files=12, bert_units=4, ray=False, retrain=False
        )
        return cls(**{**base, **kw})


@dataclass
class Row:
    figure: str
    value: str
    baseline: str
    baseline_value: str
    ratio: str = ""
    note: str = ""  # printed under the table


@dataclass
class Bench:
    """Runs the measurements; each returns its rows."""

    config: BenchConfig
    log: Callable[[str], None] = print
    rows: list[Row] = field(default_factory=list)

    def __post_init__(self) -> None:
        from winnow.batch.score import list_transcripts
        from winnow.data.readers import ReadReport
        from winnow.serving.classifier import ImportanceClassifier

        self.clf = ImportanceClassifier.load(self.config.model, threads=1)
        self.files = list_transcripts([self.config.traces], ReadReport())
        if not self.files:
            raise ValueError(f"no transcripts under {self.config.traces}")
        self.units = _spread_units(self.files, self.config.latency_units)

    def run(self, steps: Sequence[str] | None = None) -> list[Row]:
        for name in steps or STEPS:
            self.log(f"bench: {name} ...")
            getattr(self, f"bench_{name}")()
        return self.rows

    def bench_latency(self) -> None:
        """One unit per call, p50/p99, against eager PyTorch on the same units."""
        fast, naive = _paired(lambda u: self.clf.predict([u]), self._naive_predict(), self.units)
        for q in (50, 99):
            a, b = _pct(fast, q), _pct(naive, q)
            self.rows.append(
                Row(
                    f"single-unit latency p{q}",
                    _ms(a),
                    "same model, eager PyTorch",
                    _ms(b),
                    _x(b / a),
                )
            )

    def _naive_predict(self) -> Callable[[Unit], Any]:
        """The same network and inputs served the plain way: eager PyTorch, 1 thread."""
        import numpy as np
        import torch

        from winnow.classifier.features import N_FEATURES, unit_features
        from winnow.classifier.model import ModelConfig, UnitClassifier

        torch.set_num_threads(1)
        if self.clf.kind == "ngram":
            from winnow.classifier.bag_model import BagClassifier, BagModelConfig

            bag_net = BagClassifier(BagModelConfig.from_dict(self.clf.manifest.model)).eval()

            def predict_bag(u: Unit) -> Any:
                ids, w, dense, _ = self.clf.bag.step(None, u)
                args = (torch.from_numpy(ids), torch.zeros(1, dtype=torch.long))
                with torch.inference_mode():
                    logits = bag_net(*args, torch.from_numpy(w), torch.from_numpy(dense[None]))
                    return torch.softmax(logits, -1)[0].tolist()

            return predict_bag
        c = self.clf.config
        shape = {
            **c.get("model", {}),
            "vocab_size": self.clf.encoder.vocab_size,
            "max_len": c["max_len"],
        }
        net = UnitClassifier(ModelConfig.from_dict(shape)).eval()  # weights do not change latency

        def predict(u: Unit) -> Any:
            ids = torch.from_numpy(self.clf.encoder.encode_one(u))
            feats = np.zeros((1, N_FEATURES), np.float32)
            unit_features(u, None, feats[0])
            with torch.inference_mode():
                return torch.softmax(net(ids, torch.from_numpy(feats)), -1)[0].tolist()

        return predict

    def bench_batch(self) -> None:
        """Units/s over the same files: the local engine (and Ray) vs one process, end to end."""
        from winnow.batch.score import BatchScorer, ScoreConfig

        files = _spread(self.files, self.config.batch_files or len(self.files))
        engines = [("local", 0)] + ([("ray", 0)] if self.config.ray and _has("ray") else [])
        with tempfile.TemporaryDirectory() as tmp:

            def units_per_s(engine: str, workers: int) -> tuple[float, int]:
                config = ScoreConfig(self.config.model, engine, workers)
                s = BatchScorer(config).run(files, f"{tmp}/{engine}{workers}.parquet")
                return s.units_per_s, s.units

            single, units = units_per_s("local", 1)
            for engine, workers in engines:
                rate, _ = units_per_s(engine, workers)
                self.rows.append(
                    Row(
                        f"batch units/s, {engine} engine",
                        f"{rate:,.0f}",
                        "single process",
                        f"{single:,.0f}",
                        _x(rate / single),
                        f"batch {engine}: {len(files)} files, {units:,} units, all cores, end to end "
                        "(reading, classifying, counting tokens, writing Parquet, start-up included)",
                    )
                )

    def bench_service(self) -> None:
        """Classify over HTTP (uvicorn on loopback, 4 client threads) vs in-process calls."""
        import threading
        from concurrent.futures import ThreadPoolExecutor

        import httpx
        import uvicorn

        from winnow.serving.service import ServiceConfig, create_app

        convs = [self.units[i : i + 8] for i in range(0, len(self.units), 8)]  # 8-unit bodies
        bodies = [{"units": [u.to_dict() for u in c]} for c in convs]
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(ServiceConfig(self.config.model)), port=0, log_level="warning"
            )
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1/classify"
        n, threads = self.config.requests, 4

        def client(k: int) -> list[float]:
            with httpx.Client(timeout=60) as c:
                post = lambda i: c.post(url, json=bodies[i % len(bodies)]).raise_for_status()  # noqa: E731
                return _latencies(post, range(k, n, threads), warmup=0)

        try:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                lat = [x for part in pool.map(client, range(threads)) for x in part]
            rps = n / (time.perf_counter() - t0)
        finally:
            server.should_exit = True
            thread.join(10)
        local = _latencies(self.clf.predict, [convs[i % len(convs)] for i in range(n // 4)])
        self.rows.append(
            Row(
                "HTTP classify, req/s (p99)",
                f"{rps:,.0f} ({_ms(_pct(lat, 99))})",
                "in-process predict, 1 thread",
                f"{len(local) / sum(local):,.0f} ({_ms(_pct(local, 99))})",
                _x(rps * sum(local) / len(local)),
                f"service: {n} POST /v1/classify of 8 real units each over 4 client threads, "
                "server and clients on the same cores",
            )
        )

    def bench_compression(self) -> None:
        """Compressing a 250K-token session to a quarter, against oldest-first truncation."""
        from winnow.serving.compressor import CompressorConfig, SemanticCompressor
        from winnow.serving.tokens import default_token_counter, unit_tokens

        counter = default_token_counter()
        session = _long_session(self.files, self.config.session_tokens, counter)
        total = sum(unit_tokens(u, counter) for u in session)
        limit = total // 4
        compressor = SemanticCompressor(
            classifier=self.clf,
            token_counter=_fresh(counter),
            config=CompressorConfig(on_must_keep_overflow="truncate_oldest"),
        )
        t0 = time.perf_counter()
        result = compressor.compress(session, limit)
        t_winnow = time.perf_counter() - t0
        fresh = _fresh(counter)
        t0 = time.perf_counter()
        kept = truncate_oldest(session, limit, lambda u: unit_tokens(u, fresh))
        t_trunc = time.perf_counter() - t0
        kept_tokens = sum(unit_tokens(u, counter) for u in kept)
        self.rows.append(
            Row(
                f"compress a {total // 1000}K-token session to 1/4",
                f"{t_winnow:.2f} s",
                "oldest-first truncation",
                f"{t_trunc:.3f} s",
                f"{t_winnow / t_trunc:,.0f}x slower" if t_trunc else "",
                f"compression: {len(session):,} real units, {total:,} tokens, limit {limit:,}; "
                f"winnow kept {result.tokens_after:,} tokens, truncation {kept_tokens:,} "
                "(both times include token counting; winnow's includes classifying every unit)",
            )
        )

    def bench_retrain(self) -> None:
        """Full rebuild of the shipped model (`python -m winnow.training.release`) into a temp dir."""
        import subprocess

        if not self.config.retrain or not _has("torch"):
            why = "skipped" if not self.config.retrain else "skipped (no torch)"
            self.rows.append(Row("full retrain", why, "", ""))
            return
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [
                sys.executable,
                "-m",
                "winnow.training.release",
                "--traces",
                str(self.config.traces),
            ]
            t0 = time.perf_counter()
            run = subprocess.run([*cmd, "-o", f"{tmp}/model"], capture_output=True, text=True)
            seconds = time.perf_counter() - t0
        if run.returncode:
            last = (run.stderr.strip().splitlines() or ["no output"])[-1]
            self.rows.append(Row("full retrain", "failed", "", "", "", f"retrain: {last}"))
            return
        self.rows.append(
            Row(
                "full retrain",
                f"{seconds:.0f} s",
                "",
                "",
                "",
                "retrain: python -m winnow.training.release (extract, label, split, train, ONNX "
                "export, evaluate) on the same traces, into a temporary folder",
            )
        )

    def bench_install(self) -> None:
        """Installed size of the serving dependencies, without and with torch."""
        base = _closure(_base_requirements())
        with_torch = _closure([*_base_requirements(), "torch"])
        a, b = _size(base), _size(with_torch)
        self.rows.append(
            Row(
                "serving install size",
                f"{a / 2**20:,.0f} MiB",
                "the same with torch",
                f"{b / 2**20:,.0f} MiB",
                f"{b / a:.1f}x smaller",
                f"install: installed files of winnow's base dependencies and theirs ({len(base)} "
                f"distributions, from this venv), vs the same plus torch ({len(with_torch)})",
            )
        )

    def bench_bert(self) -> None:
        """Per-unit time against LLMLingua-2's architecture (BERT-base multilingual), 1 thread each."""
        import torch
        from transformers import BertConfig, BertForTokenClassification

        torch.set_num_threads(1)  # the same as winnow's intra-op threads=1
        torch.manual_seed(0)
        model = BertForTokenClassification(
            BertConfig(**BERT_BASE_MULTILINGUAL, num_labels=2)
        ).eval()
        units = _spread(self.units, self.config.bert_units)
        lengths = [min(512, max(8, math.ceil(len(u.text) / 4))) for u in units]
        inputs = [torch.randint(1000, 100_000, (1, n)) for n in lengths]
        with torch.inference_mode():
            bert = _latencies(lambda x: model(input_ids=x), inputs, warmup=1)
        # Not alternated with BERT, whose 700 MB of weights would leave winnow a cold cache on
        # every call; repeated instead, since one call is too short to time alone.
        ours = _latencies(lambda u: self.clf.predict([u]), units * 20)
        a, b = sum(ours) / len(ours), sum(bert) / len(bert)
        self.rows.append(
            Row(
                "per-unit time vs LLMLingua-2's model",
                _ms(a),
                "BERT-base multilingual",
                _ms(b),
                _x(b / a),
                f"bert: {len(units)} units, one per call (winnow: 20 passes), 1 thread each; BERT built from its config with "
                f"random weights, {sum(lengths) / len(lengths):.0f} tokens on average (chars/4, at most 512)",
            )
        )


def truncate_oldest(units: Sequence[Unit], limit: int, cost: Callable[[Unit], int]) -> list[Unit]:
    """The usual baseline: drop the oldest units until the rest fits, never half a tool pair."""
    tokens = [cost(u) for u in units]
    total, start = sum(tokens), 0
    while total > limit and start < len(units):
        total -= tokens[start]
        start += 1
    kept = list(units[start:])
    calls = {u.call_id for u in kept if u.kind == "tool_call"}
    return [u for u in kept if u.kind != "tool_result" or u.call_id in calls]


def _fresh(counter: Any) -> Any:
    """A new counter like `counter`: counters cache, and each contender must count from cold."""
    from winnow.serving.tokens import TiktokenCounter

    return TiktokenCounter(counter.name) if isinstance(counter, TiktokenCounter) else counter


def _long_session(files: Sequence[Path], tokens: int, counter: Any) -> list[Unit]:
    """Real sessions concatenated into one of at least `tokens` tokens, renumbered."""
    from winnow.data.readers import ReadReport, read_file
    from winnow.serving.tokens import unit_tokens

    out: list[Unit] = []
    total = 0
    for f in random.Random(0).sample(list(files), len(files)):  # sessions of every source
        for u in read_file(f, ReadReport()):
            # stop at the first unit boundary past the target that does not split a tool pair
            if total >= tokens and u.kind != "tool_result":
                return out
            i = len(out)
            call_id = f"{u.session_id}/{u.call_id}" if u.call_id else None
            out.append(
                Unit(
                    f"long:{i}", "long", i, u.role, u.kind, u.text, u.tool_name, call_id, u.is_error
                )
            )
            total += unit_tokens(out[-1], counter)
    return out


def _spread_units(files: Sequence[Path], n: int) -> list[Unit]:
    """About `n` units drawn evenly from evenly spread files, so every format is represented."""
    from winnow.data.readers import ReadReport, read_file

    units: list[Unit] = []
    for f in _spread(files, max(1, n // 10)):
        units.extend(_spread(list(read_file(f, ReadReport())), 10))
    return units[:n]


def _spread(items: Sequence[Any], n: int) -> list[Any]:
    if len(items) <= n:
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def _latencies(fn: Callable[[Any], Any], items: Sequence[Any], warmup: int = 3) -> list[float]:
    for x in items[:warmup]:
        fn(x)  # first calls allocate
    out = []
    for x in items:
        t0 = time.perf_counter()
        fn(x)
        out.append(time.perf_counter() - t0)
    return out


def _paired(
    fn_a: Callable[[Any], Any], fn_b: Callable[[Any], Any], items: Sequence[Any]
) -> tuple[list[float], list[float]]:
    """Latencies of two contenders, alternating call by call: a shared machine's load swings
    then hit both alike."""
    for x in items[:3]:  # warm-up
        fn_a(x)
        fn_b(x)
    a, b = [], []
    for x in items:
        a.extend(_latencies(fn_a, [x], warmup=0))
        b.extend(_latencies(fn_b, [x], warmup=0))
    return a, b


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


def _ms(s: float) -> str:
    return f"{s * 1000:,.2f} ms" if s < 1 else f"{s:,.2f} s"


def _x(r: float) -> str:
    return f"{r:,.1f}x" if r < 100 else f"{r:,.0f}x"


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _base_requirements() -> list[str]:
    import importlib.metadata as md

    return [r for r in md.requires("winnow") or [] if "extra ==" not in r]


def _closure(requirements: Sequence[str]) -> dict[str, Any]:
    """Installed distributions that `requirements` pull in, transitively (extras not followed)."""
    import importlib.metadata as md
    import re

    def name(req: str) -> str:
        return re.split(r"[ ;<>=!~\[(]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")

    seen: dict[str, Any] = {}
    todo = [name(r) for r in requirements]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        try:
            dist = md.distribution(n)
        except md.PackageNotFoundError:
            continue
        seen[n] = dist
        todo.extend(name(r) for r in dist.requires or [] if "extra ==" not in r)
    return seen


def _size(dists: dict[str, Any]) -> int:
    total = 0
    for dist in dists.values():
        for f in dist.files or []:
            p = Path(dist.locate_file(f))
            if p.is_file():
                total += p.stat().st_size
    return total


def add_arguments(p: argparse.ArgumentParser) -> None:
    full, quick = BenchConfig(), BenchConfig.quick()
    p.add_argument(
        "--quick", action="store_true", help="small samples, no Ray, no retrain (~1 min)"
    )
    p.add_argument(
        "--traces",
        type=Path,
        default=None,
        help="transcripts to measure on (default: ../shared/traces beside the repository, "
        "else tests/fixtures/batch)",
    )
    p.add_argument("--model", default=None, help="model directory (default: the shipped model)")
    for name, what in (
        ("latency_units", "single-unit calls timed"),
        ("batch_files", "files scored by each batch engine, 0 = all"),
        ("bert_units", "units run through the BERT-base baseline"),
        ("session_tokens", "tokens of the session built for the compression figure"),
    ):
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=int,
            default=None,
            help=f"{what} (default: {getattr(full, name)}; --quick: {getattr(quick, name)})",
        )
    p.add_argument("--skip-ray", action="store_true", help="no Ray batch figure")
    p.add_argument("--skip-retrain", action="store_true", help="no full-retrain figure")
    p.add_argument(
        "--only",
        nargs="+",
        choices=STEPS,
        metavar="STEP",
        help=f"run only these measurements, of: {', '.join(STEPS)} (default: all)",
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    kw = {
        k: v
        for k in ("traces", "model", "latency_units", "batch_files", "bert_units", "session_tokens")
        if (v := getattr(args, k)) is not None
    }
    config = BenchConfig.quick(**kw) if args.quick else BenchConfig(**kw)
    config.ray &= not args.skip_ray
    config.retrain &= not args.skip_retrain
    err = Console(stderr=True)
    t0 = time.perf_counter()
    try:
        rows = Bench(config, log=lambda m: err.print(m, style="dim")).run(args.only)
    except ValueError as e:
        err.print(f"bench: {e}", markup=False)
        return 2
    table = Table(title=f"bench ({config.traces}, {time.perf_counter() - t0:.0f} s)")
    for col, justify in (
        ("figure", "left"),
        ("winnow", "right"),
        ("baseline", "left"),
        ("baseline value", "right"),
        ("ratio", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(r.figure, r.value, r.baseline, r.baseline_value, r.ratio)
    out = Console() if sys.stdout.isatty() else Console(width=150)  # a log keeps whole rows
    out.print(table)
    for r in rows:
        if r.note:
            out.print(f"- {r.note}", markup=False, highlight=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
