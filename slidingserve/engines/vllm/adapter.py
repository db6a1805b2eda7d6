"""A thin vLLM v1 `Scheduler` that runs the project's policies (SPEC §11).

Each step it builds the policy's `SchedulerView` from vLLM's queues, asks the configured
policy for a plan, and makes vLLM execute exactly that plan: the planned requests are put
first, in plan order, in vLLM's running and waiting queues; each one's tokens are capped
through `_reserve_prefill_lookahead` (unplanned ones get 0); the step's token budget is the
plan's total. vLLM keeps its own KV allocation and preemption; when it must depart from
the plan (its KV ran short) the step is counted in `plan_mismatches`. `update_from_output`
times the model step and feeds the predictor's online learner and the policy.

Configuration comes through vLLM's `additional_config["slidingserve"]`:
`policy`, `policy_options`, `ttft_ms`, `tbt_ms` (defaults for requests without SLOs),
`predictor` (a JSON file from `slidingserve profile`), `online_learning` (default true),
`steps_out` (a file to write the engine's step periods to at shutdown, see `periods.py`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import vllm
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request as EngineRequestType

from slidingserve.core.batch import BatchShape, TimedBatch
from slidingserve.core.plan import Plan
from slidingserve.core.request import Phase
from slidingserve.core.view import EngineLimits, SchedulerView
from slidingserve.engines.vllm.mirror import RequestMirror
from slidingserve.engines.vllm.periods import PeriodRecorder
from slidingserve.engines.vllm.slo_args import SLOArgumentError, SLODefaults, parse_slo_args
from slidingserve.policies import Policy, PolicyContext, get_policy_class
from slidingserve.policies.base import IterationRecord
from slidingserve.predictor import (
    BatchLatencyPredictor,
    Features,
    LinearModel,
    OnlineConfig,
    OnlineLearner,
    Scenario,
    load_predictor,
    random_batch_shapes,
)
from slidingserve.sim.hardware.profiled import MIN_STEPS

logger = logging.getLogger(__name__)

CONFIG_KEY = "slidingserve"
MAX_SAMPLES = 100_000  # timed steps kept for inspection and profiling
STARTING_GUESS = LinearModel(0.005, (0.0, 0.0, 0.0, 2e-5, 0.0, 5e-5, 0.0))
"""Before any measurement or profile: 5 ms a step, 20 µs a decode, 50 µs a prefill token."""


class LivePredictor:
    """Reads the online learner's current predictor at every call (it swaps in refits)."""

    def __init__(self, learner: OnlineLearner) -> None:
        self.learner = learner

    def predict_features(self, scenario: Scenario, x: Features) -> float:
        return self.learner.predictor.predict_features(scenario, x)


