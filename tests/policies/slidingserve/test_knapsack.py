"""The vectorised DP against brute force, ties included."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.policies.slidingserve.knapsack import solve_knapsack


def brute_force(values: list[float], weights: list[int], capacity: int) -> tuple[float, int, int]:
    """Best (Σ value, count, Σ weight) over every feasible subset."""
    best = (0.0, 0, 0)
    for size in range(1, len(values) + 1):
        for subset in itertools.combinations(range(len(values)), size):
            weight = sum(weights[i] for i in subset)
            if weight <= capacity:
                key = (round(sum(values[i] for i in subset), 9), size, weight)
                best = max(best, key)
    return best


items = st.lists(
    st.tuples(
        # Few distinct values: many ties in value, count and weight.
        st.one_of(st.sampled_from([1.0, 2.0, 2.5]), st.floats(0.01, 10.0)),
        st.integers(1, 40),
    ),
    max_size=9,
)


@settings(max_examples=300, deadline=None)
@given(items=items, capacity=st.integers(0, 120))
def test_dp_equals_brute_force(items: list[tuple[float, int]], capacity: int) -> None:
    values = [v for v, _ in items]
    weights = [w for _, w in items]
    solution = solve_knapsack(values, weights, capacity)
    value, count, weight = brute_force(values, weights, capacity)
    assert solution.value == pytest.approx(value, abs=1e-9)
    assert (len(solution.chosen), solution.weight) == (count, weight)
    assert solution.weight <= capacity
    assert solution.value == pytest.approx(sum(values[i] for i in solution.chosen))


@settings(max_examples=100, deadline=None)
@given(items=items, capacity=st.integers(0, 120), quantum=st.integers(2, 16))
def test_quantised_answers_stay_feasible(
    items: list[tuple[float, int]], capacity: int, quantum: int
) -> None:
    values = [v for v, _ in items]
    weights = [w for _, w in items]
    solution = solve_knapsack(values, weights, capacity, quantum)
    assert solution.weight <= capacity
    assert solution.value <= brute_force(values, weights, capacity)[0] + 1e-9


def test_equal_values_prefer_more_items() -> None:
    # {0} and {1, 2} are both worth 2 and weigh 6: two items win.
    assert solve_knapsack([2.0, 1.0, 1.0], [6, 3, 3], 6).chosen == (1, 2)


def test_equal_values_and_counts_prefer_more_weight() -> None:
    # Every pair is worth 2; {2, 3} weighs the most (6) and fits.
    assert solve_knapsack([1.0, 1.0, 1.0, 1.0], [2, 2, 3, 3], 6).chosen == (2, 3)


def test_nothing_fits() -> None:
    assert solve_knapsack([5.0], [10], 9).chosen == ()


def test_mismatched_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="values but"):
        solve_knapsack([1.0], [1, 2], 5)
