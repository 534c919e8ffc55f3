"""A/B benchmark: winnow's compressor against the compressor it replaced, oldest-first
truncation and observation masking, in one run on the same units and the same limits.

    python scripts/bench_ab.py --baseline-src /tmp/ab-base     # git worktree add /tmp/ab-base 64fead8
    python scripts/bench_ab.py --sessions 20 --budgets 0.3      # a quick look

For each session of ../shared/traces (at least --min-tokens long) and each budget (a share of
the session's tokens as sent: rendered as an Anthropic request, read back and counted), every
method gets the same integer limit:
- winnow: SemanticCompressor, default configuration (graceful must-keep overflow).
- current: the compressor of --baseline-src (a checkout of the commit before the allocator, or
  of main where a branch left it), run in a subprocess on the very units this process read, in
  its default configuration, except that a default of `error` (which fails: those failures are
  counted apart) becomes `summarize_largest` for its figures.
- truncation / masking: winnow.serving.baselines.
Categories and scores come from the shipped classifier (or --categories: out-of-fold ones from
scripts/oof_categories.py, each source's units scored by a model that never saw that source),
the same for every method; never from the gold labels. Figures, per method and budget:
- must-keep verbatim: hand-labelled must-keep units (data/labels) whose text the output holds
  unchanged, over all sessions and over the sessions of the session-split test set (the
  transformer model of 64fead8 never trained on them; the shipped n-gram model trains on
  every hand label, so for it they are not unseen: its unseen-source figures are
  `winnow evaluate --by-source`'s);
- error lines kept: hand-labelled error units whose error lines (strategies.error_lines; the
  first line when none) all survive in what the unit became;
- needed kept: a label-free check: a tool result is "needed" when a distinctive token it first
  introduced (a path, an identifier, a number) appears again later in the session; the share
  of needed results one of whose such tokens survives in what the result became;
- used: output tokens as sent over the limit, summed (and the lowest session); over: outputs
  past the limit as sent; invalid: outputs tests/api_validate rejects; fail: runs that raise;
- wasted: summary calls of a stand-in LLM summarizer (counted, deterministic) whose text is in
  no output unit (one more run of winnow and of the current compressor with it).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGETS = (0.1, 0.2, 0.3, 0.5)


def _use_source(src: str) -> None:
    """Import winnow from `src` (the baseline checkout), not from the installed editable one."""
    sys.meta_path[:] = [
        f for f in sys.meta_path if "Editable" not in getattr(f, "__name__", type(f).__name__)
    ]
    sys.path.insert(0, src)


# --- a summarizer that stands for an LLM --------------------------------------------------------


class StandInLLM:
    """Counts its calls and answers with the extractive summary: deterministic, free, and not
    an ExtractiveSummarizer, so a compressor treats it as a model it pays for."""

    def __init__(self, counter):
        from winnow.serving.summarizers import ExtractiveSummarizer

        self.inner = ExtractiveSummarizer(counter)
        self.made: list[str] = []
        self._lock = threading.Lock()

    def summarize(self, texts, max_tokens):
        out = self.inner.summarize(texts, max_tokens)
        with self._lock:
            self.made.append(out)
        return out


def wasted(made: list[str], units) -> int:
    """Summaries written whose text is in no output unit."""
    texts = [u.text for u in units]
    return sum(1 for m in made if m and not any(m in t for t in texts))


# --- the baseline worker (runs with --baseline-src on sys.path) -------------------------------


def worker(src: str, path_in: str, path_out: str) -> None:
    _use_source(src)
    from winnow.serving.compressor import CompressorConfig, MustKeepOverflow, SemanticCompressor
    from winnow.serving.tokens import default_token_counter

    counter = default_token_counter()
    policy = CompressorConfig().on_must_keep_overflow
    policy = "summarize_largest" if policy == "error" else policy
    with open(path_in, "rb") as fh:
        jobs = pickle.load(fh)  # [(key, [unit dicts], {budget: limit})]
    out = {}
    for key, records, limits in jobs:
        from winnow.data.schema import Unit

        units = [Unit.from_dict(r) for r in records]
        for b, limit in limits.items():
            row = {}
            strict = SemanticCompressor(classifier=object(), token_counter=counter)
            try:
                strict.compress(units, limit)
                row["strict_fail"] = False
            except MustKeepOverflow:
                row["strict_fail"] = True
            comp = SemanticCompressor(
                classifier=object(),
                token_counter=counter,
                config=CompressorConfig(on_must_keep_overflow=policy),
            )
            try:
                row["units"] = [u.to_dict() for u in comp.compress(units, limit).units]
            except Exception as e:  # noqa: BLE001 - counted as a failed run
                row["error"] = f"{type(e).__name__}: {e}"
            llm = StandInLLM(counter)
            comp = SemanticCompressor(
                classifier=object(),
                summarizer=llm,
                token_counter=counter,
                config=CompressorConfig(on_must_keep_overflow=policy),
            )
            try:
                res = comp.compress(units, limit).units
                row["calls"], row["wasted"] = len(llm.made), wasted(llm.made, res)
            except Exception:  # noqa: BLE001
                row["calls"] = row["wasted"] = None
            out[key, b] = row
    with open(path_out, "wb") as fh:
        pickle.dump(out, fh)


# --- data ---------------------------------------------------------------------------------------


def load_sessions(traces: Path):
    from winnow.data.readers import read_paths

    sessions: dict[tuple[str, str], list] = defaultdict(list)
    for u in read_paths([traces]):
        sessions[(u.extra.get("source", ""), u.session_id)].append(u)
    return [(k, s) for k, s in sorted(sessions.items())]


def load_gold(labels_dir: Path) -> dict[str, str]:
    gold: dict[str, str] = {}
    for f in sorted(labels_dir.glob("*.jsonl")):
        if f.name == "corrections.jsonl":  # merge_labels.py's input, already in gold.jsonl
            continue
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                gold[rec["id"]] = rec["category"]
    return gold


def held_out(sessions, gold: dict[str, str]) -> set[str]:
    """The session ids of the session-split test set (`winnow dataset`'s), recomputed as
    training splits them."""
    from winnow.data.dataset import assign_splits

    keys = {
        s[0].session_id: (any(u.id in gold for u in s), s[0].extra.get("format", ""))
        for _k, s in sessions
    }
    return {sid for sid, split in assign_splits(keys).items() if split == "test"}


def categorize(sessions, model: Path | None, categories: Path | None = None) -> str:
    """Each unit's category and scores from the shipped classifier, as `winnow classify` writes,
    or from a JSONL file of {"id", "category", "scores"} (scripts/oof_categories.py)."""
    if categories is not None:
        return read_categories(sessions, categories)
    from winnow.serving.categorizer import categorizer_name, load_categorizer

    clf = load_categorizer(model)
    for _k, s in sessions:
        for u, p in zip(s, clf.predict(s), strict=True):
            u.extra["category"] = p.category
            u.extra["scores"] = {c: float(x) for c, x in p.scores.items()}
    return categorizer_name(clf)


def read_categories(sessions, path: Path) -> str:
    """Set each unit's category and scores from `path`; every unit must have a line."""
    given: dict[str, tuple[str, dict[str, float]]] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                given[rec["id"]] = (
                    rec["category"],
                    {c: float(x) for c, x in rec["scores"].items()},
                )
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise SystemExit(f"bench_ab: {path}:{n}: not a category record ({e})") from None
    missing = [u.id for _k, s in sessions for u in s if u.id not in given]
    if missing:
        raise SystemExit(f"bench_ab: {path}: no category for {len(missing)} units ({missing[0]})")
    for _k, s in sessions:
        for u in s:
            u.extra["category"], u.extra["scores"] = given[u.id]
    return f"{path} ({len(given):,} units)"


# --- measures -----------------------------------------------------------------------------------


def _becomes(units) -> dict[str, list[str]]:
    """Input unit id -> the texts of the output units it became (itself, or a merge)."""
    out: dict[str, list[str]] = defaultdict(list)
    for u in units:
        for sid in u.extra.get("source_ids") or [u.id]:
            out[sid].append(u.text)
    return out


def error_lines(text: str) -> list[str]:
    from winnow.serving.strategies import ERROR_LINE_CHARS
    from winnow.serving.strategies import error_lines as positions

    lines = text.split("\n")
    found = [lines[i][:ERROR_LINE_CHARS].strip() for i in positions(text)]
    return found or [next((ln.strip()[:ERROR_LINE_CHARS] for ln in lines if ln.strip()), "")]


_TOKEN = None


def needed_tokens(units) -> dict[str, set[str]]:
    """Tool result id -> the distinctive tokens it first introduced that come back later."""
    import re

    global _TOKEN
    _TOKEN = _TOKEN or re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./\-]{2,}")
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, u in enumerate(units):
        for t in set(_TOKEN.findall(u.text)):
            t = t.rstrip(".-/")
            if not _distinctive(t):
                continue
            first.setdefault(t, i)
            last[t] = i
    out: dict[str, set[str]] = defaultdict(set)
    for t, i in first.items():
        if last[t] > i and units[i].kind == "tool_result":
            out[units[i].id].add(t)
    return out


