"""The discrete-event simulator: an engine that runs a policy's plans on a modelled GPU.

Each iteration: admit arrivals, make room in the KV cache for every decode (preempting by
recompute if needed), ask the policy for a plan, time the batch with the ground-truth
latency model, advance the clock and emit tokens. Stretches where every running request is
decoding and nothing waits are fast-forwarded in one vectorised step: they are most of the
iterations at low load, and the policy's decision there is fixed by the contract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Protocol

import numpy as np

from slidingserve.core.batch import BatchShape
from slidingserve.core.kv_blocks import KVBlockManager, blocks_for_tokens
from slidingserve.core.plan import validate_plan
from slidingserve.core.prefix_cache import PrefixCachingKV
from slidingserve.core.request import Phase
from slidingserve.core.view import EngineLimits
from slidingserve.policies.base import IterationRecord
from slidingserve.sim.state import EngineState
from slidingserve.sim.tracing import (
    RequestTrace,
    RequestTracer,
    blocks_while_running,
    decode_run_blocks,
    decode_run_slacks,
    prefilling_blocks,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.kv_blocks import BlockGrowth
    from slidingserve.core.plan import Plan
    from slidingserve.core.request import Request
    from slidingserve.policies.base import Policy

FAST_FORWARD_MAX_STEPS = 4096
"""Longest decode-only run simulated in one vectorised step (bounds array sizes)."""

DECODE_RUN = "decode-run"
"""The path of the iterations of a fast-forwarded decode-only run (no plan was asked for)."""

MAX_PREEMPTIONS_PER_REQUEST = 1000
"""Beyond this many preemptions per request on average the engine is thrashing: a bug."""

# Read over every running request at every iteration: built-in passes, no generator
_PHASE = attrgetter("phase")
_REMAINING_OUTPUT = attrgetter("remaining_output")


class IterationTimer(Protocol):
    """Times batches: the simulator's GPU (the ground-truth latency model)."""

    def sample_time(self, shape: BatchShape) -> float:
        """Seconds the iteration running `shape` takes; called once per stepped iteration."""
        ...

    def decode_run_times(self, num_decodes: int, decode_kv: int, steps: int) -> np.ndarray:
        """Seconds of each of up to `steps` decode-only iterations (KV sum grows by
        `num_decodes` a step), without using up their noise; see `consume_noise`."""
        ...

    def consume_noise(self, count: int) -> None:
        """Called after `decode_run_times` with the number of those steps that ran."""
        ...


class SchedulingStallError(RuntimeError):
    """The policy ran nothing although work was waiting and nothing could be preempted."""


@dataclass(frozen=True, slots=True)
class SimulatorOptions:
    """How the simulated engine runs (its limits and its bookkeeping)."""

    limits: EngineLimits = EngineLimits()
    fast_forward: bool = True  # vectorise decode-only stretches (exact up to float rounding)
    validate_plans: bool = True  # check every plan against the engine limits
    record_iterations: bool = False  # keep an IterationLog per iteration
    trace_requests: bool = False  # keep a RequestTrace per request (first chunk, preemptions,
    # relegations)


@dataclass(frozen=True, slots=True)
class IterationLog:
    """One executed iteration, when `record_iterations` is on."""

    start: float  # seconds
    duration: float  # seconds
    num_tokens: int  # tokens in the batch
    num_requests: int  # requests in the batch
    num_decodes: int  # decodes in the batch
    path: str  # the policy's decision path
    queued: int  # requests waiting or prefilling when it was planned
    decode_slack: float | None  # seconds from its start to the earliest next deadline of a
    # decoding request (negative: already late); None without decodes
    kv_used: int = 0  # KV blocks held while it runs: after its growth (allocated when it
    # is scheduled, as vLLM), before its finished requests free theirs
    kv_total: int = 0  # KV blocks in the cache
    kv_prefilling: int = 0  # of `kv_used`, blocks held by started, unfinished prefills when
    # it was planned (`tracing.prefilling_blocks`)


@dataclass(frozen=True, slots=True)
class SimulationRun:
    """What a run leaves behind: the requests with their token times, and counters."""

    requests: list[Request]
    end_time: float  # seconds, when the last token came out
    num_iterations: int
    num_fast_forwarded: int  # iterations simulated inside decode-only runs
    num_preemptions: int
    iterations: list[IterationLog]
    blocks_in_use_at_end: int  # KV blocks still held when all requests finished (should be 0)
    traces: dict[str, RequestTrace] = field(default_factory=dict)  # by request id, when
    # `trace_requests` is on
    prefix_cache: PrefixCacheStats | None = None  # when the run had a prefix cache


@dataclass(frozen=True, slots=True)
class PrefixCacheStats:
    """What a run's prefix cache saved, counted as vLLM counts it: at each start of a
    request (a preempted one starts again), its prefill target and its hit."""

    queried_tokens: int
    hit_tokens: int

    @property
    def hit_rate(self) -> float:
        """Share of the queried tokens found in the cache (0 when nothing was queried)."""
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


