"""A thin vLLM v1 `Scheduler` that runs the project's policies (docs/vllm.md).

Each step it builds the policy's `SchedulerView` from vLLM's queues through the request
mirrors (`mirror.py`), asks the configured policy for a plan, and makes vLLM execute exactly
that plan (`imposer.py`: plan order in vLLM's queues, per-request caps through
`_reserve_prefill_lookahead`, the plan's total as the step budget). vLLM keeps its own KV
allocation and preemption. Requests the policy refuses (admission control) finish before
the step, their clients told why (`refusals.py`); the API server refuses most of them
before they reach the engine, from the load the adapter publishes (`load_record.py`); a
request it tested and let through carries `ADMITTED_MARK` in its id, and an engine that is
the only one behind it admits that request without testing it again (`Request.admitted`).
A step that refuses runs nothing else, where the engine runs one step at a time: its
answers leave as soon as vLLM has handled the empty step, rather than after a model step
of tens of milliseconds, and the next step runs the plan, made anew (never two such steps
in a row). Under async scheduling the refusals go with the step's own output: the step is
planned while the previous one runs, and on a GPU it is short.
`update_from_output` ends the step's timing (`timing.py`), which feeds the model time to
the predictor's online learner and to the policy; every refit of the learner also refits
the policy's own model, if it keeps one (`Policy.refit`).

Departures from the policy are counted in `health` (`health.py`) and logged once a minute:
an empty plan (vLLM's own scheduler then fills the step), a plan vLLM did not run as given
(its KV ran short), a preemption, a failed refit, a dropped measurement. A policy that raises
never stops the engine: that step runs as an empty plan would (vLLM's own scheduling), the
error is counted (`policy_errors`, its first traceback logged) and the next step asks the
policy again. The health line also gives the size of every structure the adapter keeps
(`state_sizes`, exported as `slidingserve:<name>` gauges): those kept per request are freed
when the request leaves the engine (finished, aborted, refused), those kept per step are
bounded, so an idle engine holds no request's state.

Async scheduling (vLLM's default on GPUs) plans step t+1 while step t runs, before step t's
`update_from_output`. `SlidingServeScheduler` then builds `SlidingServeAsyncScheduler`, the
same adapter over vLLM's `AsyncScheduler`: the policy sees tokens in flight as generated
(`mirror.py`: a request with one is decoding, one whose tokens in flight are its last is
finished), and each step's timing is matched to its own output (`timing.py`). Pipeline
parallelism and speculative decoding with async scheduling are refused at start
(`runtime.async_unsupported`).

Configuration comes through vLLM's `additional_config["slidingserve"]`, read as
`runtime.AdapterSettings`: `policy`, `policy_options`, `ttft_ms`, `tbt_ms` (the SLO of
requests without one), `slo_margin_ms` (every request's deadlines planned that much
earlier, `core.slo_args.SLODefaults`), `predictor` (a JSON file from `slidingserve profile`),
`online_learning`, `steps_out` (a file to write the engine's step periods to, see
`periods.py`), `health_log_seconds` (seconds between two health lines in the log),
`load_dir` (where to publish the engine's load for the API server's admission check,
`load_record.py`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Sequence, Sized
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import vllm
from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request as EngineRequestType

from slidingserve.core.plan import Plan
from slidingserve.core.request import Phase
from slidingserve.core.slo_args import SLOArgumentError, parse_slo_args
from slidingserve.core.view import EngineLimits, SchedulerView
from slidingserve.engines.vllm.context import build_policy, starting_point
from slidingserve.engines.vllm.health import (
    AdapterHealth,
    PrometheusCounts,
    share_vllm_log_handlers,
)
from slidingserve.engines.vllm.imposer import PlanImposer
from slidingserve.engines.vllm.load_record import (
    ADMITTED_MARK,
    MAX_QUEUE_ENTRIES,
    LoadPublisher,
    QueueView,
    record_path,
)
from slidingserve.engines.vllm.mirror import RequestMirror
from slidingserve.engines.vllm.periods import MAX_PERIODS
from slidingserve.engines.vllm.prefix_hits import PrefixHits
from slidingserve.engines.vllm.refusals import Refusals
from slidingserve.engines.vllm.runtime import AdapterSettings, async_unsupported
from slidingserve.engines.vllm.timing import StepTimer
from slidingserve.policies.base import ControlsAdmission
from slidingserve.predictor import OnlineConfig, OnlineLearner, Sample

logger = logging.getLogger(__name__)

ONLINE_CONFIG = OnlineConfig(refit_every=200, refit_interval=10.0, min_samples=100)
"""When the learner refits while serving: every 200 timed steps, or 10 s after a new one."""


class VllmKV:
    """The policy's window on vLLM's KV cache; a waiting request holds the blocks of its
    prefix-cache hit that running requests hold already (`prefix_hits.py`)."""

    def __init__(self, scheduler: Scheduler, hits: PrefixHits) -> None:
        self._scheduler = scheduler
        self._hits = hits

    @property
    def num_free(self) -> int:
        return int(self._scheduler.kv_cache_manager.block_pool.get_num_free_blocks())

    @property
    def num_blocks(self) -> int:
        # vLLM keeps one block of its pool as the null block, which no request holds
        return int(self._scheduler.kv_cache_manager.block_pool.num_gpu_blocks) - 1

    @property
    def block_size(self) -> int:
        return int(self._scheduler.block_size)

    def held(self, request: Any) -> int:
        if request.phase is Phase.WAITING:
            return self._hits.shared_blocks(request.request_id)
        # The blocks of its first group, as `get_block_ids` lists them, without the lists
        return len(self._scheduler.kv_cache_manager.coordinator.get_blocks(request.request_id)[0])


@runtime_checkable
class KeepsDecisions(Protocol):
    """A policy that keeps a record per decision (SlidingServe's `decisions`, bounded)."""

    decisions: Sized


ANSWERS_ONLY_PATH = "refusals-answered"  # a synchronous step that only answers refusals


class SlidingServeScheduler(Scheduler):  # type: ignore[misc]
    """vLLM's scheduler, steered by a SlidingServe policy.

    Built for an engine that schedules asynchronously, it is a `SlidingServeAsyncScheduler`:
    one dotted path serves both modes, whichever vLLM settles on.
    """

    overlapped: ClassVar[bool] = False  # whether steps overlap (async scheduling)

    def __new__(cls, *args: Any, **kwargs: Any) -> SlidingServeScheduler:
        if cls is SlidingServeScheduler and schedules_async(vllm_config_of(args, kwargs)):
            cls = SlidingServeAsyncScheduler
        instance: SlidingServeScheduler = super().__new__(cls)
        return instance

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        share_vllm_log_handlers()
        self.settings = AdapterSettings.from_vllm(self.vllm_config.additional_config)
        # Admission by chunk, as the policies plan it (vLLM's default wants the whole prompt).
        self.scheduler_reserve_full_isl = False
        self.defaults = self.settings.slo_defaults
        budget = self.scheduler_config.max_num_batched_tokens
        seqs = self.scheduler_config.max_num_seqs
        self.limits = EngineLimits(budget, seqs, int(self.block_size))
        start = starting_point(self.settings.predictor)
        self.learner = OnlineLearner(start.predictor, ONLINE_CONFIG, on_refit=self._refit_policy)
        self.policy = build_policy(
            self.settings.policy, self.settings.policy_options, self.limits, self.learner, start
        )
        if self.settings.online_learning:
            self.learner.start()
        self.mirror = RequestMirror()
        self.prefix_hits = PrefixHits(cache_key)  # the waiting requests' hits, during a plan
        self.kv_view = VllmKV(self, self.prefix_hits)
        self.imposer = PlanImposer(self, budget)
        self.timer = StepTimer(
            self.learner,
            self.policy,
            max_periods=MAX_PERIODS if self.settings.steps_out else 0,  # kept only to save
            on_policy_error=self._policy_failed,
            overlapped=self.overlapped,
        )
        self.invalid_slo_requests = 0
        self.last_plan: Plan | None = None  # the plan of the latest step
        self.refusals = Refusals()  # requests the policy's admission control refused
        self.health = AdapterHealth(
            self.learner,
            float(self.settings.health_log_seconds),
            metrics=PrometheusCounts.if_exported(),
            sizes=self.state_sizes,
        )
        self.admission = self.policy if isinstance(self.policy, ControlsAdmission) else None
        self.load = self._load_publisher()  # None: the API server refuses nothing at once
        # The API server's queue test on arrival stands for the requests it marks
        self.trusts_api_server = self.load is not None and self._sole_engine()
        pipeline = int(self.vllm_config.parallel_config.pipeline_parallel_size)
        self.one_step_at_a_time = not self.overlapped and pipeline == 1

    def _load_publisher(self) -> LoadPublisher | None:
        """A started publisher of the engine's load for the API server's admission check
        (`load_record.py`), when `serve` named a folder and the policy controls admission."""
        if not self.settings.load_dir or self.admission is None:
            return None
        if self.admission.admission_rate() is None:
            return None
        rank = int(self.vllm_config.parallel_config.data_parallel_rank)
        publisher = LoadPublisher(record_path(self.settings.load_dir, rank))
        self._update_load(publisher)
        publisher.start()
        return publisher

    def _sole_engine(self) -> bool:
        """Whether this engine core is the only one behind the API server. With several
        (data parallel), the API server lets a request through when it fits any one's
        queue, and vLLM's balancer may send it to another: each engine then tests every
        request that reaches it itself."""
        return int(self.vllm_config.parallel_config.data_parallel_size) == 1

    def _update_load(self, publisher: LoadPublisher) -> None:
        """Hand `publisher` the policy's admission rate and the prefill queued at it."""
        try:
            rate = self.admission.admission_rate() if self.admission is not None else None
            queue = self._queue_view()
        except Exception as error:
            # A policy bug must not kill the engine: counted and logged like `schedule`'s.
            self.health.policy_failed(error, "admission_rate")
            return
        if rate is None or not rate > 0:
            return
        queues = itertools.chain(self.kv_holding_waiting, self.waiting, self.running)
        tokens = sum(max(0, r.num_prompt_tokens - r.num_computed_tokens) for r in queues)
        publisher.update(rate, tokens / rate, queue)

    def _queue_view(self) -> QueueView | None:
        """The queue the policy's queue-aware admission test saw this step, on the wall
        clock, for the API server to test new requests against (None without that test). A
        rate of 0 (the decodes alone fill the TBT) is published too: nothing fits it."""
        seen = self.admission.admission_queue() if self.admission is not None else None
        if seen is None or not seen.rate >= 0:
            return None
        entries = tuple(seen.relative()[:MAX_QUEUE_ENTRIES])
        return QueueView(time.time(), seen.rate, entries, seen.decode_seats)

    def _refit_policy(self, samples: Sequence[Sample]) -> None:
        """The learner's listener: at each of its refits, in its thread, the policy's own
        model refits to the same samples (a no-op for policies without one)."""
        self.policy.refit(samples)

    def _policy_failed(self, error: BaseException, where: str) -> None:
        self.health.policy_failed(error, where)

    def state_sizes(self) -> dict[str, int]:
        """Entries in each structure the adapter keeps, by `health.STATE_HELP` name.

        Those kept per request (`tracked_requests`, `imposer_caps`, `refusals_pending`) are
        0 when the engine holds no request; the others are bounded (`timing.MAX_SAMPLES`,
        `OnlineConfig.buffer_size`, the policy's own bound).
        """
        decisions = self.policy.decisions if isinstance(self.policy, KeepsDecisions) else ()
        return {
            "tracked_requests": len(self.mirror),
            "imposer_caps": self.imposer.num_caps,
            "refusals_pending": len(self.refusals),
            "remembered_hits": len(self.prefix_hits.memo),
            **self.timer.sizes(),
            "learner_samples": self.learner.num_samples,
            "policy_decisions": len(decisions),
        }

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
        mirror = self.mirror.add(request, slo)
        mirror.admitted = self.trusts_api_server and ADMITTED_MARK in request.request_id
        super().add_request(request)

    def finish_requests(self, request_ids: str | Iterable[str] | None, finished_status: Any) -> Any:
        finished = super().finish_requests(request_ids, finished_status)
        self.mirror.forget_all_but(set(self.requests))
        if not self.requests:
            self.prefix_hits.memo.forget()
        self.health.state_changed()
        return finished

    # -- the step --------------------------------------------------------------------------

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        now = self.timer.step_started()
        plan = self._plan(now)
        if self.load is not None:
            self._update_load(self.load)
        if self._answers_first(plan):
            # The refusals' answers leave with an empty step, not after a model step; the
            # plan is made anew at the next step, a few milliseconds on.
            plan = Plan(path=ANSWERS_ONLY_PATH, refused=plan.refused)
            self.imposer.hold()
        else:
            self.imposer.impose(plan)
        self.last_plan = plan
        self.timer.vllm_started()
        output = super().schedule(*args, **kwargs)
        self.timer.vllm_done()
        self.prefix_hits.clear()  # read again at the next plan: nothing kept between steps
        outcome = self.imposer.release(plan, output.num_scheduled_tokens)
        preempted = len(output.preempted_req_ids or ())
        queried, hit = self._admitted_prefixes(output)
        self.health.step(
            fell_back=outcome.fell_back,
            mismatch=outcome.mismatch,
            preempted=preempted,
            prefix_queried=queried,
            prefix_hit=hit,
        )
        self.timer.step_scheduled(plan, self.mirror.batch(output.num_scheduled_tokens), output)
        return output

    def _answers_first(self, plan: Plan) -> bool:
        """Whether the step of `plan` only answers its refusals: it refuses some, the engine
        runs one step at a time (no async scheduling, no pipeline of batches), and the step
        before it ran (at most one empty step in a row, so that refusals at every step
        cannot hold the decodes back)."""
        held = self.last_plan is not None and self.last_plan.path == ANSWERS_ONLY_PATH
        return bool(plan.refused) and not held and self.one_step_at_a_time

    def _plan(self, now: float) -> Plan:
        """The policy's plan for the step starting at `now` (wall clock, seconds), its
        refused requests finished; an empty plan, vLLM's own scheduling, if it raised."""
        try:
            plan = self.policy.schedule(self._view(now))
        except Exception as error:
            # A policy bug must not kill the engine and every request in it: this step
            # falls back to vLLM's scheduler, the error is counted and logged (health).
            self.health.policy_failed(error, "schedule")
            return Plan(path="policy-error")
        if plan.refused:
            self.refusals.refuse(self, (r.request_id for r in plan.refused))
        return plan

    def _view(self, now: float) -> SchedulerView:
        waiting = itertools.chain(self.kv_holding_waiting, self.waiting)
        view = self.mirror.view(now, waiting, self.running, self.limits, self.kv_view)
        for request_id, tokens in self.prefix_hits.read(
            self.kv_cache_manager, self.waiting
        ).items():
            mirror = self.mirror.get(request_id)
            if mirror is not None:
                mirror.num_computed = tokens  # it starts from its hit, as in the simulator
        return view

    def _admitted_prefixes(self, output: Any) -> tuple[int, int]:
        """Tokens of the requests admitted for the first time this step and those their
        prefix-cache hits saved (vLLM's prefix-cache statistics, first admissions only)."""
        queried = hit = 0
        for new in output.scheduled_new_reqs:
            request = self.requests.get(new.req_id)
            if request is not None:
                queried += int(request.num_prompt_tokens)
                hit += int(new.num_computed_tokens)
        return queried, hit

    def _reserve_prefill_lookahead(
        self, request: EngineRequestType, num_computed_tokens: int, num_new_tokens: int
    ) -> int:
        tokens = super()._reserve_prefill_lookahead(request, num_computed_tokens, num_new_tokens)
        return self.imposer.cap(request.request_id, int(tokens))

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        wall = self.timer.model_done()
        result = self.refusals.report(
            super().update_from_output(scheduler_output, model_runner_output)
        )
        self.mirror.note_first_tokens(self.requests, scheduler_output.num_scheduled_tokens, wall)
        busy = scheduler_output.total_num_scheduled_tokens > 0
        self.timer.step_done(busy, scheduler_output)
        self.mirror.forget_all_but(set(self.requests))
        if not self.has_unfinished_requests():
            self.timer.engine_idle()
            self.prefix_hits.memo.forget()
            self._save_periods()
        self.health.state_changed()
        return result

    def shutdown(self) -> None:
        self.learner.stop(timeout=1.0)
        if self.load is not None:
            self.load.stop()
        self.health.log_now()
        self.health.close()
        self._save_periods()
        super().shutdown()

    def _save_periods(self) -> None:
        """Write the step periods to `steps_out`, if asked and there are enough new ones."""
        periods = self.timer.periods
        if not self.settings.steps_out or not periods.due:
            return
        path = Path(self.settings.steps_out)
        model = self.vllm_config.model_config
        periods.save(
            path,
            engine=f"{Path(str(model.model)).name} served by vllm-{vllm.__version__}",
            max_model_len=int(model.max_model_len),
            kv_blocks=int(self.cache_config.num_gpu_blocks),
            limits=self.limits,
        )
        logger.debug("wrote %d step periods to %s", len(periods.periods), path)


class SlidingServeAsyncScheduler(SlidingServeScheduler, AsyncScheduler):  # type: ignore[misc]
    """vLLM's `AsyncScheduler`, steered by a SlidingServe policy: the same adapter, its
    policy planning each step while the previous one runs (see the module docstring)."""

    overlapped: ClassVar[bool] = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = vllm_config_of(args, kwargs)
        reason = async_unsupported(
            int(config.parallel_config.pipeline_parallel_size),
            config.speculative_config is not None,
        )
        if reason is not None:
            raise ValueError(reason)
        super().__init__(*args, **kwargs)


def cache_key(block_hash: bytes) -> bytes:
    """A block hash's key in vLLM's prefix-cache map: the one KV cache group, 0."""
    return bytes(make_block_hash_with_group_id(block_hash, 0))


def vllm_config_of(args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """The `VllmConfig` among a scheduler's arguments (vLLM passes it first, by name)."""
    return kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]


def schedules_async(vllm_config: Any) -> bool:
    """Whether the engine of `vllm_config` schedules step t+1 while step t runs."""
    return bool(vllm_config.scheduler_config.async_scheduling)


__all__ = ["SlidingServeAsyncScheduler", "SlidingServeScheduler"]
