"""The training data set: labelled units split train / validation / test by session.

A session never lands in two splits (a Claude Code sub-agent session `S/agent-x` goes with
its parent `S`). The split is deterministic: sessions are ordered by a hash of their id and,
inside each stratum (has hand labels x transcript format), cut by the ratios, so every split
gets hand-labelled sessions as soon as there are three of them.

    info = build_dataset("labeled.parquet", "data/dataset")   # writes train/validation/test.parquet + split.json
    splits = load_splits("data/dataset")                       # a datasets.DatasetDict
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from winnow.data.schema import CATEGORIES, CATEGORY_INDEX

SPLITS = ("train", "validation", "test")


@dataclass
class SplitConfig:
    """Split ratios (train, validation, test) and the salt of the session hash."""

    ratios: tuple[float, float, float] = (0.7, 0.1, 0.2)
    seed: str = "winnow-v1"
    stratify_format: bool = True

    def __post_init__(self) -> None:
        if len(self.ratios) != 3 or min(self.ratios) < 0 or abs(sum(self.ratios) - 1) > 1e-6:
            raise ValueError(
                f"ratios must be three non-negative numbers summing to 1, got {self.ratios}"
            )


def split_key(session_id: str) -> str:
    """The unit of splitting: a sub-agent session goes with its parent."""
    return session_id.split("/agent-", 1)[0]


def session_hash(key: str, seed: str = SplitConfig.seed) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def _allocate(n: int, ratios: tuple[float, ...]) -> list[int]:
    """Counts per split summing to n (largest remainder), each split at least one when n allows."""
    raw = [r * n for r in ratios]
    counts = [int(x) for x in raw]
    for j in sorted(range(len(raw)), key=lambda j: raw[j] - counts[j], reverse=True)[
        : n - sum(counts)
    ]:
        counts[j] += 1
    if n >= len(ratios):
        for j in range(len(counts)):
            if counts[j] == 0 and ratios[j] > 0:
                counts[max(range(len(counts)), key=counts.__getitem__)] -= 1
                counts[j] += 1
    return counts


def assign_splits(
    sessions: dict[str, tuple[bool, str]], config: SplitConfig | None = None
) -> dict[str, str]:
    """`{session_id: (has_hand_labels, format)}` -> `{session_id: split}`."""
    config = config or SplitConfig()
    groups: dict[str, dict[str, bool]] = defaultdict(dict)  # split key -> {session: hand}
    fmt: dict[str, str] = {}
    for sid, (hand, f) in sessions.items():
        k = split_key(sid)
        groups[k][sid] = hand
        fmt.setdefault(k, f or "")
    strata: dict[tuple[bool, str], list[str]] = defaultdict(list)
    for k, members in groups.items():
        strata[(any(members.values()), fmt[k] if config.stratify_format else "")].append(k)
    out: dict[str, str] = {}
    for keys in strata.values():
        keys.sort(key=lambda k: session_hash(k, config.seed))
        # Test first, so a small stratum still reaches the split the classifier is judged on.
        order = (2, 1, 0)
        counts = _allocate(len(keys), tuple(config.ratios[j] for j in order))
        pos = 0
        for j, c in zip(order, counts, strict=True):
            for k in keys[pos : pos + c]:
                for sid in groups[k]:
                    out[sid] = SPLITS[j]
            pos += c
    return out


def build_dataset(
    labeled: str | Path | pa.Table, out_dir: str | Path, config: SplitConfig | None = None
) -> dict[str, Any]:
    """Split a labelled Parquet file (from `winnow label`) by session and save it under `out_dir`.

    Writes `train.parquet`, `validation.parquet`, `test.parquet` (all columns plus an integer
    `label`, CATEGORIES order) and `split.json` (counts and the sessions of each split).
    Returns the content of `split.json`.
    """
    config = config or SplitConfig()
    table = labeled if isinstance(labeled, pa.Table) else pq.read_table(labeled)
    missing = {"session_id", "category"} - set(table.column_names)
    if missing:
        raise ValueError(
            f"{labeled}: not a labelled table, missing columns {sorted(missing)} (run `winnow label` first)"
        )
    sids = table.column("session_id").to_pylist()
    cats = table.column("category").to_pylist()
    hand = (
        table.column("hand_label").to_pylist()
        if "hand_label" in table.column_names
        else [False] * len(sids)
    )
    fmts = (
        table.column("format").to_pylist() if "format" in table.column_names else [""] * len(sids)
    )
    sessions: dict[str, tuple[bool, str]] = {}
    for sid, h, f in zip(sids, hand, fmts, strict=True):
        prev = sessions.get(sid, (False, f))
        sessions[sid] = (prev[0] or bool(h), prev[1])
    split_of = assign_splits(sessions, config)

    if "label" in table.column_names:
        table = table.drop_columns(["label"])
    table = table.append_column("label", pa.array([CATEGORY_INDEX[c] for c in cats], pa.int64()))
    split_col = pa.array([split_of[s] for s in sids])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {"config": asdict(config), "categories": list(CATEGORIES), "splits": {}}
    for name in SPLITS:
        part = table.filter(pc.equal(split_col, name))
        pq.write_table(part, out_dir / f"{name}.parquet", compression="zstd")
        part_sessions = sorted({s for s, sp in split_of.items() if sp == name})
        part_hand = (
            part.column("hand_label").to_pylist() if "hand_label" in part.column_names else []
        )
        info["splits"][name] = {
            "units": part.num_rows,
            "sessions": len(part_sessions),
            "hand_labeled_units": int(sum(bool(h) for h in part_hand)),
            "hand_labeled_sessions": len(
                {
                    s
                    for s, h in zip(part.column("session_id").to_pylist(), part_hand, strict=False)
                    if h
                }
            ),
            "categories": dict(Counter(part.column("category").to_pylist()).most_common()),
            "session_ids": part_sessions,
        }
    (out_dir / "split.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n")
    return info


def load_splits(out_dir: str | Path):
    """The saved splits as a `datasets.DatasetDict` with a `ClassLabel` `label` column."""
    from datasets import ClassLabel, DatasetDict, load_dataset

    out_dir = Path(out_dir)
    files = {
        name: str(out_dir / f"{name}.parquet")
        for name in SPLITS
        if (out_dir / f"{name}.parquet").exists()
    }
    if not files:
        raise FileNotFoundError(2, "no train/validation/test.parquet", str(out_dir))
    dd = load_dataset("parquet", data_files=files)
    return DatasetDict(
        {k: v.cast_column("label", ClassLabel(names=list(CATEGORIES))) for k, v in dd.items()}
    )


__all__ = [
    "SPLITS",
    "SplitConfig",
    "assign_splits",
    "build_dataset",
    "load_splits",
    "session_hash",
    "split_key",
]
