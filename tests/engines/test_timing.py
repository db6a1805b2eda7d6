"""The adapter's clocks (`StepTimer`) with a fake clock, a recording learner and policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import pytest

from slidingserve.core.batch import BatchShape
from slidingserve.core.plan import Plan
from slidingserve.engines.vllm.timing import MAX_SAMPLES, StepTimer
from slidingserve.policies.base import IterationRecord

if TYPE_CHECKING:
    from slidingserve.policies import Policy
    from slidingserve.predictor import OnlineLearner

PREFILL = BatchShape((), ((64, 0),))


class FakeTime:
    """The `time` module of `timing.py`: perf_counter and a wall clock 1000 s ahead of it."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return 1000.0 + self.now


class Recorder:
    """Stands in for the learner (`record`) and the policy (`on_iteration_end`)."""

    def __init__(self) -> None:
        self.recorded: list[tuple[BatchShape, float]] = []
        self.records: list[IterationRecord] = []

    def record(self, shape: BatchShape, seconds: float) -> None:
        self.recorded.append((shape, seconds))

    def on_iteration_end(self, record: IterationRecord) -> None:
        self.records.append(record)


def make_timer(fed: Recorder, max_samples: int = MAX_SAMPLES) -> StepTimer:
    """A timer that feeds `fed` as its learner and as its policy."""
    return StepTimer(cast("OnlineLearner", fed), cast("Policy", fed), max_samples)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr("slidingserve.engines.vllm.timing.time", fake)
    return fake


def step(timer: StepTimer, clock: FakeTime, shape: BatchShape, plan: Plan) -> None:
    """One step: 1 ms planning, 2 ms in vLLM's schedule, 0.5 ms after it, 10 ms of model."""
    assert timer.step_started() == 1000.0 + clock.now
    clock.now += 0.001
    timer.vllm_started()
    clock.now += 0.002
    timer.vllm_done()
    clock.now += 0.0005
    timer.step_scheduled(plan, shape)
    clock.now += 0.010
    assert timer.model_done() == 1000.0 + clock.now
    clock.now += 0.001  # vLLM handles the output
    timer.step_done(busy=shape.num_tokens > 0)


def test_a_busy_step_s_model_time_reaches_the_learner_and_the_policy(clock: FakeTime) -> None:
    fed = Recorder()
    timer = make_timer(fed)
    plan = Plan()
    step(timer, clock, PREFILL, plan)
    ((shape, seconds),) = fed.recorded
    assert shape == PREFILL and seconds == pytest.approx(0.010)
    (record,) = fed.records
    assert record.start == pytest.approx(1000.0035) and record.duration == seconds
    assert record.plan is plan and record.shape == PREFILL
    assert [s.seconds for s in timer.samples] == [pytest.approx(0.010)]
    assert list(timer.step_overhead) == [pytest.approx(0.0015)]  # not vLLM's own 2 ms
    assert list(timer.vllm_schedule_seconds) == [pytest.approx(0.002)]


def test_an_empty_step_is_not_fed_and_not_a_period(clock: FakeTime) -> None:
    fed = Recorder()
    timer = make_timer(fed)
    step(timer, clock, BatchShape((), ()), Plan())
    timer.step_started()
    assert fed.recorded == [] and fed.records == [] and list(timer.samples) == []
    assert list(timer.periods.periods) == [] and len(timer.step_overhead) == 1


def test_a_period_runs_from_one_step_start_to_the_next(clock: FakeTime) -> None:
    fed = Recorder()
    timer = make_timer(fed)
    step(timer, clock, PREFILL, Plan())
    step(timer, clock, PREFILL, Plan())
    timer.engine_idle()
    timer.step_started()
    assert [p.seconds for p in timer.periods.periods] == [pytest.approx(0.0145)]


def test_the_kept_timings_are_bounded(clock: FakeTime) -> None:
    fed = Recorder()
    timer = make_timer(fed, max_samples=3)
    for _ in range(5):
        step(timer, clock, PREFILL, Plan())
    assert len(timer.samples) == len(timer.step_overhead) == len(timer.periods.periods) == 3
    assert len(fed.recorded) == 5