class Simulator:
    """Runs one policy over one list of requests on one modelled GPU; deterministic."""

    def __init__(
        self,
        policy: Policy,
        timer: IterationTimer,
        kv_blocks: int,
        options: SimulatorOptions = SimulatorOptions(),
    ) -> None:
        self.policy = policy
        self.timer = timer
        self.options = options
        self.limits = options.limits
        self.kv_blocks = kv_blocks

    def run(self, requests: Sequence[Request]) -> SimulationRun:
        """Simulate until every request has finished. The requests are mutated in place."""
        replica = self.replica(sorted(requests, key=lambda r: r.arrival))
        replica.advance(math.inf)
        return replica.finished_run()

    def replica(
        self, requests: Sequence[Request] = (), expected: Sequence[Request] | None = None
    ) -> Replica:
        """A replica of this engine that will serve `requests` (by arrival) and whatever
        `Replica.submit` hands it later; it runs as far as `Replica.advance` says.
        `expected`: every request it may be handed (default `requests`), which decides
        whether its KV cache keeps prefixes."""
        self.check_fits(requests)
        tracer = RequestTracer(self.policy) if self.options.trace_requests else None
        cache = self._cache(requests if expected is None else expected)
        return Replica(self, EngineState(list(requests), cache, tracer))

    def _cache(self, requests: Sequence[Request]) -> KVBlockManager:
        """The KV cache of a run: with a prefix cache when the limits ask for one and some
        request's content is known (without, it would find nothing)."""
        if self.limits.prefix_caching and any(request.content for request in requests):
            return PrefixCachingKV(self.kv_blocks, self.limits.block_size)
        return KVBlockManager(self.kv_blocks, self.limits.block_size)

    def check_fits(self, requests: Sequence[Request]) -> None:
        for request in requests:
            # The last token is emitted, never cached: at most p + o − 1 tokens are held.
            most = request.prompt_len + request.output_len - 1
            needed = blocks_for_tokens(most, self.limits.block_size)
            if needed > self.kv_blocks:
                raise ValueError(
                    f"request {request.request_id} needs {needed} KV blocks "
                    f"({most} tokens at most); the cache has "
                    f"{self.kv_blocks}"
                )


