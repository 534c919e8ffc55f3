"""Draw the units of the hand-labelled gold set from ../shared/traces.

Stratified by source (trace folder + format) and kind so that every source and kind is
represented, then split into annotator slices with an overlap that is labelled twice.

    python scripts/sample_for_labels.py ../shared/traces -o /tmp/annotation --annotators 4
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path

from winnow.data import ReadReport, read_paths

HEAD, TAIL = 900, 300


def clip(text: str, head: int = HEAD, tail: int = TAIL) -> str:
    if len(text) <= head + tail + 40:
        return text
    end = text[len(text) - tail :] if tail else ""
    return f"{text[:head]}\n[... {len(text) - head - tail} chars cut ...]\n{end}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--total", type=int, default=1560)
    ap.add_argument("--annotators", type=int, default=4)
    ap.add_argument(
        "--overlap", type=int, default=80, help="units per annotator also given to another"
    )
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    root = Path(args.traces)
    sessions: dict[str, list] = defaultdict(list)
    for u in read_paths([root], ReadReport()):
        sessions[u.session_id].append(u)
    strata: dict[tuple[str, str], list] = defaultdict(list)
    context = {}
    for units in sessions.values():
        first_user = next((u.text for u in units if u.role == "user" and u.kind == "text"), "")
        for i, u in enumerate(units):
            src = Path(u.extra["source"]).relative_to(root).parts[0] + "/" + u.extra["format"]
            strata[(src, u.kind)].append(u)
            context[u.id] = {
                "session_first_user_message": clip(first_user, 300, 0),
                "previous_unit": clip(units[i - 1].text, 250, 0) if i else "",
                "position": f"{i + 1} of {len(units)}",
                "source": src,
            }
    # Equal share per stratum, capped by what the stratum has; leftovers go to the big strata.
    keys = sorted(strata)
    for k in keys:
        rng.shuffle(strata[k])
    picked, share = [], max(1, args.total // len(keys))
    for k in keys:
        picked += strata[k][:share]
    rest = [u for k in keys for u in strata[k][share:]]
    rng.shuffle(rest)
    picked += rest[: max(0, args.total - len(picked))]
    rng.shuffle(picked)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n = args.annotators
    slices = [picked[i::n] for i in range(n)]
    for a in range(n):
        # Annotator a also labels the first `overlap` units of annotator a+1's slice, blind.
        extra = slices[(a + 1) % n][: args.overlap]
        items = slices[a] + extra
        rng.shuffle(items)
        with open(out / f"slice_{a}.jsonl", "w") as fh:
            for u in items:
                rec = {
                    "id": u.id,
                    "role": u.role,
                    "kind": u.kind,
                    "tool_name": u.tool_name,
                    "is_error": u.is_error,
                    **context[u.id],
                    "text": clip(u.text),
                }
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    counts = defaultdict(int)
    for u in picked:
        counts[context[u.id]["source"]] += 1
    print(json.dumps({"units": len(picked), "strata": len(keys), "by_source": counts}, indent=1))


if __name__ == "__main__":
    main()
