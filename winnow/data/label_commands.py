"""`winnow label` (heuristic labels + hand-label join) and `winnow dataset` (session split)."""

from __future__ import annotations

import argparse

from winnow.cli import CommandError, check_inputs, check_output, non_negative_int


def _add_label(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a Parquet file from `winnow extract`, or transcript files/folders",
    )
    p.add_argument(
        "-o",
        "--output",
        default="labeled.parquet",
        help="Parquet file to write, - for standard output (default: %(default)s)",
    )
    p.add_argument(
        "--labels",
        nargs="+",
        default=[],
        metavar="FILE",
        help='JSONL files of {"id", "category"} lines (hand or teacher labels); they override the '
        "heuristic; where files disagree on an id the first file given wins",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="score the heuristic labels against --labels (exit 1 when no label matches a unit)",
    )
    p.add_argument(
        "--show",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="print N random units per category (default: %(default)s)",
    )


def _load(paths: list[str], console):
    """(pyarrow table, units) from a Parquet file of units or from transcripts."""
    import tempfile
    from pathlib import Path

    import pyarrow.parquet as pq

    from winnow.data.extract import extract, load_units
    from winnow.data.readers import ReadReport

    if len(paths) == 1 and paths[0].endswith(".parquet"):
        return pq.read_table(paths[0]), list(load_units(paths[0]))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "messages.parquet"
        report = extract(paths, out, report=ReadReport())
        for line in report.problems[:20]:
            console.print(f"[yellow]{line}[/]", highlight=False, soft_wrap=True)
        if not report.files:
            return None, []
        return pq.read_table(out), list(load_units(out))