class Replica:
    """One engine's run, stepped from outside: `advance` runs every iteration that starts
    before a given time, `submit` hands it a request that arrives later. `Simulator.run`
    advances one replica to the end; a cluster (`sim/cluster.py`) advances each to the
    next arrival, routes it, and goes on."""

    def __init__(self, engine: Simulator, state: EngineState) -> None:
        self.engine = engine
        self.policy = engine.policy
        self.state = state
        self.logs: list[IterationLog] = []
        self.counters = _Counters()

    def submit(self, request: Request) -> None:
        """Hand the replica `request`, arriving no earlier than those it has (and fitting
        its KV cache: `Simulator.check_fits`)."""
        pending = self.state.all_requests
        if pending and request.arrival < pending[-1].arrival:
            raise ValueError(
                f"request {request.request_id} arrives at {request.arrival} s, before the "
                f"last one submitted ({pending[-1].arrival} s)"
            )
        pending.append(request)

    def advance(self, horizon: float) -> None:
        """Run every iteration that starts before `horizon` (seconds); decode-only runs stop
        there, so that an iteration at or after it sees what arrives then."""
        state, counters = self.state, self.counters
        while not state.all_finished:
            state.admit_arrivals()
            if state.idle:
                if state.next_arrival >= horizon:
                    return
                state.now = state.next_arrival
                continue
            if state.now >= horizon:
                return
            preempted = state.make_room_for_decodes(self.policy.preemption_victim)
            counters.preemptions += preempted
            self._check_thrashing()
            if self._can_fast_forward():
                counters.fast_forwarded += self._fast_forward(min(state.next_arrival, horizon))
                continue
            self._step(admit=not preempted)

    def finished_run(self) -> SimulationRun:
        """What the run left behind (call once every request has finished)."""
        state, counters = self.state, self.counters
        return SimulationRun(
            state.all_requests,
            state.now,
            counters.iterations,
            counters.fast_forwarded,
            counters.preemptions,
            self.logs,
            state.kv.num_used,
            state.tracer.traces if state.tracer is not None else {},
            _prefix_stats(state.kv),
        )

    def _check_thrashing(self) -> None:
        num_requests = len(self.state.all_requests)
        if self.counters.preemptions > MAX_PREEMPTIONS_PER_REQUEST * num_requests:
            raise SchedulingStallError(
                f"policy {self.policy.name!r}: {self.counters.preemptions} preemptions for "
                f"{num_requests} requests; the engine is thrashing"
            )

    def _step(self, admit: bool) -> None:
        state, options = self.state, self.engine.options
        plan, growth = self._plan(admit)
        if not plan.chunks:  # it refused every request there was: no iteration runs
            return
        shape = BatchShape.from_plan(plan)
        duration = self.engine.timer.sample_time(shape)
        start = state.now
        if options.record_iterations:
            self.logs.append(
                IterationLog(
                    start,
                    duration,
                    shape.num_tokens,
                    len(plan),
                    shape.num_decodes,
                    plan.path,
                    state.num_queued,
                    state.decode_slack(),
                    blocks_while_running(state.kv, plan.chunks),
                    state.kv.num_blocks,
                    prefilling_blocks(state.kv, state.running),
                )
            )
        state.execute(plan, start + duration, growth)
        self.counters.iterations += 1
        self.policy.on_iteration_end(IterationRecord(start, duration, plan, shape))

    def _plan(self, admit: bool) -> tuple[Plan, BlockGrowth | None]:
        """Ask the policy; if it runs nothing, preempt the policy's victim and ask again
        (admitting nothing new in an iteration that preempted, as vLLM). With the plan, the
        blocks its chunks add when validation counted them (`validate_plan`)."""
        state, counters, limits = self.state, self.counters, self.engine.limits
        while True:
            view = state.view(limits, admit)
            plan = self.policy.schedule(view)
            if state.tracer is not None:
                state.tracer.scheduled(view.now)
            if plan.refused:
                state.refuse(plan.refused)
                counters.refused += len(plan.refused)
                if not plan.chunks:
                    if state.idle:
                        return plan, None
                    continue
            if plan.chunks:
                if self.engine.options.validate_plans:
                    return plan, validate_plan(plan, view)
                return plan, None
            if not state.running:
                raise SchedulingStallError(
                    f"policy {self.policy.name!r} scheduled nothing with "
                    f"{len(state.waiting)} requests waiting and {view.kv.num_free} free KV blocks"
                )
            state.preempt(self.policy.preemption_victim(state.running, state.now))
            counters.preemptions += 1
            admit = False

    def _can_fast_forward(self) -> bool:
        state, limits = self.state, self.engine.limits
        if not self.engine.options.fast_forward or state.waiting:
            return False
        num_decodes = len(state.running)
        return (
            num_decodes <= min(limits.max_num_seqs, limits.max_num_batched_tokens)
            and all(map(is_, map(_PHASE, state.running), repeat(Phase.DECODING)))
            and self.policy.schedules_all_decodes(num_decodes)
        )

    def _fast_forward(self, cut: float) -> int:
        """Run decode-only iterations until a completion, a KV limit or `cut` (the next
        arrival): an iteration that starts at or after it is not run here."""
        state, timer = self.state, self.engine.timer
        running = state.running
        num_decodes = len(running)
        least_output: int = min(map(_REMAINING_OUTPUT, running))
        steps = min(
            FAST_FORWARD_MAX_STEPS,
            least_output,
            self.engine.limits.block_size * (state.kv.num_free // num_decodes),
        )
        if steps < 1:
            steps = 1
        decode_kv = sum(r.num_computed for r in running)
        durations = timer.decode_run_times(num_decodes, decode_kv, steps)
        ends = state.now + np.cumsum(durations)
        if cut < math.inf:
            starts_before = int(np.searchsorted(ends, cut, side="left")) + 1
            steps = min(steps, starts_before)
        timer.consume_noise(steps)
        if self.engine.options.record_iterations:
            self._log_decode_run(durations[:steps], ends[: steps - 1])
        state.execute_decode_run(ends[:steps].tolist())
        self.policy.on_decode_run(durations[:steps].tolist(), num_decodes)
        return steps

    def _log_decode_run(self, durations: np.ndarray, ends_before_last: np.ndarray) -> None:
        state = self.state
        running, steps = state.running, len(durations)
        num_decodes = len(running)
        starts = np.concatenate(([state.now], ends_before_last))
        slacks = decode_run_slacks(running, starts)
        used = decode_run_blocks(running, state.kv, steps)
        total = state.kv.num_blocks
        self.logs += [
            IterationLog(
                start,
                duration,
                num_decodes,
                num_decodes,
                num_decodes,
                DECODE_RUN,
                0,
                slack,
                blocks,
                total,
            )
            for start, duration, slack, blocks in zip(
                starts.tolist(), durations.tolist(), slacks.tolist(), used.tolist(), strict=True
            )
        ]


def _prefix_stats(kv: KVBlockManager) -> PrefixCacheStats | None:
    if not isinstance(kv, PrefixCachingKV):
        return None
    return PrefixCacheStats(kv.queried_tokens, kv.hit_tokens)


@dataclass(slots=True)
class _Counters:
    iterations: int = 0
    fast_forwarded: int = 0
    preemptions: int = 0
    refused: int = 0
