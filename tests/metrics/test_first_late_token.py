"""The first late token of a timeline, against its verdict, under both TBT readings."""

from __future__ import annotations

import pytest
from factories import make_timeline
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.metrics import Outcome, TbtReading

CUMULATIVE, PER_GAP = TbtReading.CUMULATIVE, TbtReading.PER_GAP


@pytest.mark.parametrize(
    ("times", "cumulative", "per_gap"),
    [
        ([0.5, 0.6, 0.7], None, None),  # every token in time
        ([1.2, 1.25], 0, 0),  # first token late (TTFT 1 s)
        # Deadlines 1.0, 1.1, 1.2, 1.3; a 0.4 s pause before the third token.
        ([0.2, 0.3, 0.7, 0.75], None, 2),  # the banked slack covers it cumulatively
        ([0.9, 1.0, 1.4, 1.45], 2, 2),
        ([0.9, 0.95, 1.0, 1.31], 3, 3),
        ([0.5, 0.65, 1.25, 1.35], 2, 1),  # per gap: the second token came 0.15 s after
    ],
)
def test_first_late_token_by_reading(
    times: list[float], cumulative: int | None, per_gap: int | None
) -> None:
    line = make_timeline(times, ttft=1.0, tbt=0.1)
    assert line.first_late_token(CUMULATIVE) == cumulative
    assert line.first_late_token(PER_GAP) == per_gap


def test_a_failed_request_is_late_at_its_first_missing_token() -> None:
    assert make_timeline([0.5, 0.6], outcome=Outcome.FAILED).first_late_token(CUMULATIVE) == 2
    assert make_timeline([], outcome=Outcome.FAILED).first_late_token(PER_GAP) == 0
    assert make_timeline([0.5], outcome=Outcome.CANCELLED).first_late_token(CUMULATIVE) is None


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.floats(0.0, 0.3), min_size=1, max_size=12),
    outcome=st.sampled_from([Outcome.COMPLETED, Outcome.FAILED]),
)
def test_a_first_late_token_exactly_when_the_verdict_says_violated(
    gaps: list[float], outcome: Outcome
) -> None:
    times = [0.5 + sum(gaps[: i + 1]) for i in range(len(gaps))]
    line = make_timeline(times, ttft=1.0, tbt=0.1, outcome=outcome)
    verdict = line.verdict()
    assert verdict is not None
    for reading in (CUMULATIVE, PER_GAP):
        late = line.first_late_token(reading)
        assert (late is not None) == (verdict.ttft or verdict.tbt_late(reading))
        assert (late == 0) == verdict.ttft
