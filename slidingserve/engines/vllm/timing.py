"""The adapter's clocks: each step's model time, the time the adapter adds, the step periods.

A busy step's model time runs from the end of scheduling to the model's output; it is the
timed batch fed to the online learner and to the policy (`Policy.on_iteration_end`). The
adapter's own share of a step (building the view, planning, imposing and checking the plan)
and vLLM's own `schedule()` are kept apart. Whole step periods go to a `PeriodRecorder`.
Everything kept per step is bounded (a server runs for days): the most recent
`max_samples` timed steps and per-step timings, the most recent `max_periods` periods.
Durations come from `time.perf_counter()`, wall-clock stamps from `time.time()`, both
seconds, read through this module's `time` (tests replace it with a fake clock).
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


class _Scheduled(NamedTuple):
    """A step scheduled and not yet run."""

    plan: Plan
    shape: BatchShape  # what vLLM scheduled
    wall: float  # wall clock when scheduling ended, seconds
    started: float  # perf_counter then, seconds


class StepTimer:
    """Times the steps of one engine and feeds their model times to `learner` and `policy`.

    Each step calls, in order: `step_started` (before planning), `vllm_started` and
    `vllm_done` around vLLM's own `schedule()`, `step_scheduled` (the step's batch is known);
    once the model ran, `model_done` (before vLLM handles the output) and `step_done`
    (after); `engine_idle` when nothing is left to run. With `on_policy_error` (e.g.
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
    ) -> None:
        self.samples: deque[TimedBatch] = deque(maxlen=max_samples)  # model time per busy step
        self.periods = PeriodRecorder(max_periods)
        self.step_overhead: deque[float] = deque(maxlen=max_samples)  # seconds added per step
        self.vllm_schedule_seconds: deque[float] = deque(maxlen=max_samples)  # vLLM's own
        self._learner = learner
        self._policy = policy
        self._on_policy_error = on_policy_error
        self._started = self._vllm_started = self._vllm_done = self._model_done = 0.0
        self._scheduled: _Scheduled | None = None

    def step_started(self) -> float:
        """A step begins (a busy previous one ends); returns the wall clock, seconds."""
        self._started = time.perf_counter()
        self.periods.step_started(self._started)
        return time.time()

    def vllm_started(self) -> None:
        """vLLM's own `schedule()` begins (the plan is imposed)."""
        self._vllm_started = time.perf_counter()

    def vllm_done(self) -> None:
        """vLLM's own `schedule()` returned."""
        self._vllm_done = time.perf_counter()

    def step_scheduled(self, plan: Plan, shape: BatchShape) -> None:
        """The step runs `shape` for `plan`: its model time starts now."""
        self.periods.step_scheduled(shape, self._started)
        self.vllm_schedule_seconds.append(self._vllm_done - self._vllm_started)
        ours = self._vllm_started - self._started + time.perf_counter() - self._vllm_done
        self.step_overhead.append(ours)
        self._scheduled = _Scheduled(plan, shape, time.time(), time.perf_counter())

    def model_done(self) -> float:
        """The model's output arrived; returns the wall clock of its tokens, seconds."""
        self._model_done = time.perf_counter()
        return time.time()

    def step_done(self, busy: bool) -> None:
        """vLLM handled the output; a `busy` step (it ran tokens) is timed and fed on."""
        scheduled, self._scheduled = self._scheduled, None
        if scheduled is None or not busy:
            return
        seconds = self._model_done - scheduled.started
        self.samples.append(TimedBatch(scheduled.shape, seconds))
        self._learner.record(scheduled.shape, seconds)
        record = IterationRecord(scheduled.wall, seconds, scheduled.plan, scheduled.shape)
        try:
            self._policy.on_iteration_end(record)
        except Exception as error:
            # The policy's bookkeeping must not stop the engine: counted and logged by the
            # adapter's health; the next step asks the policy again.
            if self._on_policy_error is None:
                raise
            self._on_policy_error(error, "on_iteration_end")

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
