"""The queue-aware admission test (`core/queue_fit.py`), at 1,000 prefill tokens a second."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from slidingserve.core.queue_fit import AdmissionQueue, QueuedPrefill, admit_in_turn, fits_queue

RATE = 1000.0


def entry(deadline: float, tokens: int) -> QueuedPrefill:
    return QueuedPrefill(deadline, tokens)


def test_an_empty_queue_takes_a_request_that_can_make_its_deadline_alone() -> None:
    assert fits_queue([], entry(2.0, 1500), 0.0, RATE)
    assert not fits_queue([], entry(1.0, 1500), 0.0, RATE)


def test_the_queue_ahead_counts() -> None:
    queue = [entry(1.0, 800), entry(1.5, 600)]
    assert not fits_queue(queue, entry(2.0, 700), 0.0, RATE)  # 2.1 s
    assert fits_queue(queue, entry(2.0, 600), 0.0, RATE)  # 2.0 s


def test_a_request_that_would_make_one_admitted_late_does_not_fit() -> None:
    # The new one (due at 1.0) goes first and would finish in time, but pushes the one due
    # at 1.5 from 1.2 s to 1.7 s.
    queue = [entry(1.5, 1200)]
    assert not fits_queue(queue, entry(1.0, 500), 0.0, RATE)
    assert fits_queue(queue, entry(1.0, 300), 0.0, RATE)


def test_entries_already_late_do_not_count_against_it() -> None:
    # The one due at 1.5 is late anyway (1.6 s of prefill ahead of it with it).
    queue = [entry(1.5, 1600), entry(3.0, 100)]
    assert fits_queue(queue, entry(1.0, 300), 0.0, RATE)


def test_nothing_fits_at_a_rate_of_zero() -> None:
    assert not fits_queue([], entry(10.0, 1), 0.0, 0.0)


def test_new_requests_are_admitted_in_deadline_order_each_behind_the_last() -> None:
    new = [entry(2.0, 1200), entry(1.0, 900)]  # the one due at 1.0 goes first: 2.1 s
    assert admit_in_turn([], new, 0.0, RATE) == [False, True]


def test_the_queue_relative_to_its_time() -> None:
    queue = AdmissionQueue(10.0, RATE, (entry(10.5, 100), entry(12.0, 200)))
    assert queue.relative() == [(0.5, 100), (2.0, 200)]


REQUESTS = st.lists(
    st.tuples(st.floats(0.01, 5.0), st.integers(1, 3000)),
    min_size=1,
    max_size=18,
    unique_by=lambda pair: pair[0],  # distinct deadlines: one order of the queue
)


@given(REQUESTS, st.integers(0, 18))
def test_admitting_never_makes_an_on_time_request_late(
    requests: list[tuple[float, int]], split: int
) -> None:
    queue = sorted(entry(d, t) for d, t in requests[split:])
    new = [entry(d, t) for d, t in requests[:split]]
    answers = admit_in_turn(queue, new, 0.0, RATE)
    before = on_time(queue)
    after = on_time(sorted([*queue, *(e for e, ok in zip(new, answers, strict=True) if ok)]))
    assert before <= after  # every on-time entry stays on time
    assert all(e in after for e, ok in zip(new, answers, strict=True) if ok)


def on_time(queue: list[QueuedPrefill]) -> set[QueuedPrefill]:
    done, kept = 0, set()
    for e in queue:
        done += e.tokens
        if done / RATE <= e.deadline:
            kept.add(e)
    return kept
