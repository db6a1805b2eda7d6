"""SlidingChunker: the paper's split, the window-k optimum, and their edge cases."""

from __future__ import annotations

import math

import pytest
from factories import TokenLinearModel
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.policies.slidingserve.chunker import (
    QueueTimes,
    _coordinate_search,
    _greedy_allocation,
    paper_chunk,
    window_chunk,
    window_objective,
)
from slidingserve.predictor import PrefillQueueProfile

# Convex in tokens: 10 ms fixed, 20 µs a token, and a quadratic term.
CONVEX = TokenLinearModel(0.010, 2e-5, 1e-8)


def times_for(
    decodes: int = 8, queue: tuple[int, ...] = (3000, 2000), max_tokens: int = 2048
) -> QueueTimes:
    profile = PrefillQueueProfile([500] * decodes, [(r, 0) for r in queue])
    return QueueTimes(CONVEX, profile, max_tokens)


def test_no_safe_decode_means_the_full_budget() -> None:
    times = times_for()
    choice = paper_chunk(times, [math.inf, math.inf])
    assert choice == (2048 - 8, "no-tbt-limit")
    assert window_chunk(times, [math.inf, math.inf]).prefill_tokens == 2040


def test_decodes_alone_too_slow_means_decodes_only() -> None:
    times = times_for()
    assert paper_chunk(times, [0.005, 0.055]) == (0, "decodes-only")
    assert window_chunk(times, [0.005, 0.055]) == (0, "decodes-only")


def test_balances_when_t_cur_is_large_against_t_next() -> None:
    times = times_for()
    t_cur, t_next = 0.040, 0.015
    greedy = times.tokens_within(t_cur)
    total = times.tokens_within(t_cur + t_next)
    assert greedy is not None and total is not None
    choice = paper_chunk(times, [t_cur, t_cur + t_next])
    assert choice.reason == "paper"
    assert choice.prefill_tokens < greedy  # greedy would spend T_cur entirely
    assert abs(choice.prefill_tokens - total / 2) <= 1  # the convex optimum is the even split


def test_clamped_to_the_current_window_when_t_next_is_large() -> None:
    times = times_for()
    choice = paper_chunk(times, [0.015, 0.200])
    assert choice.prefill_tokens == times.tokens_within(0.015)


horizons = st.tuples(st.floats(0.001, 0.2), st.floats(0.001, 0.2), st.floats(0.001, 0.2))
queues = st.lists(st.integers(1, 3000), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(gaps=horizons, queue=queues, decodes=st.integers(0, 64))
def test_never_exceeds_time_to_budget_of_t_cur(
    gaps: tuple[float, float, float], queue: list[int], decodes: int
) -> None:
    times = times_for(decodes, tuple(queue))
    cumulative = [gaps[0], gaps[0] + gaps[1], gaps[0] + gaps[1] + gaps[2]]
    limit = times.tokens_within(cumulative[0])
    for choice in (
        paper_chunk(times, cumulative[:2]),
        window_chunk(times, cumulative[:1]),
        window_chunk(times, cumulative[:2]),
        window_chunk(times, cumulative),
    ):
        assert choice.prefill_tokens <= (limit or 0)
        assert choice.prefill_tokens <= times.max_prefill


@settings(max_examples=150, deadline=None)
@given(gaps=horizons, queue=queues, decodes=st.integers(0, 64))
def test_window_optimum_is_never_worse_than_greedy(
    gaps: tuple[float, float, float], queue: list[int], decodes: int
) -> None:
    times = times_for(decodes, tuple(queue))
    two = [gaps[0], gaps[0] + gaps[1]]
    greedy = times.tokens_within(two[0])
    if greedy is None:
        return
    best = window_chunk(times, two).prefill_tokens
    assert window_objective(times, two, [best]) >= window_objective(times, two, [greedy])
    three = [*two, two[1] + gaps[2]]
    start = _greedy_allocation(times, three)
    searched = _coordinate_search(times, three, start)
    assert window_objective(times, three, searched) >= window_objective(times, three, start)


def test_window_one_is_greedy() -> None:
    times = times_for()
    assert window_chunk(times, [0.03]).prefill_tokens == times.tokens_within(0.03)


def test_two_windows_beat_greedy_on_a_convex_model() -> None:
    times = times_for(decodes=8, queue=(5000,))
    two = [0.080, 0.100]  # greedy spends 80 ms now and leaves 20 ms: too little
    greedy = times.tokens_within(two[0])
    assert greedy is not None
    best = window_chunk(times, two).prefill_tokens
    assert window_objective(times, two, [best]) > window_objective(times, two, [greedy])


def test_a_bad_window_count_is_rejected() -> None:
    from slidingserve.policies.slidingserve.budget import WindowSplit

    with pytest.raises(ValueError, match="window must be 1, 2, 3 or 4"):
        WindowSplit(5)
