"""Triage of the prefill queue: Moore–Hodgson's drop-largest and QoServe-style relegation."""

from __future__ import annotations

import itertools

import pytest
from factories import make_request
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.core.request import Request
from slidingserve.policies.common import Relegation
from slidingserve.policies.slidingserve.triage import (
    QueueTriage,
    Triage,
    TriageConfig,
    TriageRule,
    drop_largest,
    relegate_hopeless,
)

RATE = 1000.0  # prefill tokens per second: a request of r tokens takes r ms
EXACT_RATE = 1024.0  # a power of two: r / EXACT_RATE and its sums are exact binary fractions


def queue_of(jobs: list[tuple[int, float]]) -> list[Request]:
    """Requests (remaining prompt, TTFT deadline in s) arrived at 0, in deadline order."""
    ordered = sorted(jobs, key=lambda job: job[1])
    return [make_request(f"r{i}", prompt=r, ttft=d) for i, (r, d) in enumerate(ordered)]


def on_time(queue: list[Request], now: float = 0.0, rate: float = RATE) -> bool:
    """Whether every request of `queue`, served in order at `rate`, finishes by its deadline."""
    finish = now
    for request in queue:
        finish += request.remaining_prefill / rate
        if finish > request.next_deadline:
            return False
    return True


def test_gives_up_the_largest_job_that_makes_the_queue_late() -> None:
    # a 100 ms due 0.2 s, b 500 ms due 0.5 s, c 100 ms due 0.55 s: all three take 0.7 s.
    queue = queue_of([(100, 0.2), (500, 0.5), (100, 0.55)])
    triage = drop_largest(queue, 0.0, RATE)
    assert [r.prompt_len for r in triage.keep] == [100, 100]
    assert [r.prompt_len for r in triage.give_up] == [500]
    assert on_time(triage.keep)


def test_a_request_already_late_is_given_up_and_costs_nothing() -> None:
    late = make_request("late", prompt=50, ttft=0.1)
    fine = make_request("fine", prompt=400, ttft=1.0)
    triage = drop_largest([late, fine], 0.5, RATE)
    assert triage.keep == [fine]
    assert triage.give_up == [late]


def test_protected_requests_are_never_given_up() -> None:
    vip = make_request("vip", prompt=800, ttft=0.5, protected=True)
    small = make_request("small", prompt=100, ttft=0.6)
    triage = drop_largest([vip, small], 0.0, RATE)
    assert triage.keep == [vip]
    assert triage.give_up == [small]


def test_drop_largest_needs_a_positive_rate() -> None:
    with pytest.raises(ValueError, match="positive rate"):
        drop_largest(queue_of([(100, 0.01)]), 0.0, 0.0)


@pytest.mark.parametrize("rule", ["drop-largest", "relegate"])
def test_at_zero_rate_the_triage_gives_up_nothing(rule: TriageRule) -> None:
    # A late request and a hopeless one: given up at any positive rate, kept at ρ = 0
    # (the decodes fill the window for now; relegating for good on that would be wrong).
    late = make_request("late", prompt=50, ttft=0.1)
    hopeless = make_request("hopeless", prompt=5000, ttft=1.0)
    triage = QueueTriage(TriageConfig(rule))
    assert triage.split([late, hopeless], 0.5, 0.0) == Triage([late, hopeless], [])
    assert triage.split([late, hopeless], 0.5, RATE) == Triage([], [late, hopeless])


jobs = st.lists(
    st.tuples(st.integers(1, 400), st.floats(0.05, 1.5, allow_nan=False)), min_size=1, max_size=7
)


@settings(max_examples=150, deadline=None)
@given(jobs)
def test_keeps_as_many_requests_on_time_as_the_best_subset(
    job_list: list[tuple[int, float]],
) -> None:
    """Moore–Hodgson is optimal for the number of on-time jobs: no subset of the queue that
    finishes on time (served in deadline order) is larger than what it keeps. At a rate of
    1,024 tokens a second every prefill time and every sum of them is exact, so a finish
    that lands on a deadline reads the same whichever order the times were added and
    taken away in (at 1,000 a second, rounding made a kept job 1e-16 s late)."""
    queue = queue_of(job_list)
    triage = drop_largest(queue, 0.0, EXACT_RATE)
    assert on_time(triage.keep, rate=EXACT_RATE)
    assert sorted(map(id, triage.keep + triage.give_up)) == sorted(map(id, queue))
    best = max(
        size
        for size in range(len(queue) + 1)
        for subset in itertools.combinations(queue, size)
        if on_time(list(subset), rate=EXACT_RATE)
    )
    assert len(triage.keep) == best


def test_relegation_is_for_good_and_only_for_requests_not_started() -> None:
    hopeless = make_request("hopeless", prompt=2000, ttft=1.0)
    started = make_request("started", prompt=2000, ttft=1.0, computed=100)
    fine = make_request("fine", prompt=100, ttft=1.0)
    relegation = Relegation()
    triage = relegate_hopeless([hopeless, started, fine], 0.0, RATE, relegation)
    assert triage.keep == [started, fine]
    assert triage.give_up == [hopeless]
    assert set(relegation.ids) == {"hopeless"}
    # Still relegated when it would now fit: relegation is never undone.
    again = relegate_hopeless([hopeless, fine], 0.0, 1e9, relegation)
    assert again.give_up == [hopeless]


def test_protected_requests_are_never_relegated() -> None:
    vip = make_request("vip", prompt=2000, ttft=1.0, protected=True)
    assert relegate_hopeless([vip], 0.0, RATE, Relegation()).keep == [vip]


def test_the_queue_triage_forgets_requests_that_left_the_queue() -> None:
    # Relegated while waiting; once it has left the prefill queue its id is dropped.
    hopeless = make_request("hopeless", prompt=2000, ttft=1.0)
    triage = QueueTriage(TriageConfig("relegate"))
    assert triage.split([hopeless], 0.0, RATE).give_up == [hopeless]
    triage.split([], 0.0, RATE)
    assert not triage.relegation.ids


def test_no_triage_is_not_a_triage_rule() -> None:
    with pytest.raises(ValueError, match="unknown triage rule 'none'"):
        TriageConfig("none")  # type: ignore[arg-type]
