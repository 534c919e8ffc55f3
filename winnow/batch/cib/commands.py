"""`winnow cib`: the context-intelligence benchmark against any OpenAI-compatible endpoint
(heavy imports happen in `run`)."""

from __future__ import annotations

import argparse
from typing import Any

from winnow.cli import check_inputs, check_output, non_negative_int, positive_float, positive_int

TPS = (1_000, 5_000, 20_000)  # prefill speeds the plan quotes when --tps is not given


def _percents(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text}") from e


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--base-url", help="the endpoint, e.g. http://localhost:8000/v1 (key: $OPENAI_API_KEY)"
    )
    p.add_argument("--model", help="the model name the endpoint serves")
    p.add_argument(
        "--window",
        type=int,
        default=128_000,
        help="the model's context window in tokens; buckets are shares of it (default: %(default)s)",
    )
    p.add_argument(
        "--buckets",
        type=_percents,
        default=(10, 20, 30, 40, 50, 60, 70, 80, 90),
        help="target occupancies, percent of the window (default: 10,20,...,90)",
    )
    p.add_argument(
        "--n",
        type=positive_int,
        default=25,
        help="probes per bucket and arm (default: %(default)s)",
    )
    p.add_argument(
        "--arms",
        type=_names,
        default=("filler", "distractor", "compressed"),
        help="any of filler,distractor,compressed (default: all three)",
    )
    p.add_argument(
        "--methods",
        type=_names,
        default=("winnow", "truncation", "masking"),
        help="the compressed arm's methods (default: winnow,truncation,masking)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=10.0,
        help="the compressed arm's budget, percent of the window (default: %(default)s)",
    )
    p.add_argument("--probes", help="your own probes, JSONL (default: generated offline)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated probes")
    p.add_argument(
        "--concurrency", type=positive_int, default=4, help="requests in flight (default: 4)"
    )
    p.add_argument(
        "--max-tokens", type=positive_int, default=64, help="answer length cap (default: 64)"
    )
    p.add_argument(
        "--max-retries",
        type=non_negative_int,
        default=6,
        help="retries on 429 / 5xx, with backoff (default: 6)",
    )
    p.add_argument(
        "--timeout", type=positive_float, default=600.0, help="seconds per request (default: 600)"
    )
    p.add_argument(
        "--render",
        choices=("tools", "text"),
        default="tools",
        help="send notes as tool calls and results (default), or all in one user message for "
        "endpoints whose chat template has no tool role",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="only count the requests and prompt tokens the run would send, and the time they take",
    )
    p.add_argument(
        "--tps", type=positive_float, help="prefill tokens per second, for --plan's time"
    )
    p.add_argument("-o", "--output", help="folder for results.jsonl, report.html and the plots")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from winnow.batch.cib.probes import ProbeFileError
    from winnow.batch.cib.runner import Benchmark, CIBConfig

    err = Console(stderr=True, highlight=False, soft_wrap=True)

    def fail(message: str) -> int:
        err.print(f"winnow cib: {message}", markup=False)
        return 1

    if not args.plan and not (args.base_url and args.model and args.output):
        return fail("--base-url, --model and -o are required (or --plan to only count)")
    if args.probes:
        check_inputs([args.probes])
    if args.output:
        check_output(args.output, folder=True)
    try:
        config = CIBConfig(
            base_url=args.base_url,
            model=args.model or "",
            window=args.window,
            buckets=args.buckets,
            n=args.n,
            arms=args.arms,
            methods=args.methods,
            budget=args.budget,
            probes=args.probes,
            seed=args.seed,
            concurrency=args.concurrency,
            max_tokens=args.max_tokens,
            max_retries=args.max_retries,
            timeout=args.timeout,
            render=args.render,
        )
        bench = Benchmark(config)
    except (ValueError, ProbeFileError) as e:
        return fail(str(e))
    for line in bench.notes:
        err.print(line, markup=False, style="yellow")
    if args.plan:
        return _plan(bench, args.tps)
    return _run(bench, args.output, err)


