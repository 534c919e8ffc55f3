"""`winnow compress`: compress a transcript under a token limit, by importance category."""

from __future__ import annotations

import argparse
import sys

FORMATS = ("normalized", "anthropic", "openai")


def _add_compress(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a transcript in any supported format")
    p.add_argument(
        "--limit",
        required=True,
        help="token limit per session: a count (20000) or a share of the session's tokens (30%%)",
    )
    p.add_argument(
        "--to",
        default="normalized",
        metavar="|".join(FORMATS),  # checked in run: a bad value is a one-line error
        help="output: normalized JSONL (ids kept, source_ids/strategy on new units), an Anthropic "
        "Messages body, or an OpenAI chat body (default: %(default)s)",
    )
    p.add_argument("-o", "--output", help="file to write, - or none for standard output")
    p.add_argument(
        "--cache",
        action="store_true",
        help="cache-aware: stable prefix, suffix compressed harder, cache_control breakpoints",
    )
    p.add_argument(
        "--model",
        default="claude-sonnet-4-6",
        help="model whose minimum cacheable length --cache uses (default: %(default)s)",
    )
    p.add_argument(
        "--summarizer",
        default="extractive",
        choices=("extractive", "anthropic", "openai"),
        help="who writes summaries (default: %(default)s, offline)",
    )
    p.add_argument("--summarizer-model", help="model for an LLM summarizer")
    p.add_argument(
        "--base-url", help="API base URL for an LLM summarizer (any OpenAI-compatible endpoint)"
    )
    p.add_argument(
        "--on-overflow",
        default="error",
        choices=("error", "summarize_largest", "truncate_oldest"),  # compressor.OVERFLOW_POLICIES
        help="when the must-keep units alone exceed the limit: fail, summarize the largest "
        "of them first, or drop the oldest (default: %(default)s)",
    )


def _fail(message: str) -> int:
    print(f"winnow compress: {message}", file=sys.stderr)
    return 1


def _parse_limit(text: str) -> tuple[int | None, float | None]:
    """(count, None) or (None, share) from '20000' or '30%'."""
    text = text.strip()
    if text.endswith("%"):
        share = float(text[:-1]) / 100
        if not 0 < share:
            raise ValueError
        return None, share
    n = int(text)
    if n <= 0:
        raise ValueError
    return n, None


def _run_compress(args: argparse.Namespace) -> int:
    import json
    from collections import defaultdict
    from contextlib import nullcontext
    from pathlib import Path

    from rich.console import Console

    from winnow.data.readers import ReadReport, read_paths
    from winnow.data.writers import write_jsonl
    from winnow.serving.cache import CacheAwareCompressor, CacheAwareResult, CacheConfig
    from winnow.serving.compressor import CompressorConfig, MustKeepOverflow, SemanticCompressor
    from winnow.serving.render import to_anthropic, to_openai
    from winnow.serving.tokens import unit_tokens

    if args.output == "-":  # standard output, as for every command
        args.output = None
    if args.to not in FORMATS:
        return _fail(f"--to must be one of {', '.join(FORMATS)}, not {args.to!r}")
    try:
        count, share = _parse_limit(args.limit)
    except ValueError:
        return _fail(f"--limit must be a positive token count or a percentage, not {args.limit!r}")
    path = Path(args.file).expanduser()
    if path.is_dir():
        return _fail(f"{path}: is a folder; give one transcript file")
    report = ReadReport()
    sessions: dict[str, list] = defaultdict(list)
    for unit in read_paths([path], report):
        sessions[unit.session_id].append(unit)
    if not sessions:
        problem = report.problems[0] if report.problems else f"{path}: no messages found"
        return _fail(problem)

    try:
        summarizer = _summarizer(args)
    except Exception as e:  # noqa: BLE001 - the SDK's own error (no key, bad URL) in one line
        return _fail(f"--summarizer {args.summarizer}: {str(e).splitlines()[0]}")
    compressor = SemanticCompressor(
        summarizer=summarizer,
        config=CompressorConfig(on_must_keep_overflow=args.on_overflow),
    )
    cache = CacheAwareCompressor(compressor, CacheConfig(model=args.model)) if args.cache else None
    results = []
    for sid, units in sessions.items():
        limit = count
        if limit is None:
            assert share is not None  # _parse_limit gives one of the two
            before = sum(unit_tokens(u, compressor.counter) for u in units)
            limit = max(1, int(before * share))
        try:
            results.append((sid, limit, (cache or compressor).compress(units, limit)))
        except MustKeepOverflow as e:
            return _fail(
                f"session {sid}: the must-keep units alone need {e.needed:,} tokens, over the "
                f"limit of {e.limit:,} (raise --limit, or pass --on-overflow summarize_largest)"
            )
        except RuntimeError as e:  # no classifier could be loaded
            return _fail(str(e))

    out = open(args.output, "w", encoding="utf-8") if args.output else nullcontext(sys.stdout)
    with out as fh:
        if args.to == "normalized":
            write_jsonl([u for _sid, _limit, r in results for u in r.units], fh)
        else:
            for _sid, _limit, r in results:
                # a body on its own: stub definitions of the tools its messages use
                if isinstance(r, CacheAwareResult):
                    body = r.to_anthropic(True) if args.to == "anthropic" else r.to_openai(True)
                elif args.to == "anthropic":
                    body = to_anthropic(r.units, tools=True)
                else:
                    body = to_openai(r.units, tools=True)
                indent = 2 if len(results) == 1 else None  # several sessions: one body a line
                fh.write(json.dumps(body, ensure_ascii=False, indent=indent) + "\n")
    console = Console(stderr=not args.output)
    limits = f"{share:.0%} of each session's tokens" if share else f"{count:,} tokens"
    _print_table(console, f"{len(results)} session(s), limit {limits}", results, compressor)
    if args.output:
        console.print(f"[bold green]wrote[/] {args.output}")
    for line in report.problems:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0


def _summarizer(args: argparse.Namespace):
    """The summarizer asked for; its client is built now so that a missing key fails early."""
    from winnow.serving import summarizers as sm

    if args.summarizer == "extractive":
        return None
    cls = sm.AnthropicSummarizer if args.summarizer == "anthropic" else sm.OpenAISummarizer
    kw = {"base_url": args.base_url} if args.base_url else {}
    if args.summarizer_model:
        kw["model"] = args.summarizer_model
    summarizer = cls(**kw)
    client = summarizer.client  # the OpenAI SDK raises here on a missing key
    if not (
        getattr(client, "api_key", None) or getattr(client, "auth_token", None) or args.base_url
    ):
        raise ValueError("no API key (set ANTHROPIC_API_KEY)")  # the Anthropic SDK waits for a call
    return summarizer


def _print_table(console, title: str, results, compressor) -> None:
    from collections import Counter

    from rich.table import Table

    from winnow.data.schema import CATEGORIES

    before: Counter = Counter()
    after: Counter = Counter()
    actions: Counter = Counter()
    for _sid, _limit, r in results:
        parts = [r.prefix, r.suffix] if hasattr(r, "prefix") else [r]
        for part in parts:
            before.update(part.tokens_before_by_category)
            after.update(part.tokens_after_by_category)
            actions.update(part.actions)
    table = Table(title=title, header_style="bold", box=None, pad_edge=False)
    for col in ("category", "tokens before", "after", "kept"):
        table.add_column(col, justify="left" if col == "category" else "right")
    for c in CATEGORIES:
        if before[c] or after[c]:
            table.add_row(c, f"{before[c]:,}", f"{after[c]:,}", _share(after[c], before[c]))
    tb, ta = sum(before.values()), sum(after.values())
    table.add_row("[bold]total", f"[bold]{tb:,}", f"[bold]{ta:,}", f"[bold]{_share(ta, tb)}")
    console.print(table)
    console.print("units: " + ", ".join(f"{a} {n:,}" for a, n in actions.most_common()))
    classifier = compressor._classifier
    if classifier is not None:
        console.print(f"categories: {type(classifier).__name__} (units without a category)")


def _share(a: int, b: int) -> str:
    return f"{a / b:.0%}" if b else "-"


COMMANDS = {
    "compress": (
        "compress a transcript under a token limit by importance category, keeping tool pairs whole",
        _add_compress,
        _run_compress,
    ),
}
