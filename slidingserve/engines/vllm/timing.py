"""The adapter's clocks: each step's model time, the time the adapter adds, the step periods.

A busy step's model time runs from the end of scheduling to the model's output; it is the
timed batch fed to the online learner and to the policy (`Policy.on_iteration_end`). The
adapter's own share of a step (building the view, planning, imposing and checking the plan)
and vLLM's own `schedule()` are kept apart. Whole step periods go to a `PeriodRecorder`.
Everything kept per step is bounded (a server runs for days): the most recent
`max_samples` timed steps and per-step timings, the most recent `max_periods` periods.
Durations come from `time.perf_counter()`, wall-clock stamps from `time.time()`, both
seconds, read through this module's `time` (tests replace it with a fake clock).

Under async scheduling (`overlapped`) step t+1 is scheduled while step t runs, and its model
starts only when step t's output is in: a step's model time runs from the later of its
scheduling's end and the previous step's output, so each step is charged its own time
whatever the order of the calls. Steps scheduled and not yet run wait in a queue, each
matched to its own output by the `step` the adapter names it with (vLLM's
`SchedulerOutput`), and a period is then the time from the later of the step's start and
the previous output to its own output: steps overlap, so periods no longer run from one
schedule to the next. With synchronous scheduling both read as they always did.
No vLLM import.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, NamedTuple

from slidingserve.core.batch import BatchShape, TimedBatch
from slidingserve.engines.vllm.periods import MAX_PERIODS, PeriodRecorder
from slidingserve.policies.base import IterationRecord

if TYPE_CHECKING:
    from collections.abc import Callable

    from slidingserve.core.plan import Plan
    from slidingserve.policies import Policy
    from slidingserve.predictor import OnlineLearner

MAX_SAMPLES = 10_000
"""Timed steps (and per-step timings) kept, the most recent ones: ten times what a
`slidingserve profile` run measures. A timed batch takes about 1 KB with a dozen requests,
about 10 KB with 256 (a tuple entry per decode)."""

MAX_IN_FLIGHT = 16
"""Steps scheduled and not yet run that are kept: vLLM runs at most a few at once (two under
async scheduling, one more per pipeline stage); older ones, whose output never came, go."""


class _Scheduled(NamedTuple):
    """A step scheduled and not yet run."""

    step: object  # what the adapter names the step by (vLLM's SchedulerOutput), or None
    plan: Plan
    shape: BatchShape  # what vLLM scheduled
    began: float  # perf_counter when the step began (before planning), seconds
    wall: float  # wall clock when scheduling ended, seconds
    started: float  # perf_counter then, seconds


class StepTimer:
    """Times the steps of one engine and feeds their model times to `learner` and `policy`.

    Each step calls, in order: `step_started` (before planning), `vllm_started` and
    `vllm_done` around vLLM's own `schedule()`, `step_scheduled` (the step's batch is known);
    once the model ran, `model_done` (before vLLM handles the output) and `step_done`
    (after); `engine_idle` when nothing is left to run. Under async scheduling
    (`overlapped`), the next step's calls up to `step_scheduled` come before this one's
    `model_done`; `step_done` names the step whose output came. With `on_policy_error` (e.g.
    `AdapterHealth.policy_failed`), an error of the policy's `on_iteration_end` is handed
    to it, with the name of the call, instead of raised into the engine.
    """

    def __init__(
        self,
        learner: OnlineLearner,
        policy: Policy,
        max_samples: int = MAX_SAMPLES,
        max_periods: int = MAX_PERIODS,
        on_policy_error: Callable[[BaseException, str], None] | None = None,
        overlapped: bool = False,
    ) -> None:
        self.samples: deque[TimedBatch] = deque(maxlen=max_samples)  # model time per busy step
        self.periods = PeriodRecorder(max_periods)
        self.step_overhead: deque[float] = deque(maxlen=max_samples)  # seconds added per step
        self.vllm_schedule_seconds: deque[float] = deque(maxlen=max_samples)  # vLLM's own
        self._learner = learner
        self._policy = policy
        self._on_policy_error = on_policy_error
        self._overlapped = overlapped  # async scheduling: steps overlap (module docstring)
        self._started = self._vllm_started = self._vllm_done = self._model_done = 0.0
        self._last_output = 0.0  # perf_counter when the latest step's output came, seconds
        self._scheduled: deque[_Scheduled] = deque(maxlen=MAX_IN_FLIGHT)  # oldest first

    def step_started(self) -> float:
        """A step begins (a busy previous one ends); returns the wall clock, seconds."""
        self._started = time.perf_counter()
        if not self._overlapped:
            self.periods.step_started(self._started)
        return time.time()

    def vllm_started(self) -> None:
        """vLLM's own `schedule()` begins (the plan is imposed)."""
        self._vllm_started = time.perf_counter()

    def vllm_done(self) -> None:
        """vLLM's own `schedule()` returned."""
        self._vllm_done = time.perf_counter()

    def step_scheduled(self, plan: Plan, shape: BatchShape, step: object = None) -> None:
        """The step `step` runs `shape` for `plan`: its model time starts now, or when the
        step before it ends."""
        if not self._overlapped:
            self.periods.step_scheduled(shape, self._started)
        self.vllm_schedule_seconds.append(self._vllm_done - self._vllm_started)
        ours = self._vllm_started - self._started + time.perf_counter() - self._vllm_done
        self.step_overhead.append(ours)
        scheduled = _Scheduled(step, plan, shape, self._started, time.time(), time.perf_counter())
        self._scheduled.append(scheduled)

    def model_done(self) -> float:
        """The model's output arrived; returns the wall clock of its tokens, seconds."""
        self._model_done = time.perf_counter()
        return time.time()

    def step_done(self, busy: bool, step: object = None) -> None:
        """vLLM handled the output of step `step` (the oldest scheduled one if None); a
        `busy` step (it ran tokens) is timed and fed on."""
        scheduled = self._take(step)
        previous, self._last_output = self._last_output, self._model_done
        if scheduled is None or not busy:
            return
        start = max(scheduled.started, previous)  # after the step before it, if they overlap
        seconds = self._model_done - start
        if self._overlapped:
            period = self._model_done - max(scheduled.began, previous)
            self.periods.record(scheduled.shape, period)
        self.samples.append(TimedBatch(scheduled.shape, seconds))
        self._learner.record(scheduled.shape, seconds)
        wall = scheduled.wall + start - scheduled.started
        self._end_iteration(IterationRecord(wall, seconds, scheduled.plan, scheduled.shape))

    def _take(self, step: object) -> _Scheduled | None:
        """The scheduled step `step` (the oldest if None), dropping older ones whose output
        never came; None if it is not there."""
        while self._scheduled:
            scheduled = self._scheduled.popleft()
            if step is None or scheduled.step is step:
                return scheduled
        return None

    def _end_iteration(self, record: IterationRecord) -> None:
        try:
            self._policy.on_iteration_end(record)
        except Exception as error:
            # The policy's bookkeeping must not stop the engine: counted and logged by the
            # adapter's health; the next step asks the policy again.
            if self._on_policy_error is None:
                raise
            self._on_policy_error(error, "on_iteration_end")

    @property
    def num_in_flight(self) -> int:
        """Steps scheduled whose output has not come: 0 or 1 between synchronous steps."""
        return len(self._scheduled)

    def engine_idle(self) -> None:
        """Nothing is left to run: no period runs until the next step."""
        self.periods.engine_idle()

    def sizes(self) -> dict[str, int]:
        """Entries kept now, by `health.STATE_HELP` name (each under its bound)."""
        return {
            "timed_steps": len(self.samples),
            "step_periods": len(self.periods.periods),
            "step_timings": len(self.step_overhead),
        }
