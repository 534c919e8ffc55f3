"""`winnow extract`: read transcripts of any supported format into one Parquet file of units."""

from __future__ import annotations

import argparse


def _add_extract(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths", nargs="+", metavar="PATH", help="transcript files or folders (read recursively)"
    )
    p.add_argument(
        "-o",
        "--output",
        default="messages.parquet",
        help="Parquet file to write, - for standard output (default: %(default)s)",
    )


def _run_extract(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from winnow.cli import Output, check_inputs, check_output
    from winnow.data.extract import extract
    from winnow.data.readers import ReadReport
    from winnow.data.readers.base import iter_files

    check_inputs(args.paths)
    check_output(args.output)
    report = ReadReport()
    files = sum(1 for _ in iter_files(Path(p).expanduser() for p in args.paths))
    start = time.perf_counter()
    with Progress(
        TextColumn("[bold]extract"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[name]}"),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("files", total=files, name="")
        first = True

        def on_file(path) -> None:
            nonlocal first
            if not first:
                progress.advance(task)
            first = False
            progress.update(task, name=path.name)

        with Output(args.output) as out:
            extract(args.paths, out.path, report=report, on_file=on_file)
            progress.update(task, completed=files)
            if report.files:
                out.commit()
    console = Console(stderr=out.to_stdout)
    where = "standard output" if out.to_stdout else args.output
    _print_summary(console, report, where, time.perf_counter() - start)
    return 0 if report.files else 1


def _print_summary(console, report, output: str, seconds: float) -> None:
    from rich.markup import escape
    from rich.table import Table

    if report.files:
        console.print(
            f"[bold green]wrote[/] {escape(output)}: {report.units:,} units from "
            f"{len(report.sessions):,} sessions in {report.files:,} files ({seconds:.1f} s)"
        )
    else:
        console.print("[bold red]nothing could be read[/]; no file written")
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("", style="dim")
    table.add_column("counts")
    for title, counter in (
        ("formats", report.formats),
        ("kind", report.units_by_kind),
        ("role", report.units_by_role),
    ):
        if counter:
            table.add_row(title, ", ".join(f"{k} {v:,}" for k, v in counter.most_common()))
    console.print(table)
    if report.skipped:
        skipped = Table("skipped records", "n", header_style="bold", box=None, pad_edge=False)
        for reason, n in report.skipped.most_common():
            skipped.add_row(reason, f"{n:,}")
        console.print(skipped)
    for reason, paths in report.skipped_files.items():
        console.print(f"[bold]skipped {len(paths):,} file(s), {reason}:[/]")
        for path in paths:
            console.print(f"  {path}", markup=False, highlight=False, soft_wrap=True)
    if report.problems:
        console.print(f"[bold yellow]{len(report.problems)} problem(s):[/]")
        for line in report.problems:
            console.print(line, markup=False, highlight=False, soft_wrap=True)


COMMANDS = {
    "extract": (
        "read transcripts (Claude Code, Codex, Copilot, Gemini, SWE-agent, OpenHands, Aider, chat JSON) into a Parquet file of units",
        _add_extract,
        _run_extract,
    ),
}