def _distinctive(t: str) -> bool:
    if len(t) < 4:
        return False
    if "/" in t or ("." in t and any(c.isalpha() for c in t.rsplit(".", 1)[-1])):
        return True  # a path or a dotted name
    if t.isdigit():
        return len(t) >= 3
    return "_" in t or any(a.islower() and b.isupper() for a, b in zip(t, t[1:], strict=False))


@dataclass
class Score:
    must: list[int] = field(default_factory=lambda: [0, 0])  # kept, total
    must_held: list[int] = field(default_factory=lambda: [0, 0])
    errors: list[int] = field(default_factory=lambda: [0, 0])
    needed: list[int] = field(default_factory=lambda: [0, 0])
    used: list[int] = field(default_factory=lambda: [0, 0])  # tokens, limits
    lowest: float = 1.0
    runs: int = 0
    over: int = 0
    invalid: int = 0
    fail: int = 0
    strict_fail: int = 0
    calls: int = 0
    wasted: int = 0

    def add(self, units, out, limit, sent, gold, held, needed, valid) -> None:
        self.runs += 1
        if out is None:
            self.fail += 1
            return
        became = _becomes(out)
        by_id = {u.id: u.text for u in out}
        for u in units:
            g = gold.get(u.id)
            if g in MUST_KEEP:
                kept = by_id.get(u.id) == u.text
                self.must[0] += kept
                self.must[1] += 1
                if held:
                    self.must_held[0] += kept
                    self.must_held[1] += 1
            elif g == "error":
                text = "\n".join(became.get(u.id, []))
                self.errors[0] += all(line in text for line in error_lines(u.text))
                self.errors[1] += 1
        for rid, tokens in needed.items():
            text = "\n".join(became.get(rid, []))
            self.needed[0] += any(t in text for t in tokens)
            self.needed[1] += 1
        n = sent(out)
        self.used[0] += n
        self.used[1] += limit
        self.lowest = min(self.lowest, n / limit)
        self.over += n > limit
        self.invalid += not valid(out)


