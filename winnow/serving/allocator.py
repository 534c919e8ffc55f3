"""The budget allocator: one option per item, the most value a token budget holds.

    choice = allocate([[Option(0, 0), Option(30, 4.0), Option(400, 9.0)], ...], budget=2_000)

A multiple-choice knapsack solved greedily: each item starts at its cheapest option (the
caller passes only the options it allows, so a must-keep unit's cheapest is itself); the
upgrades that lie on the upper convex hull of each item's (cost, value) points are taken in
order of value per token, best first, each when it fits; an upgrade that does not fit
freezes its item where it is. Deterministic (ties by item order), and on integer costs the
value kept never falls when the budget grows: where the budgets B and B + 1 first decide
differently, B + 1 takes an upgrade that fills it exactly, worth more than anything less
efficient that B could put in the room it had left. (Letting a frozen item take a cheaper
option off its hull fills a little more but breaks this: the tests check it.)

`allocate_exact` solves the same problem exactly (dynamic programming over the budget, one
vector pass per option): for small inputs, where the greedy's granularity shows (an item frozen
below a hull step it cannot afford leaves the room unused) and the cost is small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Option:
    """One way to render an item: its token cost and the value it keeps."""

    cost: int
    value: float


def cheapest(options: Sequence[Option]) -> int:
    """The index of the cheapest option (the most valuable among equally cheap ones)."""
    return min(range(len(options)), key=lambda k: (options[k].cost, -options[k].value, k))


def allocate(items: Sequence[Sequence[Option]], budget: int) -> list[int] | None:
    """The index of the option chosen for each item; None when even the cheapest options
    together exceed `budget`."""
    current = [cheapest(opts) for opts in items]
    left = budget - sum(opts[k].cost for opts, k in zip(items, current, strict=True))
    if left < 0:
        return None
    steps: list[tuple[float, int, int, int, int]] = []  # (-value per token, item, step, from, to)
    for i, opts in enumerate(items):
        hull_steps = hull(opts, current[i])
        top = float("inf")
        for s, (a, b) in enumerate(zip(hull_steps, hull_steps[1:], strict=False)):
            dc, dv = opts[b].cost - opts[a].cost, opts[b].value - opts[a].value
            # A hull's steps grow less efficient, but rounding can make a step of nearly
            # collinear points (values capped in proportion to cost) look a hair better than
            # the one before it: sorted first, it would be passed over for good.
            top = min(top, dv / dc if dc > 0 else float("inf"))
            steps.append((-top, i, s, a, b))
    steps.sort()
    frozen: set[int] = set()
    for _eff, i, _s, a, b in steps:
        if i in frozen or current[i] != a:
            continue
        opts = items[i]
        dc = opts[b].cost - opts[a].cost
        if dc <= left:
            current[i] = b
            left -= dc
            continue
        frozen.add(i)  # the rest of its hull costs more still
    return current


def allocate_exact(
    items: Sequence[Sequence[Option]],
    budget: int,
    needs: Sequence[Sequence[bool]] | None = None,
) -> list[int] | None:
    """The most value `budget` holds, one option per item (the first of equally good ones);
    None when even the cheapest options together exceed it. O(budget x options) time. A
    negative cost (a rendition its count puts under nothing) counts as 0.

    `needs[i][k]`: option k of item i meets a requirement that the choice must meet at least
    once, whenever a choice within the budget can (a request needs a message): the most
    value among such choices (else the most value)."""
    if budget < 0:
        return None
    if sum(min(max(0, o.cost) for o in opts) for opts in items) > budget:
        return None
    out = _exact(items, budget)
    if needs is None or any(needs[i][k] for i, k in enumerate(out)):
        return out
    return _exact_meeting(items, budget, needs) or out


_FRONT = 64  # undominated options each is checked against (a long text's summaries: 1 to 4)


def _undominated(
    opts: Sequence[Option], budget: int, flags: Sequence[bool] | None = None
) -> list[int]:
    """The options a vector pass can change anything for, in order: within the budget, and
    no earlier option of the same flag at most as costly and at least as valuable (the
    passes keep the first of equal candidates, and the most value at each budget never falls
    as the budget grows, so such an earlier option's candidates are never beaten by its).
    A long text's summaries can be thousands of options of which one counts. Each option is
    checked against the undominated ones before it, up to `_FRONT` of them (past that it is
    kept unchecked: pruning less changes no result)."""
    front: list[tuple[int, float, bool]] = []
    kept = []
    for k, o in enumerate(opts):
        c, v, f = max(0, o.cost), float(o.value), bool(flags[k]) if flags else False
        if c > budget:
            continue
        if len(front) < _FRONT:
            if any(fc <= c and fv >= v and ff == f for fc, fv, ff in front):
                continue
            front.append((c, v, f))
        kept.append(k)
    return kept


def _exact(items: Sequence[Sequence[Option]], budget: int) -> list[int]:
    best = np.zeros(budget + 1)  # the most value of the items so far at each budget
    picks = np.zeros((len(items), budget + 1), dtype=np.int32)
    for i, opts in enumerate(items):
        new = np.full(budget + 1, -np.inf)
        pick = picks[i]
        for k in _undominated(opts, budget):
            o = opts[k]
            c = max(0, o.cost)
            cand = np.full(budget + 1, -np.inf)
            cand[c:] = best[: budget + 1 - c] + o.value
            better = cand > new
            new[better] = cand[better]
            pick[better] = k
        best = new
    out = [0] * len(items)
    b = int(np.argmax(best))  # the least budget that holds the most value
    for i in range(len(items) - 1, -1, -1):
        k = int(picks[i][b])
        out[i] = k
        b -= max(0, items[i][k].cost)
    return out


def _exact_meeting(
    items: Sequence[Sequence[Option]], budget: int, needs: Sequence[Sequence[bool]]
) -> list[int] | None:
    """`_exact` over two layers of states, before and after an option that meets the
    requirement; None when no choice within the budget meets it."""
    n = len(items)
    best = [np.zeros(budget + 1), np.full(budget + 1, -np.inf)]  # [not met yet, met]
    picks = np.zeros((2, n, budget + 1), dtype=np.int32)
    was_met = np.zeros((n, budget + 1), dtype=bool)  # a met state's previous layer
    for i, opts in enumerate(items):
        new = [np.full(budget + 1, -np.inf), np.full(budget + 1, -np.inf)]
        for k in _undominated(opts, budget, needs[i]):
            o = opts[k]
            c = max(0, o.cost)
            # (from, to) layers: an option that meets the requirement leads to "met"
            moves = ((1, 1), (0, 1)) if needs[i][k] else ((0, 0), (1, 1))
            for src, dst in moves:
                cand = np.full(budget + 1, -np.inf)
                cand[c:] = best[src][: budget + 1 - c] + o.value
                better = cand > new[dst]
                new[dst][better] = cand[better]
                picks[dst][i][better] = k
                if dst == 1:
                    was_met[i][better] = src == 1
        best = new
    if not np.isfinite(best[1]).any():
        return None
    out = [0] * n
    b = int(np.argmax(best[1]))  # the least budget that holds the most value
    layer = 1
    for i in range(n - 1, -1, -1):
        k = int(picks[layer][i][b])
        out[i] = k
        layer = int(was_met[i][b]) if layer == 1 else 0
        b -= max(0, items[i][k].cost)
    return out


def hull(options: Sequence[Option], start: int) -> list[int]:
    """Option indices on the upper convex hull from `start` upwards in cost and value."""
    base = options[start]
    order = sorted(
        (k for k, o in enumerate(options) if o.cost >= base.cost and o.value > base.value),
        key=lambda k: (options[k].cost, -options[k].value, k),
    )
    chain = [start]
    for k in order:
        o = options[k]
        top = options[chain[-1]]
        if o.value <= top.value or o.cost == top.cost:
            continue  # dominated: costs as much or more for no more value
        while len(chain) >= 2:
            p, q = options[chain[-2]], options[chain[-1]]
            # q lies on or under the line from p to o: o's step is at least as efficient
            if (q.value - p.value) * (o.cost - p.cost) <= (o.value - p.value) * (q.cost - p.cost):
                chain.pop()
            else:
                break
        chain.append(k)
    return chain


__all__ = ["Option", "allocate", "allocate_exact", "cheapest", "hull"]
