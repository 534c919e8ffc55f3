"""The session split: no session in two splits, deterministic, hand labels in every split."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from winnow.data.dataset import SPLITS, SplitConfig, _allocate, assign_splits, build_dataset
from winnow.data.schema import CATEGORIES


def _sessions(
    n: int, hand_every: int = 0, fmts=("claude_code", "codex")
) -> dict[str, tuple[bool, str]]:
    return {
        f"sess-{i}": (bool(hand_every) and i % hand_every == 0, fmts[i % len(fmts)])
        for i in range(n)
    }


def test_allocate_sums_and_gives_every_split_one():
    for n in range(0, 40):
        c = _allocate(n, (0.2, 0.1, 0.7))
        assert sum(c) == n
        if n >= 3:
            assert min(c) >= 1
    assert _allocate(10, (0.2, 0.1, 0.7)) == [2, 1, 7]


def test_split_is_deterministic_and_order_free():
    sessions = _sessions(200, hand_every=7)
    a = assign_splits(sessions)
    items = list(sessions.items())
    random.Random(1).shuffle(items)
    assert assign_splits(dict(items)) == a
    assert set(a) == set(sessions) and set(a.values()) == set(SPLITS)
    assert assign_splits(sessions, SplitConfig(seed="other")) != a


def test_ratios_roughly_hold_and_hand_sessions_reach_every_split():
    sessions = _sessions(300, hand_every=10)  # 30 hand-labelled sessions
    split = assign_splits(sessions)
    counts = {s: sum(v == s for v in split.values()) for s in SPLITS}
    assert counts["train"] == pytest.approx(210, abs=4)
    assert counts["test"] == pytest.approx(60, abs=4)
    for s in SPLITS:
        assert any(split[sid] == s for sid, (hand, _) in sessions.items() if hand)
    # Three hand-labelled sessions are enough for one in each split.
    few = {f"h{i}": (True, "codex") for i in range(3)} | _sessions(20)
    assert {assign_splits(few)[f"h{i}"] for i in range(3)} == set(SPLITS)


def test_subagent_sessions_follow_their_parent():
    sessions = _sessions(50) | {f"sess-{i}/agent-a{i}": (False, "claude_code") for i in range(50)}
    split = assign_splits(sessions)
    for i in range(50):
        assert split[f"sess-{i}/agent-a{i}"] == split[f"sess-{i}"]


def test_bad_ratios():
    with pytest.raises(ValueError, match="ratios"):
        SplitConfig(ratios=(0.5, 0.5, 0.5))


def _table(n_sessions: int = 30, per: int = 4) -> pa.Table:
    rows = []
    for s in range(n_sessions):
        for i in range(per):
            rows.append(
                {
                    "id": f"s{s}:{i}",
                    "session_id": f"s{s}",
                    "index": i,
                    "text": f"unit {i}",
                    "format": "claude_code",
                    "category": CATEGORIES[(s + i) % len(CATEGORIES)],
                    "hand_label": s % 5 == 0 and i == 0,
                }
            )
    return pa.Table.from_pylist(rows)


def test_build_dataset_writes_splits_and_counts(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    info = build_dataset(_table(), tmp_path)
    on_disk = json.loads((tmp_path / "split.json").read_text())
    assert on_disk["splits"]["test"]["units"] == info["splits"]["test"]["units"]
    seen: dict[str, str] = {}
    total = 0
    for name in SPLITS:
        t = pq.read_table(tmp_path / f"{name}.parquet")
        total += t.num_rows
        for sid in set(t.column("session_id").to_pylist()):
            assert seen.setdefault(sid, name) == name  # never in two splits
        labels = t.column("label").to_pylist()
        assert [CATEGORIES[x] for x in labels] == t.column("category").to_pylist()
        assert info["splits"][name]["hand_labeled_units"] >= 1
    assert total == 120 and len(seen) == 30
    # Rebuilding gives the very same split.
    again = build_dataset(_table(), tmp_path / "again")
    assert again["splits"] == info["splits"]


def test_build_dataset_rejects_unlabelled_table(tmp_path):
    with pytest.raises(ValueError, match="winnow label"):
        build_dataset(pa.table({"id": ["a"], "session_id": ["s"]}), tmp_path)


def test_load_splits_and_cli(tmp_path, capsys):
    pytest.importorskip("datasets")
    pq = pytest.importorskip("pyarrow.parquet")
    from winnow.cli import main
    from winnow.data.dataset import load_splits

    src = tmp_path / "labeled.parquet"
    pq.write_table(_table(), src)
    assert main(["dataset", str(src), "-o", str(tmp_path / "ds")]) == 0
    assert "hand units" in capsys.readouterr().out
    dd = load_splits(tmp_path / "ds")
    assert set(dd) == set(SPLITS)
    assert dd["train"].features["label"].names == list(CATEGORIES)
    assert sum(len(d) for d in dd.values()) == 120

    assert (
        main(["dataset", str(src), "-o", str(tmp_path / "x"), "--ratios", "0.9", "0.9", "0.9"]) == 1
    )
    assert "ratios must be" in capsys.readouterr().err
