"""`winnow compress`: compress a transcript under a token limit, by importance category."""

from __future__ import annotations

import argparse
import sys

FORMATS = ("normalized", "anthropic", "openai")
DEFAULT_LLM = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o"}


def _add_compress(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "file", metavar="FILE", help="a transcript or request body, any supported format"
    )
    p.add_argument(
        "--limit",
        required=True,
        help="token limit per session: a count (20000) or a share of the session's tokens (30%%)",
    )
    p.add_argument(
        "--to",
        default="normalized",
        metavar="{" + ",".join(FORMATS) + "}",  # checked in run: a one-line error, exit 1
        help="normalized: winnow's JSON Lines of units, every session in one file (ids kept, "
        "source_ids/strategy on new units); anthropic / openai: one complete request body per "
        "session (a request read from a file comes back with every field and block winnow did "
        "not change as it was; one for the other API keeps its tool definitions, translated; a "
        "transcript gets --llm-model and stub tool definitions) "
        "(default: %(default)s)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="where to write: for --to anthropic/openai a file when the input holds one session "
        "and a folder (one SESSION.json each) when it holds several; '-' or nothing: standard "
        "output, one request body a line (JSON Lines)",
    )
    p.add_argument(
        "--cache",
        action="store_true",
        help="cache-aware: stable prefix, suffix compressed harder, cache_control breakpoints",
    )
    p.add_argument(
        "--model",
        metavar="DIR",
        help="classifier model directory (default: the shipped model)",
    )
    p.add_argument(
        "--llm-model",
        metavar="NAME",
        help="the LLM the request is for: the body's `model` when the input names none, the "
        "minimum cacheable length --cache places breakpoints by (the input's own model "
        f"first; default {DEFAULT_LLM['anthropic']}), and the model an LLM summarizer calls "
        "unless --summarizer-model says otherwise",
    )
    p.add_argument(
        "--summarizer",
        default="extractive",
        choices=("extractive", "anthropic", "openai"),
        help="who writes summaries (default: %(default)s, offline)",
    )
    p.add_argument("--summarizer-model", metavar="NAME", help="model for an LLM summarizer")
    p.add_argument(
        "--base-url", help="API base URL for an LLM summarizer (any OpenAI-compatible endpoint)"
    )
    p.add_argument(
        "--on-overflow",
        default="summarize",
        choices=("summarize", "error", "summarize_largest", "truncate_oldest"),
        help="when the must-keep units alone exceed the limit: summarize them, the least value "
        "per token first (repeats become a pointer at the copy kept; each change is listed), "
        "fail, summarize the largest first, or drop the oldest (default: %(default)s)",
    )
    p.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="PIN",
        help="keep verbatim, whatever the limit: a unit id, role:ROLE (role:user) or re:PATTERN "
        "(a regular expression searched in each unit's text); repeatable",
    )
    p.add_argument(
        "--manifest",
        metavar="FILE",
        help="write what happened to every input unit as JSON Lines: session, id, category, "
        "scores, action, tokens before and after, output id, and why a must-keep unit changed",
    )


def _fail(message: str) -> int:
    print(f"winnow compress: {message}", file=sys.stderr)
    return 1


def _parse_limit(text: str) -> tuple[int | None, float | None]:
    """(count, None) or (None, share) from '20000' or '30%'; ValueError for anything else
    (zero, negative, inf, nan, fractions of a token)."""
    import math

    text = text.strip()
    if text.endswith("%"):
        share = float(text[:-1]) / 100
        if not (math.isfinite(share) and share > 0):
            raise ValueError(text)
        return None, share
    n = int(text)
    if n <= 0:
        raise ValueError(text)
    return n, None


