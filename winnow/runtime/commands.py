"""`winnow economics` and `winnow budget`: the harness runtime's command line."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path


def _console():
    from rich.console import Console

    console = Console()
    # piped output (logs, CI, tests) gets room for a whole table instead of rich's 80 columns
    return console if console.is_terminal else Console(width=120)


def _err(command: str, message: str) -> int:
    print(f"winnow {command}: {message}", file=sys.stderr)
    return 1


def _count(text: str, name: str) -> int:
    """A positive token count from '250000', '250_000', '250,000' or '250k'; ValueError otherwise."""
    t = text.strip().lower().replace(",", "").replace("_", "")
    scale = 1000 if t.endswith("k") else 1
    try:
        value = float(t[:-1] if scale > 1 else t) * scale
    except ValueError:
        raise ValueError(f"{name} must be a number of tokens, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise ValueError(f"{name} must be a whole number of tokens >= 0, got {text!r}")
    return int(value)


# -- economics --------------------------------------------------------------------------------


def _add_economics(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tokens", default="250000", help="session context in tokens (default: %(default)s)"
    )
    p.add_argument(
        "--compacted", default="19000", help="context after compaction (default: %(default)s)"
    )
    p.add_argument("--summary", default="5000", help="summary output tokens (default: %(default)s)")
    p.add_argument(
        "--resume-probability", default=None, help="P(resume after the TTL), 0..1: adds EV columns"
    )
    p.add_argument("--profile", action="append", help="only these profiles (repeatable)")
    p.add_argument(
        "--custom",
        metavar="READ/WRITE/OUTPUT[/TTL_S]",
        help="add a profile of your own, e.g. 0.1/1.25/5/300",
    )


def _custom_profile(spec: str):
    from winnow.runtime.economics import CacheProfile

    parts = [float(x) for x in spec.split("/")]
    if len(parts) not in (3, 4) or min(parts) <= 0 or not all(map(math.isfinite, parts)):
        raise ValueError(spec)
    ttl = int(parts[3]) if len(parts) == 4 else 300
    return CacheProfile("custom", parts[0], parts[1], parts[2], ttl_s=ttl)


def _run_economics(args: argparse.Namespace) -> int:
    from rich.table import Table

    from winnow.runtime.economics import PROFILES, estimate

    try:
        tokens = _count(args.tokens, "--tokens")
        compacted = _count(args.compacted, "--compacted")
        summary = _count(args.summary, "--summary")
        p = None if args.resume_probability is None else float(args.resume_probability)
    except ValueError as e:
        return _err(
            "economics", str(e).replace("could not convert string to float", "bad probability")
        )
    if p is not None and not 0 <= p <= 1:
        return _err(
            "economics", f"--resume-probability must be in 0..1, got {args.resume_probability}"
        )
    if compacted >= tokens:
        return _err("economics", f"--compacted ({compacted:,}) must be below --tokens ({tokens:,})")
    profiles = dict(PROFILES)
    names = args.profile or ([] if args.custom else list(PROFILES))
    unknown = [n for n in names if n not in profiles]
    if unknown:
        return _err("economics", f"unknown profile {unknown[0]!r}; known: {', '.join(PROFILES)}")
    if args.custom:
        try:
            profiles["custom"] = _custom_profile(args.custom)
        except ValueError:
            return _err(
                "economics", f"--custom wants READ/WRITE/OUTPUT[/TTL_S], got {args.custom!r}"
            )
        names.append("custom")

    table = Table(
        title=f"Idle compaction of {tokens:,} tokens to {compacted:,} ({summary:,}-token summary)",
        caption="token equivalents at the base input price; cost = read*T + output*S, "
        "saving = write*(T - C), break-even = cost / saving",
    )
    for col in ("profile", "read/write/out", "TTL", "cost", "saving", "break-even p"):
        table.add_column(col, justify="left" if col == "profile" else "right", no_wrap=True)
    if p is not None:
        table.add_column(f"EV @ p={p:g}", justify="right", no_wrap=True)
        table.add_column("arm", justify="center", no_wrap=True)
    for name in names:
        prof = profiles[name]
        est = estimate(tokens, compacted, summary, prof)
        ttl = f"{prof.ttl_s // 3600} h" if prof.ttl_s >= 3600 else f"{prof.ttl_s // 60} min"
        row = [
            name,
            f"{prof.read:g}/{prof.write:g}/{prof.output:g}x",
            ttl,
            f"{est.cost:,.0f}",
            f"{est.saving:,.0f}",
            f"{est.break_even:.1%}",
        ]
        if p is not None:
            ev = est.expected_value(p)
            row += [f"{ev:+,.0f}", "[green]yes[/]" if ev > 0 else "[red]no[/]"]
        table.add_row(*row)
    _console().print(table)
    return 0


# -- budget -----------------------------------------------------------------------------------


def _add_budget(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "values",
        nargs="*",
        metavar="USED [WINDOW] | report [FILE] | hook",
        help="tokens in use and the window (default 200000); `report` over a samples file; "
        "`hook`: the Claude Code settings entry for the PostToolUse hook",
    )
    p.add_argument(
        "--threshold",
        default=None,
        help="percent of the window at which to checkpoint; exit 2 at or over it "
        "(default: $HARNESS_CTX_THRESHOLD, else 40)",
    )
    p.add_argument("--plot", default=None, help="report: trend plot PNG (default: FILE with .png)")


def _threshold(args: argparse.Namespace) -> float:
    from winnow.runtime.budget import env_threshold

    if args.threshold is None:
        return env_threshold()
    value = float(args.threshold.rstrip("%"))
    if not 0 < value <= 100:
        raise ValueError
    return value


def _run_budget(args: argparse.Namespace) -> int:
    from winnow.runtime.budget import DEFAULT_WINDOW, occupancy

    try:
        threshold = _threshold(args)
    except ValueError:
        return _err("budget", f"--threshold must be a percent in (0, 100], got {args.threshold!r}")
    if args.values[:1] == ["report"]:
        return _budget_report(args, threshold)
    if args.values == ["hook"]:
        return _budget_hook()
    if not 1 <= len(args.values) <= 2:
        return _err("budget", "usage: winnow budget USED [WINDOW] | report [FILE] | hook")
    try:
        used = _count(args.values[0], "USED")
        window = _count(args.values[1], "WINDOW") if len(args.values) == 2 else DEFAULT_WINDOW
    except ValueError as e:
        return _err("budget", str(e))
    if window <= 0:
        return _err("budget", "WINDOW must be > 0")
    pct = occupancy(used, window)
    print(f"{math.floor(pct)}% {_budget_advice(used, window, pct, threshold)}")
    return 2 if pct >= threshold else 0


def _budget_advice(used: int, window: int, pct: float, threshold: float) -> str:
    """What the percentage means: the rest of the line after `NN%` (scripts read the first word)."""
    where = f"of the {window:,}-token window"
    if used > window:
        return (
            f"{where}: the window is exceeded by {used - window:,} tokens; the next request "
            "will not fit: compact or start a new session now"
        )
    if pct >= threshold:
        return f"{where}: over the {threshold:g}% line: checkpoint now (summarize, then compact)"
    return f"{where}: under the {threshold:g}% line"


def _budget_hook() -> int:
    """Print the .claude/settings.json entry that runs the packaged PostToolUse hook."""
    import json
    import shlex

    script = Path(__file__).resolve().parent / "hooks" / "claude_code_posttooluse.py"
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    entry = {"matcher": "*", "hooks": [{"type": "command", "command": command}]}
    print(json.dumps({"hooks": {"PostToolUse": [entry]}}, indent=2))
    return 0


def _budget_report(args: argparse.Namespace, threshold: float) -> int:

    from rich.table import Table

    from winnow.runtime.budget import plot, read_samples, report

    if len(args.values) > 2:
        return _err("budget", "usage: winnow budget report [FILE]")
    path = Path(args.values[1] if len(args.values) == 2 else ".winnow/budget.jsonl")
    if not path.is_file():
        return _err("budget", f"no samples file at {path}")
    samples = read_samples(path)
    if not samples:
        return _err("budget", f"{path} holds no samples")
    r = report(samples)
    table = Table(title=f"Context budget: {path}", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("samples", f"{r.count:,}")
    table.add_row("max", f"{r.max_percent:.1f}%")
    table.add_row("last", f"{r.last_percent:.1f}%")
    table.add_row("threshold", f"{threshold:g}%")
    table.add_row("crossings", f"{r.crossings}")
    table.add_row("samples over", f"{r.over:,}")
    out = plot(samples, threshold, args.plot or path.with_suffix(".png"))
    table.add_row("plot", str(out))
    _console().print(table)
    return 0


# -- audit ------------------------------------------------------------------------------------


def _add_audit(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="AUDIT.jsonl", help="an idle compactor's audit log")


def _pct(value: object) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""


def _check_archive(log: Path, archive: str, entry: dict) -> str:
    """Whether the archive restores the very conversation the entry replaced (its sha256)."""
    from hashlib import sha256

    from winnow.runtime.archive import restore

    a = Path(archive) if Path(archive).is_file() else log.parent / Path(archive).name
    try:
        encoded = restore(a).encode()
    except OSError:
        return "[red]missing[/]"
    except (ValueError, KeyError, TypeError) as err:
        from rich.markup import escape

        return f"[red]unreadable: {escape(str(err))}[/]"
    if "sha256_before" in entry:
        same = sha256(encoded).hexdigest() == entry["sha256_before"]
        return "[green]restores[/]" if same else "[red]content differs[/]"
    # entries written before hashes were recorded: the size is all there is to compare
    same = len(encoded) == entry.get("bytes_before")
    return "[green]restores (size only)[/]" if same else "[red]size differs[/]"


def _run_audit(args: argparse.Namespace) -> int:
    """Print the mutations and check each archive restores the exact conversation it replaced."""
    import datetime as dt

    from rich.markup import escape
    from rich.table import Table

    from winnow.runtime.archive import read_audit

    path = Path(args.file)
    if not path.is_file():
        return _err("audit", f"no audit log at {path}")
    problems: list[str] = []  # damaged lines, each named; the entries around them still count
    try:
        entries = [e for e in read_audit(path, problems) if isinstance(e, dict) and "event" in e]
    except ValueError as err:  # not UTF-8 at all
        return _err("audit", f"not an audit log (JSON Lines): {err}")
    if not entries:
        for line in problems[1:]:
            _err("audit", f"{line}, skipped")
        first = f" ({problems[0]})" if problems else ""
        return _err("audit", f"{path} holds no audit entries{first}")
    table = Table(title=f"audit log {escape(str(path))}")
    for col in ("time (UTC)", "event", "trigger", "tokens", "est. hit", "cache hit"):
        right = col not in ("event", "trigger")
        table.add_column(col, no_wrap=True, justify="right" if right else "left")
    table.add_column("archive")
    table.add_column("check", no_wrap=True)
    bad = 0
    for entry in entries:
        archive = entry.get("archive")
        check = ""
        if isinstance(archive, str) and archive:
            check = _check_archive(path, archive, entry)
            bad += not check.startswith("[green")
        elif entry.get("reason"):  # why a compaction was not applied
            check = escape(str(entry["reason"]))
        try:
            when = dt.datetime.fromtimestamp(entry.get("time", 0), dt.timezone.utc)
            stamp = when.strftime("%Y-%m-%d %H:%M:%S")
        except (TypeError, ValueError, OverflowError, OSError):
            stamp = "?"
        before, after = entry.get("tokens_before"), entry.get("tokens_after")
        tokens = f"{before:,} -> {after:,}" if _is_int(before) and _is_int(after) else ""
        table.add_row(
            stamp,
            escape(str(entry.get("event", "?"))),
            escape(str(entry.get("trigger", ""))),
            tokens,
            _pct(entry.get("estimated_cache_hit")),
            _pct(entry.get("cache_hit")),
            escape(Path(archive).name) if isinstance(archive, str) else "",
            check,
        )
    _console().print(table)
    for line in problems:  # an entry there could not be checked: exit 1
        _err("audit", f"{line}, skipped")
    return 1 if bad or problems else 0


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


COMMANDS = {
    "economics": (
        "expected value of idle compaction per provider cache profile",
        _add_economics,
        _run_economics,
    ),
    "budget": (
        "context occupancy (exit 2 past the threshold), or a report of recorded samples",
        _add_budget,
        _run_budget,
    ),
    "audit": (
        "an idle compaction audit log, each archive checked to restore its conversation",
        _add_audit,
        _run_audit,
    ),
}
