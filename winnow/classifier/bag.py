"""Model inputs of the n-gram classifier for whole sessions (batch) or one unit at a time.

Two views of a session (torch-free; training and serving share this code):

- batch: a unit sees the units before and after it, and its session's length;
- online: a unit sees only the units before it, as in live use (it is the latest so far).

`BagEncoder.encode(units, online=True)` and feeding the same units one by one through
`BagEncoder.step` give the very same inputs: the incremental path computes each unit's hashes
and hand features once and carries the previous unit's forward, so a unit costs the same
whatever the session's length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from winnow.classifier.features import (
    FEATURE_NAMES,
    FEATURE_VERSION,
    N_FEATURES,
    Context,
    batch_features,
    check_version,
    unit_features,
)
from winnow.classifier.ngrams import BagInputs, BagSpec, Hasher, group_weights, is_prose
from winnow.data.schema import Unit

N_DENSE = 3 * N_FEATURES  # the unit's hand features, then its previous and next unit's
# A neighbour's features are its own, less those that depend on where it sits (position,
# its own neighbours): the same in every view, and computable from the neighbour alone.
NEIGHBOUR_MASK = np.array(
    [
        not (
            n.startswith(("prev_", "next_"))
            or n in ("rel_position", "first_in_session", "last_in_session")
        )
        for n in FEATURE_NAMES
    ],
    np.float32,
)


@dataclass
class _Seen:
    """What the next unit of a session needs of the one before it."""

    unit: Unit
    features: np.ndarray  # its hand features, masked as a neighbour's (NEIGHBOUR_MASK)
    prev_ids: np.ndarray  # its first words, salted as a previous unit


def session_order(units: Sequence[Unit]) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's previous and next position in `units` within its session (by index), -1 for
    none."""
    sessions: dict[str, list[tuple[int, int]]] = {}
    for pos, u in enumerate(units):
        sessions.setdefault(u.session_id, []).append((int(u.index or 0), pos))
    prev = np.full(len(units), -1, np.int64)
    nxt = np.full(len(units), -1, np.int64)
    for members in sessions.values():
        members.sort()
        order = [p for _, p in members]
        prev[order[1:]] = order[:-1]
        nxt[order[:-1]] = order[1:]
    return prev, nxt


class BagEncoder:
    """Turns units into `BagInputs`; thread-safe for `encode` (the hash cache is shared).
    `feature_version`: the hand-feature spec (`winnow.classifier.features`) the model was
    trained on."""

    def __init__(self, spec: BagSpec | None = None, feature_version: int = FEATURE_VERSION):
        self.hasher = Hasher(spec)
        self.spec = self.hasher.spec
        self.feature_version = check_version(feature_version)

    def encode(
        self, units: Sequence[Unit], online: bool = False, context: bool = True
    ) -> BagInputs:
        """Inputs of `units` (whole sessions, any order), in the batch or the online view.
        `context=False` leaves the neighbours' words and features out (for comparison)."""
        prev, nxt = session_order(units)
        if online:
            nxt[:] = -1
        contexts = [
            Context(
                int(u.index or 0) + 1 if online else None,
                units[p] if p >= 0 else None,
                units[q] if q >= 0 else None,
            )
            for u, p, q in zip(units, prev.tolist(), nxt.tolist())
        ]
        if not online:  # session length: the highest index seen + 1
            last: dict[str, int] = {}
            for u in units:
                last[u.session_id] = max(last.get(u.session_id, 0), int(u.index or 0) + 1)
            contexts = [c._replace(session_len=last[u.session_id]) for u, c in zip(units, contexts)]
        feats = batch_features(units, contexts, self.feature_version)
        none = np.full(len(units), -1, np.int64)
        bags = self.hasher.batch_ids(
            [u.text or "" for u in units],
            [u.tool_name for u in units],
            prev if context else none,
            nxt if context else none,
            [is_prose(u.role, u.kind) for u in units],
        )
        zero = np.zeros((1, N_FEATURES), np.float32)
        padded = np.concatenate([feats * NEIGHBOUR_MASK, zero])  # row -1: no neighbour
        if not context:
            prev, nxt = none, none
        bags.dense = np.concatenate([feats, padded[prev], padded[nxt]], axis=1)
        return bags

    def step(
        self, seen: _Seen | None, unit: Unit
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, _Seen]:
        """One unit in the online view, after `seen` (its session's previous unit, or None):
        its ids, weights, dense row [N_DENSE] and what the next unit needs."""
        h = self.hasher
        context = Context(int(unit.index or 0) + 1, seen.unit if seen else None, None)
        feats = unit_features(unit, context, version=self.feature_version)
        own, as_prev, _ = h.unit_ids(unit.text or "", unit.tool_name)
        groups = [own]
        if seen is not None:
            groups.append(seen.prev_ids)
        groups.append(h.cue_ids(unit.text or "", is_prose(unit.role, unit.kind)))
        ids, weights = group_weights([g for g in groups if len(g)])
        dense = np.zeros(N_DENSE, np.float32)
        dense[:N_FEATURES] = feats
        if seen is not None:
            dense[N_FEATURES : 2 * N_FEATURES] = seen.features
        return ids, weights, dense, _Seen(unit, feats * NEIGHBOUR_MASK, as_prev)


__all__ = ["NEIGHBOUR_MASK", "N_DENSE", "BagEncoder", "session_order"]
