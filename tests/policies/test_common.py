"""The rules the policies share (`policies.common`): EDF's key, the cannot-finish test and
its reading of a zero rate, eager relegation and the prefill-rate EMA."""

from __future__ import annotations

import math
from collections.abc import Iterable

import pytest
from factories import make_request
from hypothesis import given
from hypothesis import strategies as st

from slidingserve.core import Phase, Request
from slidingserve.policies.common import (
    PrefillRateEma,
    Relegation,
    cannot_finish_prefill,
    deadline_key,
    deadline_order,
    prefill_seconds,
)


def ids(requests: Iterable[Request]) -> list[str]:
    return [r.request_id for r in requests]


def test_deadline_key_orders_by_next_deadline_then_arrival() -> None:
    late = make_request("late", arrival=0.0, ttft=2.0)  # due 2 s
    early = make_request("early", arrival=0.5, ttft=1.0)  # due 1.5 s
    tie = make_request("tie", arrival=0.3, ttft=1.2)  # due 1.5 s, arrived first
    # Preempted after 10 tokens: its next token is due 0 + 1 + 10 × 0.05 = 1.5 s too.
    preempted = make_request(
        "preempted", arrival=0.0, ttft=1.0, tbt=0.05, generated=10, phase=Phase.WAITING
    )
    order = sorted([late, early, tie, preempted], key=deadline_key)
    assert ids(order) == ["preempted", "tie", "early", "late"]


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [(999, False), (1000, False), (1001, True)],  # 1 s to the deadline at 1000 tok/s
)
def test_cannot_finish_is_a_strict_inequality(prompt: int, expected: bool) -> None:
    request = make_request(arrival=0.0, ttft=1.5, prompt=prompt)
    assert cannot_finish_prefill(request, now=0.5, rate=1000.0) is expected


class TestZeroRate:
    """ρ = 0 is no prefill progress: tokens left never finish, none left finish now."""

    def test_prefill_seconds(self) -> None:
        assert prefill_seconds(1, 0.0) == math.inf
        assert prefill_seconds(0, 0.0) == 0.0
        assert prefill_seconds(500, 1000.0) == 0.5

    def test_a_request_with_prefill_left_cannot_finish(self) -> None:
        assert cannot_finish_prefill(make_request(ttft=100.0, prompt=1), now=0.0, rate=0.0)

    def test_so_relegation_at_zero_rate_takes_every_unstarted_request(self) -> None:
        relegation = Relegation()
        fresh = make_request("fresh", ttft=100.0, prompt=1)
        started = make_request("started", ttft=100.0, prompt=10, computed=5)
        assert relegation.relegate_if_hopeless(fresh, 0.0, 0.0)
        assert not relegation.relegate_if_hopeless(started, 0.0, 0.0)


class TestRelegation:
    def test_only_unstarted_hopeless_requests_are_relegated(self) -> None:
        hopeful = make_request("hopeful", ttft=1.0, prompt=500)  # 0.5 s at 1000 tok/s
        hopeless = make_request("hopeless", ttft=1.0, prompt=2000)  # 2 s
        started = make_request("started", ttft=1.0, prompt=2000, computed=1)  # 1.999 s
        relegation = Relegation()
        newly = [
            r
            for r in (hopeful, hopeless, started)
            if relegation.relegate_if_hopeless(r, 0.0, 1000.0)
        ]
        assert ids(newly) == ["hopeless"]
        assert set(relegation.ids) == {"hopeless"}

    def test_a_request_is_relegated_once_and_stays_relegated(self) -> None:
        request = make_request("r", ttft=1.0, prompt=2000)
        relegation = Relegation()
        assert relegation.relegate_if_hopeless(request, 0.0, 1000.0)
        assert not relegation.relegate_if_hopeless(request, 0.5, 10.0)  # not again
        assert not relegation.relegate_if_hopeless(request, 0.0, 1e9)  # nor undone
        assert "r" in relegation.ids

    def test_ids_of_departed_requests_are_forgotten(self) -> None:
        stays, leaves = make_request("stays", prompt=5000), make_request("leaves", prompt=5000)
        relegation = Relegation()
        for request in (stays, leaves):
            relegation.relegate_if_hopeless(request, 0.0, 1000.0)
        relegation.forget_departed(([stays], []))
        assert set(relegation.ids) == {"stays"}


class TestPrefillRateEma:
    def test_one_step(self) -> None:
        ema = PrefillRateEma(8500.0, 0.995)
        ema.observe(1000, 0.05)  # 20,000 tok/s observed
        assert ema.value == pytest.approx(0.995 * 8500 + 0.005 * 20_000)  # 8557.5

    def test_a_step_without_prefill_tokens_is_not_observed(self) -> None:
        ema = PrefillRateEma(8500.0, 0.995)
        for _ in range(300):
            ema.observe(0, 0.02)
        assert ema.value == 8500.0

    def test_a_step_without_time_is_skipped(self) -> None:
        ema = PrefillRateEma(8500.0, 0.995)
        ema.observe(100, 0.0)
        assert ema.value == 8500.0


@given(
    st.lists(
        st.tuples(st.one_of(st.floats(0.0, 10.0), st.sampled_from([1.0, 2.0])),
                  st.sampled_from([0.0, 0.5, 1.0])),
        max_size=30,
    )
)  # fmt: skip
def test_deadline_order_sorts_by_deadline_then_arrival_ties_in_the_order_given(
    rows: list[tuple[float, float]],
) -> None:
    """Deadlines that tie often (two values drawn often) or never: the same order either way."""
    deadlines, arrivals = [d for d, _ in rows], [a for _, a in rows]
    expected = sorted(range(len(rows)), key=lambda i: (deadlines[i], arrivals[i]))
    assert deadline_order(deadlines, arrivals) == expected
