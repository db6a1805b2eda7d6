"""QoServe's prefill priority and its end-to-end SLO conversion (its relegation and rate
estimate are tested with `policies.common`)."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from factories import make_request

from slidingserve.core import Phase, Request
from slidingserve.policies.qoserve.priority import priority_key, ttft_from_e2e


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


def test_end_to_end_slo_to_ttft() -> None:
    assert ttft_from_e2e(10.0, 0.05, 15) == pytest.approx(9.25)
