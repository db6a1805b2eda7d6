"""A thin vLLM v1 `Scheduler` that runs the project's policies (SPEC §11).

Each step it builds the policy's `SchedulerView` from vLLM's queues, asks the configured
policy for a plan, and makes vLLM execute exactly that plan: the planned requests are put
first, in plan order, in vLLM's running and waiting queues; each one's tokens are capped
through `_reserve_prefill_lookahead` (unplanned ones get 0); the step's token budget is the
plan's total. vLLM keeps its own KV allocation and preemption. `update_from_output` times
the model step and feeds the predictor's online learner and the policy; every refit of the
learner also refits the policy's own model, if it keeps one (`Policy.refit`).

Departures from the policy are counted in `health` (`health.py`) and logged once a minute:
an empty plan (vLLM's own scheduler then fills the step), a plan vLLM did not run as given
(its KV ran short), a failed refit.

Configuration comes through vLLM's `additional_config["slidingserve"]`:
`policy`, `policy_options`, `ttft_ms`, `tbt_ms` (defaults for requests without SLOs),
`predictor` (a JSON file from `slidingserve profile`), `online_learning` (default true),
`steps_out` (a file to write the engine's step periods to at shutdown, see `periods.py`),
`health_log_seconds` (seconds between two health lines in the log, default 60).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import vllm
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request as EngineRequestType

from slidingserve.core.batch import BatchShape, TimedBatch
from slidingserve.core.plan import Plan
from slidingserve.core.request import Phase
from slidingserve.core.view import EngineLimits, SchedulerView
from slidingserve.engines.vllm.context import (
    LivePredictor,
    StartingPoint,
    policy_profile,
    starting_point,
)
from slidingserve.engines.vllm.health import (
    LOG_INTERVAL,
    AdapterHealth,
    PrometheusCounts,
    share_vllm_log_handlers,
)
from slidingserve.engines.vllm.mirror import RequestMirror
from slidingserve.engines.vllm.periods import PeriodRecorder
from slidingserve.engines.vllm.slo_args import SLOArgumentError, SLODefaults, parse_slo_args
from slidingserve.policies import Policy, PolicyContext, get_policy_class
from slidingserve.policies.base import IterationRecord
from slidingserve.predictor import OnlineConfig, OnlineLearner, Sample
from slidingserve.predictor.steps import MIN_STEPS

logger = logging.getLogger(__name__)

CONFIG_KEY = "slidingserve"
MAX_SAMPLES = 100_000  # timed steps (and per-step timings) kept for inspection and profiling


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
        share_vllm_log_handlers()
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
        start = starting_point(settings)
        self.learner = OnlineLearner(start.predictor, _online_config(), on_refit=self._refit_policy)
        self.policy = self._build_policy(settings, start)
        if settings.get("online_learning", True):
            self.learner.start()
        self.health = AdapterHealth(
            self.learner,
            float(settings.get("health_log_seconds", LOG_INTERVAL)),
            metrics=PrometheusCounts.if_exported(),
        )
        self.mirror = RequestMirror()
        self.kv_view = VllmKV(self)
        self.samples: deque[TimedBatch] = deque(maxlen=MAX_SAMPLES)
        self.periods = PeriodRecorder(MAX_SAMPLES)
        self.steps_out = settings.get("steps_out")
        self.step_overhead: deque[float] = deque(maxlen=MAX_SAMPLES)  # seconds added per step
        self.vllm_schedule_seconds: deque[float] = deque(maxlen=MAX_SAMPLES)  # vLLM's own step
        self.invalid_slo_requests = 0
        self.last_plan: Plan | None = None  # the plan of the latest step
        self._caps: dict[str, int] | None = None
        self._pending: tuple[Plan, BatchShape, float, float] | None = None

    def _build_policy(self, settings: Mapping[str, Any], start: StartingPoint) -> Policy:
        name = str(settings.get("policy", "slidingserve"))
        policy_class = get_policy_class(name)
        profile: tuple[TimedBatch, ...] = ()
        if policy_class.needs_profile:
            profile = policy_profile(start, self.limits, name)
        context = PolicyContext(self.limits, LivePredictor(self.learner), profile)
        return policy_class.from_options(context, settings.get("policy_options", {}))

    def _refit_policy(self, samples: Sequence[Sample]) -> None:
        """The learner's listener: at each of its refits, in its thread, the policy's own
        model refits to the same samples (a no-op for policies without one)."""
        self.policy.refit(samples)

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
        measured, wall = time.perf_counter(), time.time()
        result = super().update_from_output(scheduler_output, model_runner_output)
        self._note_first_tokens(scheduler_output.num_scheduled_tokens, wall)
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
        self.health.log_now()
        self._save_periods()
        super().shutdown()

    def _note_first_tokens(self, scheduled: Iterable[str], wall: float) -> None:
        """Stamp the first token of each request whose first token this step produced."""
        for request_id in scheduled:
            request = self.requests.get(request_id)
            if request is not None:
                self.mirror.note_first_token(request, wall)

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
        """Restore vLLM's budget; count the step, and whether vLLM filled an empty plan or
        ran other tokens than planned."""
        self.max_num_scheduled_tokens = self.scheduler_config.max_num_batched_tokens
        scheduled = dict(output.num_scheduled_tokens)
        wanted = {chunk.request.request_id: chunk.tokens for chunk in plan.chunks}
        self.health.step(
            fell_back=not plan.chunks and bool(scheduled),
            mismatch=bool(plan.chunks) and scheduled != wanted,
        )

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


def _online_config() -> OnlineConfig:
    return OnlineConfig(refit_every=200, refit_interval=10.0, min_samples=100)


__all__ = ["CONFIG_KEY", "SlidingServeScheduler"]
