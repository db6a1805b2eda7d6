"""MLPS on hand-made queues."""

from __future__ import annotations

import pytest
from factories import make_request
from hypothesis import given
from hypothesis import strategies as st

from slidingserve.core import Phase
from slidingserve.policies.slidingserve.ordering import (
    edf_order,
    edf_queue,
    mlps_key,
    mlps_order,
    urgency,
)


def ids(requests: list) -> list[str]:  # type: ignore[type-arg]
    return [r.request_id for r in requests]


def test_urgency_formula_and_epsilon_floor() -> None:
    assert urgency(500, 0.04, 5000.0, 0.001) == pytest.approx(2.5)
    assert urgency(10, 0.0, 1000.0, 0.001) == pytest.approx(10.0)  # slack floored at ε


def test_protected_first_then_urgent_then_short_then_lost() -> None:
    now = 1.0
    # ρ = 1000 tok/s. Urgent: r / (ρ s) > 1.
    calm_short = make_request("calm-short", arrival=0.0, ttft=3.0, prompt=100)  # u = 0.05
    calm_long = make_request("calm-long", arrival=0.0, ttft=3.0, prompt=900)  # u = 0.45
    urgent_long = make_request("urgent-long", arrival=0.5, ttft=1.0, prompt=800)  # u = 1.6
    urgent_short = make_request("urgent-short", arrival=0.5, ttft=0.7, prompt=300)  # u = 1.5
    lost = make_request("lost", arrival=0.0, ttft=0.9, prompt=10)  # deadline passed
    protected = make_request("vip", arrival=0.9, ttft=5.0, prompt=2000, protected=True)
    protected_lost = make_request("vip-lost", arrival=0.0, ttft=0.5, prompt=5, protected=True)
    queue = [calm_long, lost, urgent_long, calm_short, protected_lost, urgent_short, protected]
    order = mlps_order(queue, now, throughput=1000.0)
    assert ids(order) == [
        "vip",
        "vip-lost",
        "urgent-short",
        "urgent-long",
        "calm-short",
        "calm-long",
        "lost",
    ]


def test_alpha_moves_the_urgency_threshold() -> None:
    now = 0.0
    a = make_request("a", ttft=1.0, prompt=600)  # u = 0.6 at ρ = 1000
    b = make_request("b", ttft=1.0, prompt=300, arrival=0.0)  # u = 0.3
    assert ids(mlps_order([a, b], now, 1000.0, alpha=1.0)) == ["b", "a"]
    assert ids(mlps_order([a, b], now, 1000.0, alpha=0.5)) == ["a", "b"]


def test_ties_go_to_the_earlier_arrival() -> None:
    first = make_request("first", arrival=0.1, ttft=5.0, prompt=100)
    second = make_request("second", arrival=0.2, ttft=5.0, prompt=100)
    assert ids(mlps_order([second, first], 0.3, 1000.0)) == ["first", "second"]


def test_remaining_tokens_not_prompt_length_count() -> None:
    half_done = make_request("half", ttft=9.0, prompt=1000, computed=900)  # r = 100
    fresh = make_request("fresh", ttft=9.0, prompt=200)  # r = 200
    assert ids(mlps_order([fresh, half_done], 0.0, 1000.0)) == ["half", "fresh"]


def test_edf_orders_by_next_deadline() -> None:
    late = make_request("late", arrival=0.0, ttft=6.0)
    soon = make_request("soon", arrival=1.0, ttft=2.0)
    assert ids(edf_order([late, soon])) == ["soon", "late"]


def test_prefix_first_moves_a_cached_waiting_request_ahead_by_its_share() -> None:
    # Deadlines 2.0 and 2.3 s; "cached" finds 750 of its 1,000 prompt tokens in the cache.
    first = make_request("first", arrival=0.0, ttft=2.0, prompt=1000)
    cached = make_request("cached", arrival=0.3, ttft=2.0, prompt=1000, computed=750)
    cached.phase = Phase.WAITING
    assert ids(edf_queue([first, cached]).requests) == ["first", "cached"]
    moved = edf_queue([first, cached], prefix_first=0.5)  # 2.3 − 0.5 × 0.75 < 2.0
    assert ids(moved.requests) == ["cached", "first"]
    assert moved.deadlines == [2.3, 2.0]  # the triage still reads the true deadlines
    assert ids(edf_queue([first, cached], prefix_first=0.2).requests) == ["first", "cached"]


def test_prefix_first_leaves_prefilling_requests_where_they_are() -> None:
    first = make_request("first", arrival=0.0, ttft=2.0, prompt=1000)
    started = make_request("started", arrival=0.3, ttft=2.0, prompt=1000, computed=750)
    assert ids(edf_queue([first, started], prefix_first=5.0).requests) == ["first", "started"]


# (arrival s, TTFT s, prompt, computed, protected) of each request; few distinct values, so
# that keys tie and the order of ties is tested too
queued = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.25, 0.5, 0.9]),
        st.sampled_from([0.001, 0.1, 0.5, 1.0, 3.0]),
        st.sampled_from([1, 5, 100, 900, 4000]),
        st.sampled_from([0, 1, 50]),
        st.booleans(),
    ),
    max_size=30,
)


@given(queued, st.sampled_from([0.0, 0.6, 1.0]), st.sampled_from([1.0, 1000.0, 8500.0]))
def test_the_one_pass_order_is_the_keys_order(
    spec: list[tuple[float, float, int, int, bool]], now: float, throughput: float
) -> None:
    queue = [
        make_request(
            f"r{i}",
            arrival=arrival,
            ttft=ttft,
            prompt=prompt,
            computed=min(computed, prompt - 1),
            protected=protected,
        )
        for i, (arrival, ttft, prompt, computed, protected) in enumerate(spec)
    ]
    for alpha, epsilon in ((1.0, 0.001), (0.5, 0.2)):
        expected = sorted(queue, key=lambda r: mlps_key(r, now, throughput, alpha, epsilon))
        assert mlps_order(queue, now, throughput, alpha, epsilon) == expected