MUST_KEEP = frozenset({"requirement", "constraint", "decision", "architecture"})


def _pct(pair: list[int]) -> str:
    return f"{pair[0] / pair[1]:.1%} ({pair[0]}/{pair[1]})" if pair[1] else "-"


def print_table(scores, budgets, methods, header: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    console.print(header)
    table = Table(header_style="bold", box=None, pad_edge=False)
    cols = ["limit", "method", "must-keep verbatim", "test split", "error lines kept",
            "needed kept", "used (lowest)", "over", "invalid", "fail", "wasted calls"]  # fmt: skip
    for c in cols:
        table.add_column(c, justify="left" if c in ("limit", "method") else "right")
    for b in budgets:
        for m in methods:
            s = scores[m, b]
            if not s.runs:
                continue
            fail = f"{s.fail}" + (f" ({s.strict_fail} strict)" if m == "current" else "")
            table.add_row(
                f"{b:.0%}",
                m,
                _pct(s.must),
                _pct(s.must_held),
                _pct(s.errors),
                _pct(s.needed),
                f"{s.used[0] / max(1, s.used[1]):.1%} ({s.lowest:.0%})",
                str(s.over),
                str(s.invalid),
                fail,
                f"{s.wasted}/{s.calls}" if m in ("winnow", "current") else "-",
            )
    console.print(table)


def _source(source: str, traces: Path) -> str:
    """A session's trace source: the top folder of its file under --traces."""
    try:
        return Path(source).resolve().relative_to(traces.resolve()).parts[0]
    except (ValueError, IndexError):
        return ""


def _config(pairs: list[str]):
    """CompressorConfig with FIELD=VALUE overrides (values read as JSON, else as text)."""
    from winnow.serving.compressor import CompressorConfig

    fields: dict = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            fields[name] = json.loads(value)
        except json.JSONDecodeError:
            fields[name] = value
    return CompressorConfig(**fields)


# --- main ---------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--labels", type=Path, default=ROOT / "data" / "labels")
    ap.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    ap.add_argument("--min-tokens", type=int, default=2000, help="skip sessions shorter than this")
    ap.add_argument("--sessions", type=int, help="only the first N sessions (quick runs)")
    ap.add_argument("--model", type=Path, help="classifier model directory (default: shipped)")
    ap.add_argument(
        "--categories",
        type=Path,
        help="per-unit categories and scores (JSONL: id, category, scores) instead of the "
        "shipped classifier's, e.g. out-of-fold ones from scripts/oof_categories.py",
    )
    ap.add_argument(
        "--sources",
        help="only these trace sources (comma-separated folder names, e.g. a tuning half); "
        "a leading '-' leaves them out instead",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a CompressorConfig field for winnow (repeatable), e.g. relevance_boost=0",
    )
    ap.add_argument(
        "--baseline-src",
        help="a checkout of the compressor to compare with (git worktree add DIR 64fead8)",
    )
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)  # SRC IN OUT
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return 0
    sys.path.insert(0, str(ROOT))
    import logging

    logging.getLogger("winnow").setLevel(logging.ERROR)  # the renderer's repairs, once each
    if not args.traces.is_dir():
        print(f"bench_ab: {args.traces}: no such folder (the real traces live in ../shared/traces)")
        return 1
    sys.path.insert(0, str(ROOT / "tests"))
    from api_validate import validate_anthropic

    from winnow.serving.baselines import mask_observations, truncate_oldest
    from winnow.serving.compressor import SemanticCompressor
    from winnow.serving.render import to_anthropic
    from winnow.serving.tokens import default_token_counter, sent_tokens

    start = time.perf_counter()
    counter = default_token_counter()
    budgets = [float(b) for b in args.budgets.split(",")]
    every = load_sessions(args.traces)
    gold = load_gold(args.labels)
    test_ids = held_out(every, gold)
    sessions = [(k, s) for k, s in every if sent_tokens(s, "anthropic", counter) >= args.min_tokens]
    if args.sources:
        names = set(args.sources.lstrip("-").split(","))
        leave_out = args.sources.startswith("-")
        sessions = [
            (k, s) for k, s in sessions if (_source(k[0], args.traces) in names) != leave_out
        ]
    sessions = sessions[: args.sessions] if args.sessions else sessions
    t = time.perf_counter()
    source = categorize(sessions, args.model, args.categories)
    t_classify = time.perf_counter() - t

    def sent(units) -> int:
        return sent_tokens(units, "anthropic", counter)

    def valid(units) -> bool:
        body = to_anthropic(units, tools=True, model="claude-sonnet-4-6")
        return not body["messages"] or not validate_anthropic(body)

    limits = {
        k: {b: max(1, int(sent(s) * b)) for b in budgets} for k, s in sessions
    }  # the same integer limit for every method
    baseline = None
    if args.baseline_src:
        tmp = Path(tempfile.mkdtemp(prefix="bench_ab_"))
        with open(tmp / "in.pkl", "wb") as fh:
            pickle.dump([(k, [u.to_dict() for u in s], limits[k]) for k, s in sessions], fh)
        env = {**os.environ, "PYTHONPATH": ""}
        baseline = subprocess.Popen(  # beside this process: two cores
            [sys.executable, __file__, "--worker", args.baseline_src, str(tmp / "in.pkl"),
             str(tmp / "out.pkl")],
            env=env,
        )  # fmt: skip

    scores: dict = defaultdict(Score)
    config = _config(args.set)
    comp = SemanticCompressor(classifier=object(), token_counter=counter, config=config)
    t_winnow = 0.0
    for k, units in sessions:
        held = units[0].session_id in test_ids
        needed = needed_tokens(units)
        for b in budgets:
            limit = limits[k][b]
            t = time.perf_counter()
            try:
                out = comp.compress(units, limit).units
            except Exception as e:  # noqa: BLE001 - a failed run, counted
                print(f"winnow failed on {k} at {b:.0%}: {type(e).__name__}: {e}")
                out = None
            t_winnow += time.perf_counter() - t
            scores["winnow", b].add(units, out, limit, sent, gold, held, needed, valid)
            llm = StandInLLM(counter)
            try:
                res = SemanticCompressor(
                    classifier=object(), summarizer=llm, token_counter=counter, config=config
                ).compress(units, limit)
                scores["winnow", b].calls += len(llm.made)
                scores["winnow", b].wasted += wasted(llm.made, res.units)
            except Exception:  # noqa: BLE001 - the run above counted it
                pass
            for name, fn in (("truncation", truncate_oldest), ("masking", mask_observations)):
                scores[name, b].add(
                    units, fn(units, limit, counter), limit, sent, gold, held, needed, valid
                )
    methods = ["winnow", "truncation", "masking"]
    if baseline is not None:
        from winnow.data.schema import Unit

        baseline.wait()
        with open(tmp / "out.pkl", "rb") as fh:
            rows = pickle.load(fh)
        for k, units in sessions:
            held = units[0].session_id in test_ids
            needed = needed_tokens(units)
            for b in budgets:
                row = rows[k, b]
                out = [Unit.from_dict(d) for d in row["units"]] if "units" in row else None
                s = scores["current", b]
                s.add(units, out, limits[k][b], sent, gold, held, needed, valid)
                s.strict_fail += row["strict_fail"]
                s.calls += row["calls"] or 0
                s.wasted += row["wasted"] or 0
        methods.insert(1, "current")
    n_units = sum(len(s) for _k, s in sessions)
    # --categories files are out of fold (scripts/oof_categories.py): every unit is unseen there.
    seen = "" if args.categories else " (not unseen by a model trained on all labels)"
    header = (
        f"[bold]{len(sessions)} sessions[/] ({n_units:,} units, >= {args.min_tokens} tokens), "
        f"{sum(1 for _k, s in sessions if s[0].session_id in test_ids)} of them in the session "
        f"split's test set{seen}; categories: {source}; gold: {len(gold):,} hand labels.\n"
        f"winnow compression time {t_winnow:.1f} s for {len(sessions) * len(budgets)} runs; "
        f"classification {t_classify:.1f} s; total {time.perf_counter() - start:.0f} s"
    )
    print_table(scores, budgets, methods, header)
    return 0


if __name__ == "__main__":
    sys.exit(main())
