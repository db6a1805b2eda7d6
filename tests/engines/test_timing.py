"""The adapter's clocks (`StepTimer`) with a fake clock, a recording learner and policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import pytest

from slidingserve.core.batch import BatchShape
from slidingserve.core.plan import Plan
from slidingserve.engines.vllm.periods import MAX_PERIODS
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

    def __init__(self, error: Exception | None = None) -> None:
        self.recorded: list[tuple[BatchShape, float]] = []
        self.records: list[IterationRecord] = []
        self.error = error  # raised by on_iteration_end, after recording

    def record(self, shape: BatchShape, seconds: float) -> None:
        self.recorded.append((shape, seconds))

    def on_iteration_end(self, record: IterationRecord) -> None:
        self.records.append(record)
        if self.error is not None:
            raise self.error


class Faults:
    """Stands in for `AdapterHealth.policy_failed`."""

    def __init__(self) -> None:
        self.errors: list[tuple[BaseException, str]] = []

    def __call__(self, error: BaseException, where: str) -> None:
        self.errors.append((error, where))


def make_timer(
    fed: Recorder,
    max_samples: int = MAX_SAMPLES,
    max_periods: int = MAX_PERIODS,
    faults: Faults | None = None,
) -> StepTimer:
    """A timer that feeds `fed` as its learner and as its policy."""
    learner, policy = cast("OnlineLearner", fed), cast("Policy", fed)
    return StepTimer(learner, policy, max_samples, max_periods, faults)


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
    timer = make_timer(fed, max_samples=3, max_periods=2)
    for _ in range(5):
        step(timer, clock, PREFILL, Plan())
    assert len(timer.samples) == len(timer.step_overhead) == 3
    assert len(timer.vllm_schedule_seconds) == 3 and len(timer.periods.periods) == 2
    assert len(fed.recorded) == 5
    assert timer.sizes() == {"timed_steps": 3, "step_periods": 2, "step_timings": 3}


def test_the_default_bounds_hold_over_many_steps(clock: FakeTime) -> None:
    fed = Recorder()
    timer = make_timer(fed)
    for _ in range(MAX_SAMPLES + 500):
        step(timer, clock, PREFILL, Plan())
    assert timer.sizes() == {
        "timed_steps": MAX_SAMPLES,
        "step_periods": MAX_SAMPLES + 499,  # under MAX_PERIODS: the last step is still open
        "step_timings": MAX_SAMPLES,
    }
    assert MAX_PERIODS > MAX_SAMPLES + 500


def test_without_a_steps_file_no_period_is_kept(clock: FakeTime) -> None:
    timer = make_timer(Recorder(), max_periods=0)
    for _ in range(100):
        step(timer, clock, PREFILL, Plan())
    assert len(timer.periods.periods) == 0 and not timer.periods.due
    assert len(timer.samples) == 100


def test_a_policy_error_at_the_step_s_end_is_handed_over_not_raised(clock: FakeTime) -> None:
    fed, faults = Recorder(ValueError("bookkeeping")), Faults()
    timer = make_timer(fed, faults=faults)
    step(timer, clock, PREFILL, Plan())
    step(timer, clock, PREFILL, Plan())
    assert [(str(e), where) for e, where in faults.errors] == [
        ("bookkeeping", "on_iteration_end"),
        ("bookkeeping", "on_iteration_end"),
    ]
    assert len(fed.recorded) == len(fed.records) == len(timer.samples) == 2  # fed anyway


def test_without_a_fault_handler_the_policy_s_error_propagates(clock: FakeTime) -> None:
    timer = make_timer(Recorder(ValueError("bookkeeping")))
    with pytest.raises(ValueError, match="bookkeeping"):
        step(timer, clock, PREFILL, Plan())


# -- async scheduling: step t+1 scheduled while step t runs ----------------------------------


def schedule(timer: StepTimer, clock: FakeTime, shape: BatchShape, step: object) -> None:
    """Schedule `step`: 1 ms planning, 2 ms in vLLM, 0.5 ms after it."""
    timer.step_started()
    clock.now += 0.001
    timer.vllm_started()
    clock.now += 0.002
    timer.vllm_done()
    clock.now += 0.0005
    timer.step_scheduled(Plan(path=str(step)), shape, step)


def output(timer: StepTimer, clock: FakeTime, at: float, step: object) -> None:
    """The output of `step` arrives at `at` (perf_counter, seconds); 1 ms to handle it."""
    clock.now = at
    timer.model_done()
    clock.now += 0.001
    timer.step_done(busy=True, step=step)


DECODES = BatchShape((30, 40), ())


def test_overlapping_steps_are_each_charged_their_own_model_time(clock: FakeTime) -> None:
    fed = Recorder()
    timer = StepTimer(cast("OnlineLearner", fed), cast("Policy", fed), overlapped=True)
    first, second, third = object(), object(), object()
    schedule(timer, clock, PREFILL, first)  # from 0 to 0.0035; runs to 0.0135
    schedule(timer, clock, DECODES, second)  # ends at 0.007, while the first runs
    assert timer.num_in_flight == 2
    output(timer, clock, 0.0135, first)  # ran from its scheduling's end: 10 ms
    schedule(timer, clock, PREFILL, third)  # from 0.0145 to 0.018, while the second runs
    output(timer, clock, 0.0205, second)  # ran from the first's output: 7 ms
    output(timer, clock, 0.0305, third)  # ran from the second's output: 10 ms
    assert [(s, round(t, 6)) for s, t in fed.recorded] == [
        (PREFILL, 0.010),
        (DECODES, 0.007),
        (PREFILL, 0.010),
    ]
    assert [r.plan.path for r in fed.records] == [str(s) for s in (first, second, third)]
    assert [r.start for r in fed.records] == pytest.approx([1000.0035, 1000.0135, 1000.0205])
    # A period runs from the step's start, or the previous output if later, to its output.
    periods = [(p.shape, round(p.seconds, 6)) for p in timer.periods.periods]
    assert periods == [(PREFILL, 0.0135), (DECODES, 0.007), (PREFILL, 0.010)]
    assert timer.num_in_flight == 0


def test_an_output_matches_its_own_step_and_drops_older_unanswered_ones(
    clock: FakeTime,
) -> None:
    fed = Recorder()
    timer = StepTimer(cast("OnlineLearner", fed), cast("Policy", fed), overlapped=True)
    lost, answered = object(), object()
    schedule(timer, clock, DECODES, lost)  # its output never comes (vLLM's step raised)
    schedule(timer, clock, PREFILL, answered)
    output(timer, clock, 0.02, answered)
    output(timer, clock, 0.03, object())  # a step never scheduled: nothing to time
    assert [shape for shape, _ in fed.recorded] == [PREFILL]
    assert timer.num_in_flight == 0
