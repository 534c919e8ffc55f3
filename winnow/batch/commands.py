"""CLI commands of winnow.batch: `score` and `serve` (heavy imports happen in `run`)."""

from __future__ import annotations

import argparse
import sys

from winnow.cli import (
    CommandError,
    check_inputs,
    check_output,
    non_negative_int,
    port,
    positive_float,
    positive_int,
)


def _score_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="transcript files or folders")
    p.add_argument(
        "-o",
        "--output",
        default="scores.parquet",
        help="per-unit Parquet (default: %(default)s); per-session totals go beside it as "
        "*.sessions.parquet; both appear only when some unit was scored",
    )
    p.add_argument("--model", default=None, help="model directory (default: the shipped model)")
    p.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local processes, or Ray actors (pays Ray's start-up, ~10 s on a local machine; "
        "worth it on a cluster) (default: %(default)s)",
    )
    p.add_argument(
        "--workers",
        type=non_negative_int,
        default=0,
        help="worker processes / Ray actors, 0 = one per core (default: %(default)s)",
    )
    p.add_argument(
        "--ray-address", default=None, help="Ray cluster address (default: start a local Ray)"
    )


def _score(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from winnow.batch.score import (
        DROP_CATEGORIES,
        SUMMARIZE_CATEGORIES,
        BatchScorer,
        ScoreConfig,
        sessions_path,
    )
    from winnow.cli import reject_stdout
    from winnow.data.schema import DEFAULT_STRATEGIES

    err = Console(stderr=True)
    if error := reject_stdout(args.output, "score writes two files (units and sessions)"):
        err.print(f"winnow score: {error}", markup=False, soft_wrap=True)
        return 1
    check_inputs(args.paths)
    check_output(args.output)
    config = ScoreConfig(args.model, args.engine, args.workers, args.ray_address)
    progress = Progress(
        TextColumn("scoring"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("files"),
        TextColumn("{task.fields[units]:,} units"),
        TimeElapsedColumn(),
        console=err,
    )
    task = progress.add_task("score", total=None, units=0)

    problems_of_files = 0  # printed as each file is scored

    def on_file(fs) -> None:
        nonlocal problems_of_files
        problems_of_files += len(fs.problems)
        progress.update(
            task, advance=1, units=progress.tasks[task].fields["units"] + fs.table.num_rows
        )
        for line in fs.problems:
            progress.console.print(
                line, markup=False, highlight=False, style="yellow", soft_wrap=True
            )

    def on_start(n_files: int) -> None:
        progress.update(task, total=n_files)
        progress.start()  # only once the job is set up, so a set-up error prints alone

    try:
        summary = BatchScorer(config).run(
            args.paths, args.output, on_file=on_file, on_start=on_start
        )
    except ValueError as e:  # bad configuration, e.g. an unusable model directory
        progress.stop()  # before the message: a live progress bar would take its line
        raise CommandError(str(e)) from None
    except ModuleNotFoundError as e:
        if e.name != "ray":
            raise
        progress.stop()
        raise CommandError("--engine ray needs Ray: pip install 'winnow[ray]'") from None
    finally:
        progress.stop()
    for line in summary.problems[: len(summary.problems) - problems_of_files]:  # the listing's
        err.print(line, markup=False, highlight=False, style="yellow", soft_wrap=True)

    def share(tokens: int) -> str:
        return f"{tokens / summary.tokens:.1%}" if summary.tokens else "-"

    by_cat = summary.tokens_by_category
    table = Table(title=f"winnow score ({args.engine})", show_footer=True)
    table.add_column("category", footer="total")
    table.add_column("strategy")
    table.add_column("tokens", justify="right", footer=f"{summary.tokens:,}")
    table.add_column("share", justify="right", footer="100%")
    for cat, tok in by_cat.most_common():
        table.add_row(cat, DEFAULT_STRATEGIES.get(cat, "?"), f"{tok:,}", share(tok))
    for reason, paths in summary.skipped_files.items():
        err.print(f"skipped {len(paths):,} file(s), {reason}:", markup=False, highlight=False)
        for path in paths:
            err.print(f"  {path}", markup=False, highlight=False, soft_wrap=True)
    if not summary.units:
        err.print(
            f"winnow score: no units scored ({len(summary.problems)} problems); nothing written",
            markup=False,
            soft_wrap=True,
        )
        return 1
    out = Console()
    out.print(table)
    out.print(
        f"{summary.files} files, {summary.sessions} sessions, {summary.units:,} units in "
        f"{summary.seconds:.1f}s ({summary.units_per_s:,.0f} units/s); "
        f"{len(summary.problems)} problems; wrote {args.output} and {sessions_path(args.output)}; "
        f"by the default strategies the compressor could drop {share(sum(by_cat[c] for c in DROP_CATEGORIES))} "
        f"of the tokens and summarize {share(sum(by_cat[c] for c in SUMMARIZE_CATEGORIES))}",
        soft_wrap=True,
    )
    return 0


def _serve_args(p: argparse.ArgumentParser) -> None:
    # defaults are ServiceConfig's (not imported here: FastAPI is slow to import)
    p.add_argument(
        "--host", default="127.0.0.1", help="bind address (default: %(default)s, loopback only)"
    )
    p.add_argument("--port", type=port, default=8000, help="port (default: %(default)s)")
    p.add_argument("--model", default=None, help="model directory (default: the shipped model)")
    p.add_argument(
        "--token",
        default=None,
        help="require `Authorization: Bearer TOKEN` (default: $WINNOW_TOKEN, else none)",
    )
    p.add_argument(
        "--max-bytes",
        type=positive_int,
        default=None,
        help="largest request body accepted (default: 8 MiB)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="onnxruntime intra-op threads (default: %(default)s)",
    )
    p.add_argument(
        "--body-timeout",
        type=positive_float,
        default=None,
        help="seconds a request body may take to arrive; then 408 (default: 30)",
    )
    p.add_argument(
        "--max-uploads",
        type=positive_int,
        default=None,
        help="request bodies read at once; more get 503 (default: 8)",
    )


def _serve(args: argparse.Namespace) -> int:
    import os

    import uvicorn

    from winnow.serving.service import ServiceConfig, create_app

    limits = {"max_bytes": args.max_bytes, "body_timeout_s": args.body_timeout,
              "max_uploads": args.max_uploads}  # fmt: skip
    config = ServiceConfig(
        model=args.model,
        token=args.token or os.environ.get("WINNOW_TOKEN"),
        threads=args.threads,
        **{k: v for k, v in limits.items() if v is not None},
    )
    try:
        app = create_app(config)
    except ValueError as e:
        raise CommandError(str(e)) from None
    if config.token is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"winnow serve: warning: {args.host} without --token: anyone who reaches it can use it",
            file=sys.stderr,
        )
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


COMMANDS = {
    "score": (
        "Classify every unit of transcripts into Parquet (local processes or Ray)",
        _score_args,
        _score,
    ),
    "serve": ("Serve classify/compress over HTTP (FastAPI)", _serve_args, _serve),
}
