"""Draw the units of the hand-labelled gold set from ../shared/traces.

Round 1 (default) is stratified by source (trace folder + format) and kind, so that every
source and kind is represented. Round 2 (`--enrich labeled.parquet --exclude gold.jsonl`)
draws the units the categories are hardest on: what the heuristic labeller calls a rare
category (constraint, architecture, acknowledgment) or a confusable one (decision,
explanation), plus user text. Round 4 (`--uncertain MODEL`) draws the units a trained
classifier is unsure are must-keep (active learning). Round 6 (`--targeted`) draws the unit
shapes the shipped model got wrong on unseen projects (slash commands and their expansions,
short user answers, task-tool results, passing linters, thinking that may reach a decision)
and tops up the sources with few labels. Round 7 (`--sources aider/aider=all,agentv/codex=300`)
draws every remaining unit, or N of them, of the named sources; with `--uncertain MODEL` (round
8), of the units the model is unsure of. All cut the sample into annotator slices with a
blind overlap that is labelled twice.

    python scripts/sample_for_labels.py ../shared/traces -o /tmp/annotation --annotators 4
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import defaultdict
from pathlib import Path

from winnow.data import ReadReport, read_paths

HEAD, TAIL = 900, 300
ENRICH = {
    "constraint": 60,
    "architecture": 40,
    "acknowledgment": 30,
    "decision": 90,
    "explanation": 80,
}
ENRICH_USER_TEXT = 100


def clip(text: str, head: int = HEAD, tail: int = TAIL) -> str:
    if len(text) <= head + tail + 40:
        return text
    end = text[len(text) - tail :] if tail else ""
    return f"{text[:head]}\n[... {len(text) - head - tail} chars cut ...]\n{end}"


def load(root: Path) -> tuple[dict, dict]:
    """All units by id, and each unit's annotation context."""
    sessions: dict[str, list] = defaultdict(list)
    for u in read_paths([root], ReadReport()):
        sessions[u.session_id].append(u)
    units, context = {}, {}
    for ss in sessions.values():
        first_user = next((u.text for u in ss if u.role == "user" and u.kind == "text"), "")
        for i, u in enumerate(ss):
            units[u.id] = u
            context[u.id] = {
                "session_first_user_message": clip(first_user, 300, 0),
                "previous_unit": clip(ss[i - 1].text, 250, 0) if i else "",
                "position": f"{i + 1} of {len(ss)}",
                "source": Path(u.extra["source"]).relative_to(root).parts[0]
                + "/"
                + u.extra["format"],
            }
    return units, context