class VllmKV:
    """The policy's window on vLLM's KV cache."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    @property
    def num_free(self) -> int:
        return int(self._scheduler.kv_cache_manager.block_pool.get_num_free_blocks())

    @property
    def block_size(self) -> int:
        return int(self._scheduler.block_size)

    def held(self, request: Any) -> int:
        if request.phase is Phase.WAITING:
            return 0
        return len(self._scheduler.kv_cache_manager.get_block_ids(request.request_id)[0])


class SlidingServeScheduler(Scheduler):  # type: ignore[misc]
    """vLLM's scheduler, steered by a SlidingServe policy."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = dict((self.vllm_config.additional_config or {}).get(CONFIG_KEY, {}))
        # Admission by chunk, as the policies plan it (vLLM's default wants the whole prompt).
        self.scheduler_reserve_full_isl = False
        self.defaults = SLODefaults(
            float(settings.get("ttft_ms", 2000.0)), float(settings.get("tbt_ms", 50.0))
        )
        self.limits = EngineLimits(
            self.scheduler_config.max_num_batched_tokens,
            self.scheduler_config.max_num_seqs,
            int(self.block_size),
        )
        self.learner = OnlineLearner(_initial_predictor(settings), _online_config())
        if settings.get("online_learning", True):
            self.learner.start()
        self.policy = self._build_policy(settings)
        self.mirror = RequestMirror()
        self.kv_view = VllmKV(self)
        self.samples: deque[TimedBatch] = deque(maxlen=MAX_SAMPLES)
        self.periods = PeriodRecorder(MAX_SAMPLES)
        self.steps_out = settings.get("steps_out")
        self.step_overhead: list[float] = []  # seconds the adapter adds per step
        self.vllm_schedule_seconds: list[float] = []  # vLLM's own schedule() per step
        self.plan_mismatches = 0
        self.invalid_slo_requests = 0
        self.last_plan: Plan | None = None  # the plan of the latest step
        self._caps: dict[str, int] | None = None
        self._pending: tuple[Plan, BatchShape, float, float] | None = None

    def _build_policy(self, settings: Mapping[str, Any]) -> Policy:
        name = str(settings.get("policy", "slidingserve"))
        policy_class = get_policy_class(name)
        profile: tuple[TimedBatch, ...] = ()
        if policy_class.needs_profile:
            profile = _synthetic_profile(self.learner.predictor, self.limits)
        context = PolicyContext(self.limits, LivePredictor(self.learner), profile)
        return policy_class.from_options(context, settings.get("policy_options", {}))

    # -- requests in and out -------------------------------------------------------------

    def add_request(self, request: EngineRequestType) -> None:
        extra = request.sampling_params.extra_args if request.sampling_params else None
        try:
            slo = parse_slo_args(extra, self.defaults)
        except SLOArgumentError as error:
            # The front end rejects these (SLOValidator); never raise inside the engine loop.
            logger.warning("request %s: %s; using the default SLO", request.request_id, error)
            self.invalid_slo_requests += 1
            slo = parse_slo_args(None, self.defaults)
        self.mirror.add(request, slo)
        super().add_request(request)

    def finish_requests(self, request_ids: str | Iterable[str] | None, finished_status: Any) -> Any:
        finished = super().finish_requests(request_ids, finished_status)
        self.mirror.forget_all_but(set(self.requests))
        return finished

    # -- the step --------------------------------------------------------------------------

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        self.periods.step_started(started)
        view = self._view()
        plan = self.policy.schedule(view)
        self.last_plan = plan
        self._impose(plan)
        planned = time.perf_counter()
        output = super().schedule(*args, **kwargs)
        done = time.perf_counter()
        self._caps = None
        self._check(plan, output)
        shape = self._shape(output)
        self.periods.step_scheduled(shape, started)
        self.vllm_schedule_seconds.append(done - planned)
        self.step_overhead.append(planned - started + time.perf_counter() - done)
        self._pending = (plan, shape, time.time(), time.perf_counter())
        return output

    def _reserve_prefill_lookahead(
        self, request: EngineRequestType, num_computed_tokens: int, num_new_tokens: int
    ) -> int:
        tokens = int(
            super()._reserve_prefill_lookahead(request, num_computed_tokens, num_new_tokens)
        )
        if self._caps is None:
            return tokens
        return min(tokens, self._caps.get(request.request_id, 0))

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        measured = time.perf_counter()
        result = super().update_from_output(scheduler_output, model_runner_output)
        if self._pending is not None and scheduler_output.total_num_scheduled_tokens > 0:
            plan, shape, wall_start, started = self._pending
            seconds = measured - started
            self.samples.append(TimedBatch(shape, seconds))
            self.learner.record(shape, seconds)
            self.policy.on_iteration_end(IterationRecord(wall_start, seconds, plan, shape))
        self._pending = None
        self.mirror.forget_all_but(set(self.requests))
        if not self.has_unfinished_requests():
            self.periods.engine_idle()
            self._save_periods()
        return result

    def shutdown(self) -> None:
        self.learner.stop(timeout=1.0)
        self._save_periods()
        super().shutdown()

    def _save_periods(self) -> None:
        """Write the step periods to `steps_out`, if asked and there are enough new ones."""
        if not self.steps_out or not self.periods.unsaved:
            return
        if len(self.periods.periods) < MIN_STEPS:
            return
        path = Path(self.steps_out)
        model = self.vllm_config.model_config
        self.periods.save(
            path,
            engine=f"{Path(str(model.model)).name} served by vllm-{vllm.__version__}",
            max_model_len=int(model.max_model_len),
            kv_blocks=int(self.cache_config.num_gpu_blocks),
            limits=self.limits,
        )
        logger.debug("wrote %d step periods to %s", len(self.periods.periods), path)

    # -- steps of `schedule` ----------------------------------------------------------------

    def _view(self) -> SchedulerView:
        waiting = [
            mirror
            for queue in (self.kv_holding_waiting, self.waiting)
            for request in queue
            if (mirror := self.mirror.sync(request, waiting=True)) is not None
        ]
        running = [
            mirror
            for request in self.running
            if (mirror := self.mirror.sync(request, waiting=False)) is not None
        ]
        decoding = [r for r in running if r.phase is Phase.DECODING]
        prefilling = [r for r in running if r.phase is Phase.PREFILLING]
        return SchedulerView(
            time.time(), waiting, running, prefilling, decoding, self.limits, self.kv_view
        )

    def _impose(self, plan: Plan) -> None:
        """Planned requests first, in plan order; caps and budget from the plan."""
        if not plan.chunks:
            return  # nothing planned: let vLLM run its own step rather than spin idle
        rank = {chunk.request.request_id: i for i, chunk in enumerate(plan.chunks)}
        last = len(rank)
        self.running.sort(key=lambda r: rank.get(r.request_id, last))
        for queue in (self.kv_holding_waiting, self.waiting):
            ordered = sorted(queue, key=lambda r: rank.get(r.request_id, last))
            queue.clear()
            queue.extend(ordered)
        self._caps = {chunk.request.request_id: chunk.tokens for chunk in plan.chunks}
        self.max_num_scheduled_tokens = min(
            plan.total_tokens, self.scheduler_config.max_num_batched_tokens
        )

    def _check(self, plan: Plan, output: Any) -> None:
        self.max_num_scheduled_tokens = self.scheduler_config.max_num_batched_tokens
        wanted = {chunk.request.request_id: chunk.tokens for chunk in plan.chunks}
        if plan.chunks and dict(output.num_scheduled_tokens) != wanted:
            self.plan_mismatches += 1

    def _shape(self, output: Any) -> BatchShape:
        """The batch vLLM scheduled, by phase as the mirrors saw it before the step."""
        decodes: list[int] = []
        prefills: list[tuple[int, int]] = []
        for request_id, tokens in output.num_scheduled_tokens.items():
            mirror = self.mirror.get(request_id)
            if mirror is None:
                continue
            cached = mirror.num_computed if mirror.phase is not Phase.WAITING else 0
            if mirror.phase is Phase.DECODING:
                decodes.append(cached)
            else:
                prefills.append((int(tokens), cached))
        return BatchShape(tuple(decodes), tuple(prefills))


def _initial_predictor(settings: Mapping[str, Any]) -> BatchLatencyPredictor:
    path = settings.get("predictor")
    if path:
        return load_predictor(str(path)).predictor
    return BatchLatencyPredictor.single(STARTING_GUESS)


def _online_config() -> OnlineConfig:
    return OnlineConfig(refit_every=200, refit_interval=10.0, min_samples=100)


def _synthetic_profile(
    predictor: BatchLatencyPredictor, limits: EngineLimits, count: int = 2000
) -> tuple[TimedBatch, ...]:
    """Timed batches for policies that fit their own model, from the predictor we start with
    (a real engine has no ground truth to sample; `slidingserve profile` fits that one)."""
    shapes = random_batch_shapes(
        count,
        np.random.default_rng(0),
        max_tokens=limits.max_num_batched_tokens,
        max_decodes=min(limits.max_num_seqs, limits.max_num_batched_tokens),
    )
    return tuple(TimedBatch(shape, predictor.predict(shape)) for shape in shapes)


__all__ = ["CONFIG_KEY", "SlidingServeScheduler"]
