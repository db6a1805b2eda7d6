"""The decode side of the queue-aware admission test (`admission.py`)."""

from __future__ import annotations

import pytest
from factories import TokenLinearModel, make_request, make_view

from slidingserve.core import BatchShape, Plan
from slidingserve.policies.base import IterationRecord
from slidingserve.policies.slidingserve.admission import DecodeRoom, StepOverhead, decode_seats
from slidingserve.policies.slidingserve.stats import TimedModel

# 10 ms + 1 ms a token: n decodes alone take 10 + n ms; within 50 ms ÷ 1.1 up to n = 35.
MODEL = TimedModel(TokenLinearModel(0.010, 1e-3))


def test_a_request_is_taken_while_the_decodes_stay_within_the_tbt() -> None:
    room = DecodeRoom(MODEL, [100] * 34, 0.05, 1.1)
    assert room.take(make_request("a", tbt=0.05))  # 35 decodes: 45 ms
    assert not room.take(make_request("b", tbt=0.05))  # 36: 46 ms > 45.45 ms
    assert len(room.contexts) == 35


def test_a_tighter_tbt_of_the_newcomer_counts_and_a_refusal_leaves_the_room_as_it_was() -> None:
    room = DecodeRoom(MODEL, [100] * 20, 0.05, 1.1)
    assert not room.take(make_request("tight", tbt=0.025))  # 31 ms > 22.7 ms
    assert room.tbt == 0.05 and len(room.contexts) == 20
    assert room.seats(100) == 15


def test_seats_are_counted_up_to_their_cap() -> None:
    assert decode_seats(MODEL, [], 100, 0.0455) == 35
    assert decode_seats(MODEL, [100] * 40, 100, 0.0455) == 0
    assert decode_seats(MODEL, [], 100, float("inf")) == 256


def record(start: float, duration: float, decodes: int) -> IterationRecord:
    shape = BatchShape(tuple([100] * decodes), ())
    return IterationRecord(start, duration, Plan(), shape)


def test_the_overhead_is_the_gap_after_steps_that_ran_decodes() -> None:
    overhead = StepOverhead()
    overhead.observe(record(0.0, 0.040, decodes=4))
    overhead.observe(record(0.050, 0.040, decodes=4))  # 10 ms after the first ended
    assert overhead.seconds == pytest.approx(0.1 * 0.010)
    assert overhead.model_share == pytest.approx(0.040 / 0.050)


def test_a_gap_after_a_step_without_decodes_is_idleness_not_overhead() -> None:
    overhead = StepOverhead()
    overhead.observe(record(0.0, 0.040, decodes=0))
    overhead.observe(record(5.0, 0.040, decodes=4))
    assert overhead.seconds == 0.0 and overhead.model_share == 1.0


def test_the_overhead_leaves_less_of_the_tbt_to_the_decodes() -> None:
    room = DecodeRoom(MODEL, [100] * 34, 0.05, 1.1, overhead=0.002)
    assert not room.take(make_request("a", tbt=0.05))  # 45 ms + 2 ms > 45.45 ms


def test_a_fast_forwarded_run_between_two_records_is_not_overhead() -> None:
    overhead = StepOverhead()
    overhead.observe(record(0.0, 0.040, decodes=4))
    overhead.skip()  # the simulator ran decode-only steps from 0.04 s to 2.0 s
    overhead.observe(record(2.0, 0.040, decodes=4))
    assert overhead.seconds == 0.0 and overhead.model_share == 1.0


def test_a_gap_after_the_last_request_finished_is_idleness_not_overhead() -> None:
    overhead = StepOverhead()
    overhead.observe(record(0.0, 0.040, decodes=4))  # the last decodes: every request ends
    arrived_later = make_request("next", arrival=30.0)
    overhead.note_view(make_view(now=30.0, waiting=[arrived_later])[0])
    overhead.observe(record(30.0, 0.040, decodes=4))  # the next arrival, 30 s later
    assert overhead.seconds == 0.0 and overhead.model_share == 1.0


@pytest.mark.parametrize("queue", ["waiting", "running"])
def test_a_gap_while_a_request_was_there_is_overhead(queue: str) -> None:
    overhead = StepOverhead()
    overhead.observe(record(0.0, 0.040, decodes=4))
    present = make_request("present", arrival=0.01, computed=100 if queue == "running" else 0)
    if queue == "running":
        view, _ = make_view(now=0.050, running=[present])
    else:
        view, _ = make_view(now=0.050, waiting=[present])
    overhead.note_view(view)
    overhead.observe(record(0.050, 0.040, decodes=4))
    assert overhead.seconds == pytest.approx(0.1 * 0.010)
