"""A/B benchmark: winnow's SemanticCompressor against oldest-first truncation and observation masking.

    python scripts/bench_ab.py                       # ../shared/traces, budgets 50% and 30%
    python scripts/bench_ab.py --sessions 20 --png /tmp/curve.png

For each session (at least --min-tokens long) and each budget (a share of the session's own
tokens), every method must fit the budget:
- winnow: SemanticCompressor, categories from the shipped classifier (the heuristic labeller
  when no model is installed); never from the gold labels.
- truncation: keep the newest units that fit, dropping from the start; a result whose call
  was dropped is dropped too.
- masking: tool results older than the last 10 replaced by a placeholder, then truncation if
  that is not enough.
Figures: tokens kept, the share of must-keep units kept verbatim (gold from data/labels/*.jsonl
when present, else the heuristic labeller's must-keep: said in the output), the share of
sessions whose tool pairs are all valid, and the reduction-vs-retention curve as a PNG.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from winnow.data.readers import read_paths  # noqa: E402
from winnow.data.schema import MUST_KEEP, Unit  # noqa: E402
from winnow.serving.baselines import mask_observations as mask  # noqa: E402
from winnow.serving.baselines import truncate_oldest as truncate  # noqa: E402
from winnow.serving.compressor import (  # noqa: E402
    CompressorConfig,
    SemanticCompressor,
    orphan_call_ids,
)
from winnow.serving.tokens import default_token_counter, unit_tokens  # noqa: E402

CURVE = (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9)


# --- data -----------------------------------------------------------------------------------


def load_sessions(traces: Path) -> list[list[Unit]]:
    sessions: dict[tuple[str, str], list[Unit]] = defaultdict(list)
    for u in read_paths([traces]):
        sessions[(u.extra.get("source", ""), u.session_id)].append(u)
    return [s for _k, s in sorted(sessions.items())]


def held_out(sessions: list[list[Unit]], gold: dict[str, str]) -> set[str]:
    """The session ids of the shipped model's test split, recomputed as training splits them."""
    from winnow.data.dataset import assign_splits

    keys = {
        s[0].session_id: (any(u.id in gold for u in s), s[0].extra.get("format", ""))
        for s in sessions
    }
    return {sid for sid, split in assign_splits(keys).items() if split == "test"}