def _run_compress(args: argparse.Namespace) -> int:
    from collections import defaultdict
    from pathlib import Path

    from rich.console import Console

    from winnow.data.readers import ReadReport, read_paths
    from winnow.serving.cache import CacheAwareCompressor, CacheConfig
    from winnow.serving.compressor import CompressorConfig, MustKeepOverflow, SemanticCompressor
    from winnow.serving.render import OPENAI_MIN_CACHEABLE

    if args.to not in FORMATS:
        return _fail(f"--to must be one of {', '.join(FORMATS)}, not {args.to!r}")
    try:
        count, share = _parse_limit(args.limit)
    except (ValueError, OverflowError):
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
    out_path = None if args.output in (None, "-") else Path(args.output).expanduser()
    if args.to == "normalized" and out_path is not None and args.output.endswith(("/", "\\")):
        return _fail(f"{args.output}: --to normalized writes one file (JSON Lines), not a folder")
    if (
        args.to != "normalized"
        and out_path is not None
        and len(sessions) > 1
        and (out_path.is_file() or out_path.suffix.lower() in (".json", ".jsonl"))
    ):
        return _fail(
            f"{out_path}: {len(sessions)} sessions need a folder (one request body each), "
            "not a file; give -o DIR or -o - for JSON Lines"
        )
    try:
        classifier = None
        if args.model:
            from winnow.serving.classifier import ImportanceClassifier

            classifier = ImportanceClassifier.load(args.model)
        summarizer = _summarizer(args)
    except Exception as e:  # noqa: BLE001 - a bad model directory or the SDK's own error, one line
        what = (
            f"--model {args.model}"
            if args.model and classifier is None
            else f"--summarizer {args.summarizer}"
        )
        return _fail(f"{what}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    try:
        config = CompressorConfig(
            on_must_keep_overflow=args.on_overflow,
            pins=tuple(args.pin),
            target=args.to if args.to != "normalized" else None,  # the limit counts what is sent
        )
    except ValueError as e:
        return _fail(f"--pin: {e}")
    compressor = SemanticCompressor(classifier=classifier, summarizer=summarizer, config=config)
    results = []
    emptied: list[str] = []  # sessions with nothing left under the limit: no output of their own
    for sid, units in sessions.items():
        if args.to != "normalized" and not any(u.role in ("user", "assistant") for u in units):
            # e.g. an Aider session of start-up notes: no limit makes it a request the API takes
            emptied.append(f"session {sid}: no user or assistant message, so no request")
            continue
        limit = count if count is not None else args.limit.strip()  # a share of what is sent
        llm = (
            _request_model(units, args.to)
            or args.llm_model
            or DEFAULT_LLM.get(args.to, DEFAULT_LLM["anthropic"])
        )
        # OpenAI's minimum is one for every model; Claude's is the model's (render's table)
        minimum = OPENAI_MIN_CACHEABLE if args.to == "openai" else None
        engine = (
            CacheAwareCompressor(compressor, CacheConfig(model=llm, min_cacheable_tokens=minimum))
            if args.cache
            else compressor
        )
        try:
            result = engine.compress(units, limit)
            limit = result.token_limit
        except MustKeepOverflow as e:
            what = str(e).split(" alone need", 1)[0]
            return _fail(
                f"session {sid}: {what} alone need {e.needed:,} tokens, over the limit of "
                f"{e.limit:,} (raise --limit, or pass --on-overflow summarize)"
            )
        except RuntimeError as e:  # no classifier could be loaded
            return _fail(str(e))
        if not result.units:
            emptied.append(
                f"session {sid}: nothing is left under the limit of {limit:,} tokens, and an "
                "empty request is no request (raise --limit)"
            )
            continue
        body = _body(args, result) if args.to != "normalized" else None
        if body is not None and not any(
            isinstance(m, dict) and m.get("role") in ("user", "assistant")
            for m in body.get("messages") or ()
        ):  # every message went under the limit: the API rejects a request without one
            emptied.append(f"session {sid}: no user or assistant message, so no request")
            continue
        results.append((sid, limit, result, body))
    if not results:  # one line per session, and nothing written
        for line in emptied:
            _fail(line)
        return 1

    written = _write(args, results, out_path, several=len(sessions) > 1)
    if args.manifest:
        _write_manifest(args.manifest, results)
    console = Console(stderr=out_path is None)
    limit_text = f"{share:.0%} of each session's tokens" if share else f"{count:,} tokens"
    _print_table(console, f"{len(results)} session(s), limit {limit_text}", results, compressor)
    _print_must_keep_changes(console, results)
    console.print(
        _categories_line(sessions, compressor), markup=False, highlight=False, soft_wrap=True
    )
    if written:
        console.print(f"[bold green]wrote[/] {written}")
    if args.manifest:
        console.print(f"[bold green]wrote[/] {args.manifest}")
    for line in emptied:
        console.print(f"{line}: left out", markup=False, highlight=False, soft_wrap=True)
    for line in report.problems:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0


# The reader of each request format: a body keeps its own fields (model too) only in its format.
NATIVE = {"anthropic": "anthropic_messages", "openai": "openai_chat"}


def _request_model(units: list, to: str) -> str | None:
    """The model of the request the units were read from, when the output keeps it (the same
    API, or normalized units); a request written for the other API gets --llm-model."""
    for u in units:
        request = u.extra.get("request")
        if to in NATIVE and u.extra.get("format") != NATIVE[to]:
            continue
        if isinstance(request, dict) and isinstance(request.get("model"), str):
            return request["model"]
    return None


def _body(args: argparse.Namespace, result) -> dict:
    """One session's compressed units as a complete request of the format asked for."""
    model = args.llm_model or DEFAULT_LLM[args.to]
    render = result.to_anthropic if args.to == "anthropic" else result.to_openai
    return render(tools=True, model=model)  # tool definitions when the body would have none


def _write(args: argparse.Namespace, results: list, out_path, several: bool) -> str | None:
    """Write the output; returns what was written, for the closing line (None: stdout).
    `several`: the input held several sessions, so requests go to a folder however many are
    left."""
    import json
    import re
    import sys

    from winnow.data.writers import write_jsonl

    if args.to == "normalized":
        units = [u for _sid, _limit, r, _body in results for u in r.units]
        write_jsonl(units, out_path if out_path is not None else sys.stdout)
        return str(out_path) if out_path is not None else None
    bodies = [(sid, body) for sid, _limit, _r, body in results]
    if out_path is None:  # JSON Lines: one request a line, whatever the number of sessions
        for _sid, body in bodies:
            sys.stdout.write(json.dumps(body, ensure_ascii=False) + "\n")
        return None
    if not several and not out_path.is_dir() and not args.output.endswith(("/", "\\")):
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(
            json.dumps(bodies[0][1], ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
        )
        return str(out_path)
    out_path.mkdir(parents=True, exist_ok=True)
    names: set[str] = set()
    for sid, body in bodies:
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", sid).strip("._") or "session"
        while name in names:
            name += "_"
        names.add(name)
        (out_path / f"{name}.json").write_text(
            json.dumps(body, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
        )
    return f"{out_path}/ ({len(bodies)} request bodies)"


def _summarizer(args: argparse.Namespace):
    """The summarizer asked for; its client is built now so that a missing key fails early."""
    from winnow.serving import summarizers as sm

    if args.summarizer == "extractive":
        return None
    cls = sm.AnthropicSummarizer if args.summarizer == "anthropic" else sm.OpenAISummarizer
    kw = {"base_url": args.base_url} if args.base_url else {}
    if args.summarizer_model or args.llm_model:
        kw["model"] = args.summarizer_model or args.llm_model
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
    for _sid, _limit, r, _body in results:
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


def _categories_line(sessions: dict, compressor) -> str:
    """Where the categories came from: the input's own, or the classifier, for how many units."""
    total = sum(len(units) for units in sessions.values())
    missing = sum(1 for units in sessions.values() for u in units if not u.extra.get("category"))
    if not missing:
        return "categories: the input's own (every unit had one)"
    classifier = compressor._classifier
    info = getattr(classifier, "info", None)
    name = info.get("name") if isinstance(info, dict) else None
    who = f"the classifier {name}" if name else "the heuristic labeller (no classifier model)"
    return f"categories: {missing:,} of {total:,} units labelled by {who} (the input gave them no category)"


def _write_manifest(path: str, results: list) -> None:
    """One JSON line per input unit: what the compression did with it."""
    import json

    with open(path, "w", encoding="utf-8") as fh:
        for sid, _limit, r, *_body in results:
            for row in r.manifest():
                fh.write(json.dumps({"session_id": sid, **row}, ensure_ascii=False) + "\n")


def _print_must_keep_changes(console, results) -> None:
    """Each must-keep unit an overflow changed, and how: none changes silently."""
    changes = [r for _sid, _limit, res, *_body in results for r in res.must_keep_changes]
    if not changes:
        return
    console.print(
        f"[bold yellow]{len(changes)} must-keep unit(s) changed[/] (the limit cannot hold them all):"
    )
    for r in changes:
        console.print(
            f"  {r.id} ({r.category}): {r.action}, {r.tokens_before:,} -> {r.tokens_after:,} "
            f"tokens; {r.reason}",
            markup=False,
            highlight=False,
        )


def _share(a: int, b: int) -> str:
    return f"{a / b:.0%}" if b else "-"


COMMANDS = {
    "compress": (
        "compress a transcript under a token limit by importance category, keeping tool pairs whole",
        _add_compress,
        _run_compress,
    ),
}