def _plan(bench: Any, tps: float | None) -> int:
    from rich.console import Console
    from rich.table import Table

    plan = bench.plan()
    table = Table(title=f"winnow cib --plan: window {bench.config.window:,}", show_footer=True)
    table.add_column("arm", footer="total")
    table.add_column("requests", justify="right", footer=f"{sum(plan['requests'].values()):,}")
    total = sum(plan["prompt_tokens"].values())
    table.add_column("prompt tokens", justify="right", footer=f"{total:,}")
    for arm, n in plan["requests"].items():
        table.add_row(arm, f"{n:,}", f"{plan['prompt_tokens'][arm]:,}")
    out = Console()
    out.print(table)
    speeds = (tps,) if tps else TPS
    out.print(
        "prefill alone, no prompt cache: "
        + "; ".join(f"{_duration(total / s)} at {s:,.0f} tokens/s" for s in speeds),
        soft_wrap=True,
    )
    return 0


def _duration(seconds: float) -> str:
    h, rest = divmod(int(round(seconds)), 3600)
    return f"{h} h {rest // 60:02d} min" if h else f"{rest // 60} min {rest % 60:02d} s"


def _run(bench: Any, output: str, err: Any) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.table import Table

    from winnow.batch.cib.report import TABLE_HEADER, TABLE_NOTE, summarize, table_rows
    from winnow.batch.cib.runner import RESULTS, read_results

    progress = Progress(
        TextColumn("cib"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
    )
    task = progress.add_task("cib", total=None, status="")
    scores: list[float] = []

    def on_start(total: int, skipped: int) -> None:
        progress.update(task, total=total, completed=skipped, status=f"{skipped} done before")
        progress.start()

    def on_result(record: dict) -> None:
        scores.append(record["f1"])
        progress.update(task, advance=1, status=f"F1 so far {sum(scores) / len(scores):.2f}")

    def on_error(line: str) -> None:
        progress.console.print(line, markup=False, style="yellow", soft_wrap=True)

    try:
        summary = bench.run(output, on_start=on_start, on_result=on_result, on_error=on_error)
    except RuntimeError as e:  # another run holds the results file
        err.print(f"winnow cib: {e}", markup=False)
        return 1
    finally:
        progress.stop()
    for line in summary.notes:
        err.print(line, markup=False, style="yellow")
    records, _n = read_results(Path(output) / RESULTS, bench.config.config_hash())
    keys = {t.key for t in bench.tasks()}
    rows = summarize([r for k, r in records.items() if k in keys], seed=bench.config.seed)
    table = Table(title=f"winnow cib: {bench.config.model}")
    for h in TABLE_HEADER:
        table.add_column(h, justify="left" if h == "arm" else "right")
    for cells in table_rows(rows):
        table.add_row(*cells)
    out = Console(width=max(170, Console().width))  # a piped table stays one row per line
    out.print(table)
    out.print(TABLE_NOTE, soft_wrap=True, style="dim")
    out.print(
        f"{summary.written} answers now, {summary.skipped} from before, {summary.failed} failed; "
        f"{summary.prompt_tokens:,} prompt tokens in {summary.seconds:.0f} s; "
        f"report: {summary.report}",
        soft_wrap=True,
    )
    if summary.stopped:
        err.print(f"winnow cib: stopped: {summary.stopped}", markup=False)
    if any("BadRequestError" in e for e in summary.errors):
        err.print(
            "winnow cib: the endpoint rejected requests: if it has no tool role, try --render "
            "text; if the context was too long, give the model's real --window",
            markup=False,
        )
    if summary.failed or summary.stopped:
        err.print("winnow cib: rerun the same command to retry what failed", markup=False)
        return 1
    return 0


COMMANDS = {
    "cib": (
        "Context-intelligence benchmark: quality vs occupancy with filler, distractors and compression",
        add_arguments,
        run,
    )
}
