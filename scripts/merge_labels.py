"""Merge the annotators' raw labels into the gold set and measure their agreement.

Each unit's label is the one given by the annotator whose slice it belongs to
(data/labels/raw/owners.json); units labelled twice (the blind overlap) give the agreement.
Then the corrections (`corrections.jsonl` beside the output, or `--corrections FILE`) are
applied: units re-read against TAXONOMY.md and the conventions of data/labels/README.md
because rounds labelled the same shape differently, one `{"id", "category", "was", "reason"}`
line each. A correction whose `was` is not the merged label stops the merge (stale).

    python scripts/merge_labels.py data/labels/raw data/labels/raw_r2 -o data/labels/gold.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from winnow.data.schema import CATEGORIES, DROPPABLE, MUST_KEEP


def cohen_kappa(a: list[str], b: list[str]) -> float:
    n = len(a)
    po = sum(x == y for x, y in zip(a, b)) / n
    ca, cb = Counter(a), Counter(b)
    pe = sum(ca[c] * cb[c] for c in CATEGORIES) / (n * n)
    return (po - pe) / (1 - pe) if pe < 1 else 1.0


def second_annotator(owner: list[str], other: list[str]) -> dict[str, object]:
    """The second annotator scored as a model against the owner's label: the most a model can
    be shown to reach on these labels, since the owner's label is the gold one."""
    f1 = {}
    for c in CATEGORIES:
        tp = sum(a == c == b for a, b in zip(owner, other))
        wrong = sum((a == c) != (b == c) for a, b in zip(owner, other))
        if tp + wrong:
            f1[c] = round(2 * tp / (2 * tp + wrong), 3)
    kept = [b for a, b in zip(owner, other) if a in MUST_KEEP]
    return {
        "accuracy": round(sum(a == b for a, b in zip(owner, other)) / len(owner), 4),
        "macro_f1": round(sum(f1.values()) / len(f1), 4),
        "must_keep_recall": round(sum(b in MUST_KEEP for b in kept) / len(kept), 4),
        "must_keep_called_droppable": round(sum(b in DROPPABLE for b in kept) / len(kept), 4),
        "f1": f1,
    }


def apply_corrections(gold: list[dict[str, str]], path: Path) -> int:
    """Apply the corrections in `path` to `gold` (in place); returns how many."""
    by_id = {r["id"]: r for r in gold}
    n = 0
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        fix = json.loads(line)
        where = f"{path}:{lineno}"
        rec = by_id.get(fix["id"])
        if rec is None:
            raise SystemExit(f"{where}: {fix['id']} is not in the merged labels")
        if fix["category"] not in CATEGORIES or not fix.get("reason"):
            raise SystemExit(f"{where}: a correction needs a known category and a reason")
        if rec["category"] != fix["was"]:
            raise SystemExit(
                f"{where}: {fix['id']} is {rec['category']!r}, not {fix['was']!r}: stale correction"
            )
        rec["category"] = fix["category"]
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("raw", type=Path, nargs="+", help="one folder per labelling round")
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument(
        "--corrections",
        type=Path,
        help="corrections to apply after the merge (default: corrections.jsonl beside --out)",
    )
    args = ap.parse_args()
    corrections = args.corrections or args.out.parent / "corrections.jsonl"
    # Annotators are named per round (`<folder>/annotator_N`): rounds had different people.
    owners: dict[str, str] = {}
    labels: dict[str, dict[str, str]] = {}
    for raw in args.raw:
        owners |= {
            uid: f"{raw.name}/{a}"
            for uid, a in json.loads((raw / "owners.json").read_text()).items()
        }
        for f in sorted(raw.glob("annotator_*.jsonl")):
            who = f"{raw.name}/{f.stem.split('_')[1]}"
            for n, line in enumerate(f.read_text().splitlines(), 1):
                rec = json.loads(line)
                if rec["category"] not in CATEGORIES:
                    raise SystemExit(f"{f}:{n}: unknown category {rec['category']!r}")
                labels.setdefault(rec["id"], {})[who] = rec["category"]

    gold, first, second = [], [], []
    confusions: Counter = Counter()
    for uid, by in labels.items():
        owner = owners.get(uid)
        if owner in by:
            gold.append({"id": uid, "category": by[owner]})
        if len(by) == 2:
            other = next(w for w in by if w != owner)
            first.append(by[owner])
            second.append(by[other])
            if by[owner] != by[other]:
                confusions[tuple(sorted((by[owner], by[other])))] += 1
    gold.sort(key=lambda r: r["id"])
    corrected = apply_corrections(gold, corrections) if corrections.is_file() else 0
    args.out.write_text("".join(json.dumps(r) + "\n" for r in gold))
    agree = sum(x == y for x, y in zip(first, second))
    report = {
        "gold_units": len(gold),
        "double_labelled": len(first),
        "raw_agreement": round(agree / len(first), 4) if first else None,
        "cohen_kappa": round(cohen_kappa(first, second), 4) if first else None,
        "second_annotator": second_annotator(first, second) if first else None,
        "corrections": corrected,
        "distribution": dict(Counter(r["category"] for r in gold).most_common()),
        "top_disagreements": {f"{a} / {b}": n for (a, b), n in confusions.most_common(8)},
    }
    (args.out.parent / "agreement.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
