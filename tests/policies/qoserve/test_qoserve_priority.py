"""QoServe's prefill priority, eager relegation and throughput estimate."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from factories import make_request

from slidingserve.core import Phase, Request
from slidingserve.policies.qoserve.priority import (
    Relegation,
    ThroughputEma,
    cannot_meet_ttft,
    priority_key,
    ttft_from_e2e,
)


def prefill_order(
    candidates: Iterable[Request], relegated: set[str], weight: float
) -> list[Request]:
    """The candidates as QoServe's heap would pop them."""
    return sorted(candidates, key=lambda r: priority_key(r, relegated, weight))


def queue() -> list[Request]:
    """Keys at weight 0.008 s/token: d 1.5 + 0.4 = 1.9, a 2 + 0.8 = 2.8,
    b 1.5 + 4 = 5.5, c 5 + 0.8 = 5.8 (c has 100 of 400 tokens left)."""
    return [
        make_request("a", arrival=0.0, ttft=2.0, prompt=100),
        make_request("b", arrival=0.5, ttft=1.0, prompt=500),
        make_request("c", arrival=0.0, ttft=5.0, prompt=400, computed=300),
        make_request("d", arrival=1.0, ttft=0.5, prompt=50),
    ]


def ids(requests: Iterable[Request]) -> list[str]:
    return [r.request_id for r in requests]


def test_order_is_deadline_plus_weighted_remaining_work() -> None:
    order = prefill_order(queue(), set(), 0.008)
    assert ids(order) == ["d", "a", "b", "c"]


def test_without_the_weight_the_order_is_earliest_deadline_first() -> None:
    order = prefill_order(queue(), set(), 0.0)
    assert ids(order) == ["b", "d", "a", "c"]  # 1.5 (arrived first), 1.5, 2, 5


def test_relegated_requests_come_last_in_their_own_order() -> None:
    order = prefill_order(queue(), {"d", "a"}, 0.008)
    assert ids(order) == ["b", "c", "d", "a"]


def test_a_preempted_request_is_ordered_by_the_deadline_of_its_next_token() -> None:
    # Preempted after 20 tokens: next deadline 0 + 1 + 20 × 0.05 = 2 s, 120 tokens to
    # recompute: key 2 + 0.96 = 2.96, behind a fresh request keyed 1 + 0.8 + 1 = 2.8.
    preempted = make_request("p", ttft=1.0, prompt=100, generated=20, phase=Phase.WAITING)
    fresh = make_request("f", arrival=1.0, ttft=1.0, prompt=100)
    assert preempted.remaining_prefill == 120
    assert ids(prefill_order([preempted, fresh], set(), 0.008)) == ["f", "p"]


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [(999, False), (1000, False), (1001, True)],  # 1 s to the deadline at 1000 tok/s
)
def test_cannot_meet_ttft_is_a_strict_inequality(prompt: int, expected: bool) -> None:
    request = make_request(arrival=0.0, ttft=1.5, prompt=prompt)
    assert cannot_meet_ttft(request, now=0.5, throughput=1000.0) is expected


def test_no_throughput_means_no_deadline_can_be_met() -> None:
    assert cannot_meet_ttft(make_request(ttft=100.0, prompt=1), now=0.0, throughput=0.0)


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


class TestThroughputEma:
    def test_one_step(self) -> None:
        ema = ThroughputEma(8500.0, 0.995)
        ema.observe(1000, 0.05)  # 20,000 tok/s observed
        assert ema.value == pytest.approx(0.995 * 8500 + 0.005 * 20_000)  # 8557.5

    def test_a_step_without_prefill_tokens_is_not_observed(self) -> None:
        ema = ThroughputEma(8500.0, 0.995)
        for _ in range(300):
            ema.observe(0, 0.02)
        assert ema.value == 8500.0

    def test_a_step_without_time_is_skipped(self) -> None:
        ema = ThroughputEma(8500.0, 0.995)
        ema.observe(100, 0.0)
        assert ema.value == 8500.0


def test_end_to_end_slo_to_ttft() -> None:
    assert ttft_from_e2e(10.0, 0.05, 15) == pytest.approx(9.25)