def stratified(units: dict, context: dict, total: int, rng: random.Random) -> list:
    strata: dict[tuple[str, str], list] = defaultdict(list)
    for u in units.values():
        strata[(context[u.id]["source"], u.kind)].append(u)
    keys = sorted(strata)
    for k in keys:
        rng.shuffle(strata[k])
    share = max(1, total // len(keys))
    picked = [u for k in keys for u in strata[k][:share]]
    rest = [u for k in keys for u in strata[k][share:]]
    rng.shuffle(rest)
    return picked + rest[: max(0, total - len(picked))]


def enriched(
    units: dict,
    labeled: Path,
    exclude: set[str],
    rng: random.Random,
    quota: dict[str, int] = ENRICH,
    user_text: int = ENRICH_USER_TEXT,
    skip_sessions: frozenset[str] = frozenset(),
    text_only: bool = False,
) -> list:
    import pyarrow.parquet as pq

    table = pq.read_table(labeled, columns=["id", "session_id", "category", "role", "kind"])
    pool = [
        r
        for r in table.to_pylist()
        if r["id"] not in exclude and r["id"] in units and r["session_id"] not in skip_sessions
    ]
    if text_only:  # prose units, where categories are hardest to tell apart
        pool = [r for r in pool if r["kind"] in ("text", "thinking") and r["role"] != "system"]
    rng.shuffle(pool)
    picked: dict[str, None] = {}
    for cat, n in quota.items():
        for r in [r for r in pool if r["category"] == cat][:n]:
            picked[r["id"]] = None
    user = [
        r for r in pool if r["role"] == "user" and r["kind"] == "text" and r["id"] not in picked
    ]
    for r in user[:user_text]:
        picked[r["id"]] = None
    return [units[i] for i in picked]


def uncertain(
    units: dict,
    model: Path,
    exclude: set[str],
    band: tuple[float, float],
    skip_sessions: frozenset[str] = frozenset(),
    text_only: bool = False,
    same_sessions: bool = False,
) -> list:
    """Units the classifier is unsure are must-keep: its must-keep probability in `band`.
    `same_sessions`: only from sessions that already have labels (the split stays put)."""
    labelled = {units[i].session_id for i in exclude if i in units}
    from winnow.data.schema import MUST_KEEP
    from winnow.serving.classifier import ImportanceClassifier

    clf = ImportanceClassifier.load(model)
    every = list(units.values())  # in session order: the classifier reads neighbours
    probs = clf.predict_proba(every)
    must = [clf.labels.index(c) for c in sorted(MUST_KEEP)]
    return [
        u
        for u, p in zip(every, probs[:, must].sum(1).tolist())
        if band[0] <= p <= band[1]
        and u.id not in exclude
        and u.session_id not in skip_sessions
        and (not same_sessions or u.session_id in labelled)
        and (not text_only or (u.kind in ("text", "thinking") and u.role != "system"))
    ]


# Round 6: unit shapes the shipped model got wrong on unseen projects (issue 13), and how
# many unlabelled units to draw per source with few labels, stratified by kind.
TARGETS = {
    "slash_command": re.compile(r"<command-name>/"),
    "bash_io": re.compile(r"<bash-(?:input|stdout|stderr)>"),
    "compaction": re.compile(
        r"detailed summary of the conversation|session is being continued from a previous", re.I
    ),
    "task_tool_result": re.compile(
        r"^(?:Task #\d+ created|Updated task #\d+|Todos have been)", re.M
    ),
    "passing_linter": re.compile(
        r"Total errors: 0|All checks passed|\b0 errors\b|no issues found|passed successfully", re.I
    ),
}
TARGET_CAPS = {"task_tool_result": 60, "thinking": 120}
TOP_UP = {"minsky/specstory": 350, "agentv/codex": 120, "agentv/copilot": 60}


def targeted(units: dict, context: dict, exclude: set[str], rng: random.Random) -> list:
    """Round 6: the shapes in TARGETS (and the user text after a slash command, its
    expansion), short user answers, thinking blocks, then TOP_UP units of thin sources."""
    ordered = list(units.values())
    picked: dict[str, None] = {}

    def take(pool: list, cap: int | None = None) -> None:
        pool = [u for u in pool if u.id not in exclude and u.id not in picked]
        rng.shuffle(pool)
        for u in pool[:cap]:
            picked[u.id] = None

    for name, pattern in TARGETS.items():
        hits = [u for u in ordered if pattern.search(u.text[:5000])]
        if name == "slash_command":  # and the expansion that follows the command
            after = {(u.session_id, u.index + 1) for u in hits}
            hits += [u for u in ordered if (u.session_id, u.index) in after and u.role == "user"]
        take(hits, TARGET_CAPS.get(name))
    take(
        [u for u in ordered if u.role == "user" and u.kind == "text" and len(u.text.strip()) <= 25]
    )
    take([u for u in ordered if u.kind == "thinking"], TARGET_CAPS["thinking"])
    top_up(ordered, context, exclude | set(picked), TOP_UP, rng, picked)
    return [units[i] for i in picked]


def top_up(
    ordered: list, context: dict, exclude: set[str], quotas: dict[str, int | None], rng, picked
) -> None:
    """Add up to n unlabelled units of each source (None: all of them) to `picked`, an equal
    share of each role/kind first so that a source's rare kinds are not crowded out."""
    for source, n in quotas.items():
        by_kind: dict[str, list] = defaultdict(list)
        for u in ordered:
            if context[u.id]["source"] == source and u.id not in exclude:
                by_kind[f"{u.role}/{u.kind}"].append(u)
        for k in sorted(by_kind):
            rng.shuffle(by_kind[k])
        cap = sum(map(len, by_kind.values())) if n is None else n
        share = max(1, cap // max(1, len(by_kind)))
        chosen = [u for k in sorted(by_kind) for u in by_kind[k][:share]]
        rest = [u for k in sorted(by_kind) for u in by_kind[k][share:]]
        rng.shuffle(rest)
        for u in (chosen + rest)[:cap]:
            picked[u.id] = None


def by_source(spec: str) -> dict[str, int | None]:
    """`aider/aider=all,agentv/codex=300` -> {source: count or None for all}."""
    out: dict[str, int | None] = {}
    for item in spec.split(","):
        source, _, n = item.partition("=")
        out[source.strip()] = None if n.strip() in ("", "all") else int(n)
    return out


def write_slices(picked: list, context: dict, out: Path, n: int, overlap: int, rng) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    rng.shuffle(picked)
    slices = [picked[i::n] for i in range(n)]
    for a in range(n):
        # Annotator a also labels the first `overlap` units of annotator a+1's slice, blind.
        items = slices[a] + slices[(a + 1) % n][:overlap]
        rng.shuffle(items)
        with open(out / f"slice_{a}.jsonl", "w") as fh:
            for u in items:
                rec = {"id": u.id, "role": u.role, "kind": u.kind, "tool_name": u.tool_name}
                rec |= {"is_error": u.is_error, **context[u.id], "text": clip(u.text)}
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    owners = {u.id: a for a in range(n) for u in slices[a]}
    (out / "owners.json").write_text(json.dumps(owners, indent=0))
    return owners


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", type=Path)
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--total", type=int, default=1560)
    ap.add_argument("--annotators", type=int, default=4)
    ap.add_argument(
        "--overlap", type=int, default=80, help="units per annotator also given to another"
    )
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--enrich", type=Path, help="labeled.parquet from `winnow label` (round 2)")
    ap.add_argument("--exclude", type=Path, help="gold.jsonl of units already labelled")
    ap.add_argument("--quota", help="heuristic category=count,... to draw (round 2 default)")
    ap.add_argument("--user-text", type=int, default=ENRICH_USER_TEXT)
    ap.add_argument("--text-only", action="store_true", help="only text and thinking units")
    ap.add_argument(
        "--uncertain", type=Path, help="a model directory: draw the units it is unsure of"
    )
    ap.add_argument(
        "--band", default="0.1,0.7", help="must-keep probability band of --uncertain units"
    )
    ap.add_argument(
        "--same-sessions",
        action="store_true",
        help="--uncertain: only sessions that already have labels (keeps the data set split)",
    )
    ap.add_argument(
        "--targeted", action="store_true", help="round 6: known wrong shapes and thin sources"
    )
    ap.add_argument(
        "--sources",
        help="round 7: unlabelled units of these sources, SOURCE=N or SOURCE=all, comma-separated",
    )
    ap.add_argument(
        "--skip-test-of",
        type=Path,
        help="split.json of a data set: draw no unit of its test sessions",
    )
    args = ap.parse_args()
    rng = random.Random(args.seed)
    units, context = load(args.traces)
    done = {json.loads(line)["id"] for line in open(args.exclude)} if args.exclude else set()
    skip = frozenset()
    if args.skip_test_of:
        skip = frozenset(json.loads(args.skip_test_of.read_text())["splits"]["test"]["session_ids"])
    if args.uncertain and args.sources:  # round 8: the unsure units, N of each source
        lo, hi = (float(x) for x in args.band.split(","))
        unsure = uncertain(units, args.uncertain, done, (lo, hi), skip, args.text_only)
        chosen: dict[str, None] = {}
        top_up(unsure, context, done, by_source(args.sources), rng, chosen)
        picked = [units[i] for i in chosen]
    elif args.sources:
        chosen = {}
        top_up(list(units.values()), context, done, by_source(args.sources), rng, chosen)
        picked = [units[i] for i in chosen]
    elif args.targeted:
        picked = targeted(units, context, done, rng)
    elif args.uncertain:
        lo, hi = (float(x) for x in args.band.split(","))
        picked = uncertain(
            units, args.uncertain, done, (lo, hi), skip, args.text_only, args.same_sessions
        )
    elif args.enrich:
        quota = dict(ENRICH)
        if args.quota:
            quota = {k: int(v) for k, v in (kv.split("=") for kv in args.quota.split(","))}
        picked = enriched(
            units, args.enrich, done, rng, quota, args.user_text, skip, args.text_only
        )
    else:
        picked = stratified(units, context, args.total, rng)
    write_slices(picked, context, args.out, args.annotators, args.overlap, rng)
    counts: dict[str, int] = defaultdict(int)
    for u in picked:
        counts[context[u.id]["source"]] += 1
    print(json.dumps({"units": len(picked), "by_source": counts}, indent=1))


if __name__ == "__main__":
    main()