def _run_label(args: argparse.Namespace) -> int:
    import time

    import pyarrow.parquet as pq
    from rich.console import Console

    from winnow.cli import Output
    from winnow.data.labeling import (
        Labeler,
        LFAnalysis,
        apply_labels,
        evaluate_labeler,
        load_labels,
        with_label_columns,
    )

    check_inputs([*args.paths, *args.labels])
    check_output(args.output)
    err = Console(stderr=True)
    console = err if args.output == "-" else Console()
    start = time.perf_counter()
    with err.status("reading units"):
        try:
            table, units = _load(args.paths, err)
        except (ValueError, KeyError) as e:  # pyarrow's errors are ValueErrors
            raise CommandError(f"{args.paths[0]}: not a Parquet file of units ({e})") from None
    if not units:
        err.print("[bold red]winnow label:[/] no units read; nothing written")
        return 1
    with err.status(f"labelling {len(units):,} units"):
        labeled = Labeler().label(units)
    analysis = LFAnalysis.from_labeled(labeled)
    heuristic = {lu.unit.id: lu.category for lu in labeled}

    join = load_labels(args.labels, known_ids=set(heuristic)) if args.labels else None
    if join is not None:
        for line in join.problems + join.disagreements:
            err.print(f"[yellow]{line}[/]", highlight=False, soft_wrap=True)
        if join.unknown:
            files = ", ".join(f"{n:,} in {path}" for path, n in join.unknown.items())
            err.print(
                f"{sum(join.unknown.values()):,} labels name units not in this input "
                f"({files}): ignored",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    if args.report and (join is None or not join.labels):
        why = "give --labels" if join is None else "no label names a unit of this input"
        err.print(
            f"[bold red]winnow label:[/] --report has nothing to score ({why}); nothing written",
            soft_wrap=True,
        )
        return 1
    if join is not None:
        n = apply_labels(labeled, join.labels)
        console.print(f"joined {n:,} labels from {len(args.labels)} file(s)")

    table = with_label_columns(table, labeled)
    with Output(args.output) as out:
        pq.write_table(table, out.path, compression="zstd")
        out.commit()

    _print_analysis(console, analysis, labeled)
    if args.report and join is not None:
        _print_report(console, evaluate_labeler(heuristic, join.labels))
    if args.show:
        _print_samples(console, labeled, args.show)
    where = "standard output" if out.to_stdout else args.output
    console.print(
        f"[bold green]wrote[/] {where}: {len(labeled):,} units, "
        f"{len({lu.unit.session_id for lu in labeled}):,} sessions ({time.perf_counter() - start:.1f} s)"
    )
    return 0


def _print_analysis(console, analysis, labeled) -> None:
    from collections import Counter

    from rich.table import Table

    from winnow.data.labeling import LFS

    tiers = {f.name: f.tier for f in LFS}
    t = Table(title="labelling functions", header_style="bold", box=None)
    for col in ("lf", "tier", "polarity", "coverage", "overlaps", "conflicts", "decided"):
        t.add_column(
            col, justify="left" if col in ("lf", "polarity") else "right", no_wrap=col == "lf"
        )
    for r in analysis.summary():
        t.add_row(
            r["lf"],
            str(tiers.get(r["lf"], "")),
            ", ".join(r["polarity"]),
            *(f"{r[k]:.1%}" for k in ("coverage", "overlaps", "conflicts", "decided")),
        )
    console.print(t)
    final = Counter(lu.category for lu in labeled)
    hand = Counter(lu.category for lu in labeled if lu.label_source == "hand")
    d = Table(title="label distribution", header_style="bold", box=None)
    for col in ("category", "units", "share", "hand"):
        d.add_column(col, justify="left" if col == "category" else "right")
    from winnow.data.schema import CATEGORIES

    for c in CATEGORIES:
        d.add_row(c, f"{final[c]:,}", f"{final[c] / max(1, len(labeled)):.1%}", f"{hand[c]:,}")
    console.print(d)


def _print_report(console, rep) -> None:
    from rich.table import Table

    t = Table(
        title=f"heuristic vs gold: {rep.n:,} units, accuracy {rep.accuracy:.1%}, macro F1 {rep.macro_f1:.3f}",
        header_style="bold",
        box=None,
    )
    for col in ("category", "precision", "recall", "f1", "support"):
        t.add_column(col, justify="left" if col == "category" else "right")
    for c, m in rep.per_category.items():
        if m["support"] or m["precision"]:
            t.add_row(
                c,
                f"{m['precision']:.2f}",
                f"{m['recall']:.2f}",
                f"{m['f1']:.2f}",
                str(m["support"]),
            )
    console.print(t)


def _print_samples(console, labeled, n: int) -> None:
    import random

    from rich.markup import escape

    from winnow.cli import printable
    from winnow.data.schema import CATEGORIES

    rng = random.Random(0)
    for c in CATEGORIES:
        xs = [lu for lu in labeled if lu.category == c]
        if not xs:
            continue
        console.rule(f"{c} ({len(xs):,})")
        for lu in rng.sample(xs, min(n, len(xs))):
            u = lu.unit
            head = printable(" ".join(u.text.split()))[:160]  # no terminal controls
            what = printable(f"{u.role}/{u.kind}" + (f"/{u.tool_name}" if u.tool_name else ""))
            console.print(f"[dim]{lu.label_source} {escape(what)}[/] {escape(head)}")


def _add_dataset(p: argparse.ArgumentParser) -> None:
    p.add_argument("labeled", help="a Parquet file from `winnow label`")
    p.add_argument(
        "-o",
        "--output",
        default="dataset",
        metavar="DIR",
        help="folder to write (default: %(default)s)",
    )
    p.add_argument(
        "--ratios",
        type=float,
        nargs=3,
        default=(0.7, 0.1, 0.2),
        metavar=("TRAIN", "VAL", "TEST"),
        help="split ratios by session (default: 0.7 0.1 0.2)",
    )
    p.add_argument(
        "--seed", default="winnow-v1", help="salt of the session hash (default: %(default)s)"
    )


def _run_dataset(args: argparse.Namespace) -> int:
    import sys

    from rich.console import Console
    from rich.table import Table

    from winnow.cli import reject_stdout
    from winnow.data.dataset import SplitConfig, build_dataset

    if error := reject_stdout(args.output, "a data set is a folder of files"):
        print(f"winnow dataset: {error}", file=sys.stderr)
        return 1
    check_inputs([args.labeled])
    check_output(args.output, folder=True)
    try:
        config = SplitConfig(ratios=tuple(args.ratios), seed=args.seed)
        info = build_dataset(args.labeled, args.output, config)
    except ValueError as e:
        print(f"winnow dataset: {e}", file=sys.stderr)
        return 1
    t = Table(title=f"data set in {args.output}", header_style="bold", box=None)
    for col in ("split", "sessions", "units", "hand sessions", "hand units"):
        t.add_column(col, justify="left" if col == "split" else "right")
    for name, s in info["splits"].items():
        t.add_row(
            name,
            f"{s['sessions']:,}",
            f"{s['units']:,}",
            f"{s['hand_labeled_sessions']:,}",
            f"{s['hand_labeled_units']:,}",
        )
    Console().print(t)
    return 0


COMMANDS = {
    "label": (
        "label units by importance category (heuristic LFs, optional hand labels)",
        _add_label,
        _run_label,
    ),
    "dataset": (
        "split labelled units into train/validation/test Parquet by session",
        _add_dataset,
        _run_dataset,
    ),
}