def load_gold(labels_dir: Path) -> dict[str, str]:
    gold: dict[str, str] = {}
    for f in sorted(labels_dir.glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                gold[rec["id"]] = rec["category"]
    return gold


def categorize(sessions: list[list[Unit]], model: Path | None = None) -> str:
    """Put the compressor's category on every unit: the classifier (default: the shipped one),
    else the labeller."""
    try:
        from winnow.serving.classifier import ImportanceClassifier

        clf = ImportanceClassifier.load(model)
        name = f"shipped classifier ({type(clf).__name__})"
        predict = clf.predict
    except Exception as e:  # noqa: BLE001 - no model installed: say so and fall back
        from winnow.data.labeling import Labeler

        name = f"heuristic labeller (no shipped classifier: {str(e).splitlines()[0][:200]})"
        predict = Labeler().label
    for s in sessions:
        for u, p in zip(s, predict(s), strict=True):
            u.extra["category"] = p if isinstance(p, str) else p.category
            if getattr(p, "scores", None):  # as `winnow classify` writes them
                u.extra["scores"] = p.scores
    return name


def heuristic_must_keep(sessions: list[list[Unit]]) -> dict[str, str]:
    from winnow.data.labeling import Labeler

    labeler = Labeler()
    return {
        u.id: lab.category for s in sessions for u, lab in zip(s, labeler.label(s), strict=True)
    }


# --- measurement ----------------------------------------------------------------------------


@dataclasses.dataclass
class Score:
    before: int = 0
    after: int = 0
    must_total: int = 0
    must_kept: int = 0
    feasible_total: int = 0  # must-keep units of sessions whose gold must-keep fits the budget
    feasible_kept: int = 0
    sessions: int = 0
    pairs_ok: int = 0
    fits: int = 0
    overflow: int = 0

    def add(
        self, units: list[Unit], out: list[Unit], limit: int, gold: dict[str, str], counter
    ) -> None:
        self.sessions += 1
        self.before += sum(unit_tokens(u, counter) for u in units)
        after = sum(unit_tokens(u, counter) for u in out)
        self.after += after
        self.fits += after <= limit
        self.pairs_ok += orphan_call_ids(out) <= orphan_call_ids(units)
        by_id = {u.id: u.text for u in out}
        must = [u for u in units if gold.get(u.id) in MUST_KEEP]
        kept = sum(by_id.get(u.id) == u.text for u in must)
        self.must_total += len(must)
        self.must_kept += kept
        if sum(unit_tokens(u, counter) for u in must) <= limit:
            self.feasible_total += len(must)
            self.feasible_kept += kept

    @property
    def kept_share(self) -> float:
        return self.after / self.before if self.before else 0.0

    @property
    def must_share(self) -> float:
        return self.must_kept / self.must_total if self.must_total else float("nan")

    @property
    def feasible_share(self) -> float:
        return self.feasible_kept / self.feasible_total if self.feasible_total else float("nan")


def run(sessions, budgets, gold, counter, test_ids: set[str], config: CompressorConfig):
    """Scores per (method, budget): over all sessions, and over the model's held-out sessions."""
    comp = SemanticCompressor(classifier=object(), token_counter=counter, config=config)
    scores: dict[tuple[str, float], Score] = defaultdict(Score)
    held: dict[tuple[str, float], Score] = defaultdict(Score)
    for units in sessions:
        total = sum(unit_tokens(u, counter) for u in units)
        protected = sum(unit_tokens(u, counter) for u in units if u.extra["category"] in MUST_KEEP)
        for b in budgets:
            limit = int(total * b)
            outs = {
                "winnow": comp.compress(units, limit).units,
                "truncation": truncate(units, limit, counter),
                "masking": mask(units, limit, counter),
            }
            scores["winnow", b].overflow += protected > limit
            for m, out in outs.items():
                scores[m, b].add(units, out, limit, gold, counter)
                if units[0].session_id in test_ids:
                    held[m, b].add(units, out, limit, gold, counter)
    return scores, held


def print_table(
    scores, held, budgets, gold_source: str, category_source: str, n_sessions: int
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(120, Console().width))
    console.print(f"[bold]{n_sessions} sessions[/]; compressor categories: {category_source}")
    console.print(f"must-keep gold: {gold_source}")
    table = Table(header_style="bold", box=None, pad_edge=False)
    cols = (
        "budget",
        "method",
        "tokens kept",
        "must-keep verbatim",
        "where feasible",
        "held-out",
        "pairs valid",
        "fits",
    )
    for col in cols:
        table.add_column(col, justify="left" if col in ("budget", "method") else "right")
    for b in budgets:
        for m in ("winnow", "truncation", "masking"):
            s = scores[m, b]
            table.add_row(
                f"{b:.0%}",
                m,
                f"{s.kept_share:.1%}",
                f"{s.must_share:.1%} ({s.must_kept}/{s.must_total})",
                f"{s.feasible_share:.1%}",
                f"{held[m, b].must_share:.1%} ({held[m, b].must_kept}/{held[m, b].must_total})"
                if held[m, b].sessions
                else "-",
                f"{s.pairs_ok / s.sessions:.0%}",
                f"{s.fits / s.sessions:.0%}",
            )
    console.print(table)
    console.print(
        "held-out: must-keep verbatim on the sessions the shipped model was tested on, "
        "not trained on (its split recomputed); "
        "where feasible: sessions whose must-keep units alone fit the budget; "
        + ", ".join(
            f"winnow needed its must-keep overflow policy in {scores['winnow', b].overflow} sessions at {b:.0%}"
            for b in budgets
        )
    )


def draw(scores, budgets, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, style in (("winnow", "o-"), ("truncation", "s--"), ("masking", "^:")):
        xs = [1 - scores[m, b].kept_share for b in budgets]
        ys = [scores[m, b].must_share for b in budgets]
        ax.plot(xs, ys, style, label=m)
    ax.set_xlabel("token reduction (1 - tokens kept / tokens before)")
    ax.set_ylabel("must-keep units kept verbatim")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("reduction vs retention")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def cache_reuse(
    sessions, counter, n_sessions: int = 6, calls: int = 12, share: float = 0.3
) -> None:
    """A growing conversation sent after every few steps: the share of each request's bytes that
    a prefix cache can serve (longest common prefix with the previous request), plain vs cache-aware."""
    from winnow.serving.cache import CacheAwareCompressor, CacheConfig
    from winnow.serving.render import to_anthropic

    comp = SemanticCompressor(
        classifier=object(),
        token_counter=counter,
        config=CompressorConfig(on_must_keep_overflow="summarize_largest"),
    )
    cac = CacheAwareCompressor(comp, CacheConfig())
    longest = sorted(sessions, key=len, reverse=True)[:n_sessions]
    reuse = {"plain": [0, 0], "cache-aware": [0, 0]}
    for units in longest:
        limit = int(sum(unit_tokens(u, counter) for u in units) * share)
        prev: dict[str, bytes] = {}
        for k in range(1, calls + 1):
            head = units[: len(units) * k // calls]
            bodies = {
                "plain": to_anthropic(comp.compress(head, limit).units),
                "cache-aware": cac.compress(head, limit).to_anthropic(),
            }
            for name, body in bodies.items():
                raw = _content_bytes(body)
                if name in prev:
                    reuse[name][0] += _common_prefix(prev[name], raw)
                    reuse[name][1] += len(raw)
                prev[name] = raw
    print(
        f"prefix-cache reuse over {len(longest)} growing sessions ({calls} calls each, limit {share:.0%} "
        "of the full session): "
        + ", ".join(f"{k} {a / b:.0%}" for k, (a, b) in reuse.items() if b)
        + " of request bytes served from the previous request's prefix"
    )


def _content_bytes(body: dict) -> bytes:
    """The request's content in order, without the cache markers (they are not content)."""

    def strip(blocks):
        return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks or []]

    messages = [{"role": m["role"], "content": strip(m["content"])} for m in body["messages"]]
    return json.dumps([strip(body.get("system")), messages], ensure_ascii=False).encode()


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = next((i for i in range(0, n, 4096) if a[i : i + 4096] != b[i : i + 4096]), n)
    while i < n and a[i] == b[i]:
        i += 1
    return min(i, n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--labels", type=Path, default=ROOT / "data" / "labels")
    ap.add_argument(
        "--budgets", default="0.5,0.3", help="shares of each session's tokens for the table"
    )
    ap.add_argument("--png", type=Path, default=Path("bench_ab.png"), help="where the curve goes")
    ap.add_argument("--min-tokens", type=int, default=2000, help="skip sessions shorter than this")
    ap.add_argument("--sessions", type=int, help="only the first N sessions (quick runs)")
    ap.add_argument("--no-cache", action="store_true", help="skip the prefix-cache reuse figure")
    ap.add_argument(
        "--protect-threshold",
        type=float,
        help="CompressorConfig.protect_threshold for winnow (0: off; default: the library's)",
    )
    ap.add_argument(
        "--model", type=Path, help="classifier model directory (default: the shipped one)"
    )
    args = ap.parse_args()
    if not args.traces.is_dir():
        print(f"bench_ab: {args.traces}: no such folder (the real traces live in ../shared/traces)")
        return 1
    counter = default_token_counter()
    start = time.perf_counter()
    every = load_sessions(args.traces)
    gold = load_gold(args.labels)
    test_ids = held_out(every, gold) if gold else set()
    sessions = [s for s in every if sum(unit_tokens(u, counter) for u in s) >= args.min_tokens]
    sessions = sessions[: args.sessions] if args.sessions else sessions
    session_ids = {u.id for s in sessions for u in s}
    gold = {k: v for k, v in gold.items() if k in session_ids}
    if gold:
        gold_source = f"hand labels, {len(gold)} units from {args.labels}"
    else:
        gold = heuristic_must_keep(sessions)
        gold_source = (
            "NO hand labels found: the heuristic labeller's must-keep (not a true gold set)"
        )
    category_source = categorize(sessions, args.model)
    table_budgets = [float(b) for b in args.budgets.split(",")]
    budgets = sorted(set(CURVE) | set(table_budgets))
    config = CompressorConfig(on_must_keep_overflow="summarize_largest")
    if args.protect_threshold is not None:
        config.protect_threshold = args.protect_threshold if args.protect_threshold > 0 else None
    category_source += f"; soft must-keep threshold {config.protect_threshold}"
    scores, held = run(sessions, budgets, gold, counter, test_ids, config)
    print_table(scores, held, table_budgets, gold_source, category_source, len(sessions))
    draw(scores, budgets, args.png)
    if not args.no_cache:
        cache_reuse(sessions, counter)
    print(f"curve: {args.png} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
