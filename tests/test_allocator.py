"""The budget allocator: feasible, near the exact optimum, and never worse for a larger budget."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as hs

from winnow.serving.allocator import Option, allocate, allocate_exact, cheapest

options = hs.lists(
    hs.tuples(hs.integers(0, 40), hs.floats(0, 50, allow_nan=False)), min_size=1, max_size=5
).map(lambda opts: [Option(c, round(v, 3)) for c, v in opts])
instances = hs.lists(options, min_size=1, max_size=7)


def value(items, picks) -> float:
    return sum(items[i][k].value for i, k in enumerate(picks))


def cost(items, picks) -> int:
    return sum(items[i][k].cost for i, k in enumerate(picks))


def optimum(items, budget: int) -> float:
    """The exact multiple-choice knapsack, by dynamic programming over the budget."""
    best = [0.0] + [float("-inf")] * budget  # best[b]: most value at cost exactly b
    for opts in items:
        nxt = [float("-inf")] * (budget + 1)
        for b, v in enumerate(best):
            if v == float("-inf"):
                continue
            for o in opts:
                if b + o.cost <= budget:
                    nxt[b + o.cost] = max(nxt[b + o.cost], v + o.value)
        best = nxt
    return max(best)


@settings(max_examples=300, deadline=None)
@given(items=instances, budget=hs.integers(0, 150))
def test_feasible_and_near_the_optimum(items, budget) -> None:
    picks = allocate(items, budget)
    floor = sum(opts[cheapest(opts)].cost for opts in items)
    if floor > budget:
        assert picks is None
        return
    assert picks is not None and cost(items, picks) <= budget
    # the greedy loses at most one item's worth against the exact optimum
    gap = max(max(o.value for o in opts) - opts[cheapest(opts)].value for opts in items)
    assert value(items, picks) >= optimum(items, budget) - gap - 1e-6


@settings(max_examples=300, deadline=None)
@given(items=instances, budget=hs.integers(0, 150))
def test_a_larger_budget_never_keeps_less_value(items, budget) -> None:
    lo, hi = allocate(items, budget), allocate(items, budget + 1)
    if lo is not None:
        assert hi is not None and value(items, hi) >= value(items, lo) - 1e-9


def test_deterministic_and_efficient_first() -> None:
    # three items; the one with the most value per token is upgraded first
    items = [
        [Option(0, 0.0), Option(10, 10.0)],  # 1.0 per token
        [Option(0, 0.0), Option(10, 30.0)],  # 3.0
        [Option(0, 0.0), Option(10, 20.0)],  # 2.0
    ]
    assert allocate(items, 10) == [0, 1, 0]
    assert allocate(items, 20) == [0, 1, 1]
    assert allocate(items, 20) == allocate(items, 20)


@settings(max_examples=300, deadline=None)
@given(items=instances, budget=hs.integers(0, 150))
def test_exact_reaches_the_optimum_and_grows_with_the_budget(items, budget) -> None:
    picks = allocate_exact(items, budget)
    if sum(opts[cheapest(opts)].cost for opts in items) > budget:
        assert picks is None
        return
    assert picks is not None and cost(items, picks) <= budget
    assert abs(value(items, picks) - optimum(items, budget)) <= 1e-6
    more = allocate_exact(items, budget + 1)
    assert more is not None and value(items, more) >= value(items, picks) - 1e-9


def test_exact_fills_the_room_a_frozen_greedy_leaves() -> None:
    # the greedy takes the second item's only hull step (0 -> 60) or nothing: nothing fits
    items = [
        [Option(0, 0.0), Option(10, 50.0)],
        [Option(0, 0.0), Option(10, 20.0), Option(30, 30.0), Option(60, 150.0)],
    ]
    greedy, exact = allocate(items, 40), allocate_exact(items, 40)
    assert greedy is not None and exact is not None
    assert cost(items, greedy) == 10 and exact == [1, 2] and cost(items, exact) == 40


def test_exact_counts_a_negative_cost_as_nothing() -> None:
    items = [[Option(0, 0.0), Option(-5, 0.0), Option(8, 3.0)], [Option(-2, 1.0), Option(4, 2.0)]]
    assert allocate_exact(items, 8) == [2, 0]
    assert allocate_exact(items, 12) == [2, 1]


def meeting_optimum(items, budget: int, needs) -> float | None:
    """The most value of the choices within the budget that meet the requirement (brute force)."""
    from itertools import product

    best = None
    for picks in product(*(range(len(opts)) for opts in items)):
        if cost(items, picks) <= budget and any(needs[i][k] for i, k in enumerate(picks)):
            v = value(items, picks)
            best = v if best is None else max(best, v)
    return best


@settings(max_examples=300, deadline=None)
@given(
    items=hs.lists(options, min_size=1, max_size=4),
    budget=hs.integers(0, 100),
    data=hs.data(),
)
def test_exact_meets_a_requirement_whenever_a_choice_can(items, budget, data) -> None:
    needs = [[data.draw(hs.booleans()) for _o in opts] for opts in items]
    picks = allocate_exact(items, budget, needs)
    if sum(opts[cheapest(opts)].cost for opts in items) > budget:
        assert picks is None
        return
    assert picks is not None and cost(items, picks) <= budget
    best = meeting_optimum(items, budget, needs)
    if best is None:  # no choice meets it: the most value
        assert abs(value(items, picks) - optimum(items, budget)) <= 1e-6
    else:
        assert any(needs[i][k] for i, k in enumerate(picks))
        assert abs(value(items, picks) - best) <= 1e-6


def test_exact_gives_up_value_for_a_requirement() -> None:
    # the second item alone meets it; the first is worth more for the same room
    items = [[Option(0, 0.0), Option(10, 9.0)], [Option(0, 0.0), Option(10, 1.0)]]
    needs = [[False, False], [False, True]]
    assert allocate_exact(items, 10) == [1, 0]
    assert allocate_exact(items, 10, needs) == [0, 1]
    assert allocate_exact(items, 20, needs) == [1, 1]
    assert allocate_exact(items, 9, needs) == [0, 0]  # nothing meets it: nothing to give up


def test_collinear_options_are_all_taken_when_they_fit() -> None:
    """Values in proportion to cost (a capped rendition's) make a hull of equal steps, which
    rounding can order wrongly: a 325K-token log's summaries stopped at 596 tokens of a
    162K-token budget."""
    d = 3.0 * 23.49682294360137
    costs = [245, 282, 857, 1097, 1314, 2179, 3010, 4103]
    assert allocate([[Option(c, d * c) for c in costs]], 10**6) == [7]


def test_exact_skips_options_an_earlier_one_beats() -> None:
    """A long text's summaries are thousands of options, nearly all no better than a cheaper
    one before them: the exact pass skips those (a 16 KB run of spaces took 1 s to compress)
    and chooses what it chose with them, the first of equals included."""
    from winnow.serving.allocator import _undominated

    opts = [Option(10, 5.0), Option(3, 1.0)] + [Option(10 + k, 5.0) for k in range(3_000)]
    opts += [Option(50, 9.0), Option(50, 9.0), Option(900, 99.0)]
    assert _undominated(opts, 100) == [0, 1, 3_002]
    assert _undominated(opts, 100, [False] * 3_003 + [True, False]) == [0, 1, 3_002, 3_003]
    items = [opts, [Option(0, 0.0), Option(40, 4.0)]]
    for budget in (3, 10, 13, 49, 50, 60, 90, 2_000):
        plain = [
            [o for k, o in enumerate(item) if k in _undominated(item, budget)] for item in items
        ]
        got = allocate_exact(items, budget)
        want = allocate_exact(plain, budget)
        assert (got is None) == (want is None)
        if got is not None and want is not None:
            assert [items[i][k] for i, k in enumerate(got)] == [
                plain[i][k] for i, k in enumerate(want)
            ]
