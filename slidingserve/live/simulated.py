"""What the simulator predicts for a live comparison.

The same policies, workload, seeds, repeats, SLO rule and goodput search as `compare`, run
on a simulated copy of the engine built from its profiled steps (`ProfiledLatency`). The
requests are those a bench run sends (`scaled_requests`), and each run is judged by the
bench's own `summarize`, so both tables mean the same thing cell by cell. vLLM's `fcfs` and
`priority` are simulated by the `vllm` and `vllm-priority` policies. Policies that need a
predictor or a profile get them as the simulator's `calibrate` gives them: random batches
timed on the simulated engine, noise included (`calibrate_profiled`), and the project's
predictor fitted to those timings. Every such policy gets the same batches, and none the
simulated engine's own expected-time model, so SlidingServe plans with an estimate just
as QoServe does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import cached_property

from slidingserve.bench.metrics import BenchSummary, summarize
from slidingserve.bench.records import Outcome, RequestRecord
from slidingserve.bench.requests import scaled_requests
from slidingserve.core.request import Request
from slidingserve.core.view import EngineLimits
from slidingserve.eval.goodput import GoodputEstimate, search_goodput
from slidingserve.live.compare import (
    LiveComparison,
    LiveRow,
    LiveSettings,
    median_row,
    median_violation,
    scale_for_tpot,
)
from slidingserve.policies import PolicyContext, get_policy_class
from slidingserve.predictor.calibration import Calibration
from slidingserve.predictor.steps import EngineSteps
from slidingserve.sim.engine import Simulator, SimulatorOptions
from slidingserve.sim.hardware.profiled import ProfiledLatency, calibrate_profiled
from slidingserve.sim.runner import needs_calibration

CALIBRATION_REQUESTS = 12  # like the live calibration run
CALIBRATION_RATE = 0.5  # req/s
SIMULATED_BUILTINS = {"vllm:fcfs": "vllm", "vllm:priority": "vllm-priority"}


def simulated_policy(policy: str) -> str:
    """The simulator's policy for a `compare` policy name; ValueError if unknown."""
    name = SIMULATED_BUILTINS.get(policy, policy)
    get_policy_class(name)
    return name


class SimulatedEngine:
    """Runs bench-equivalent trials on the profiled engine."""

    def __init__(self, steps: EngineSteps, settings: LiveSettings) -> None:
        self.steps = steps
        self.settings = settings
        self.limits = EngineLimits(
            settings.max_num_batched_tokens, settings.max_num_seqs, steps.block_size
        )
        self.latency = ProfiledLatency(steps)  # fitted once; each run reseeds its noise

    @cached_property
    def calibration(self) -> Calibration:
        """What a profiler measures on this engine, once, for every policy to share: its
        stream is apart from every trial's (see `calibrate_profiled`)."""
        return calibrate_profiled(self.latency, self.limits, self.settings.seed)

    def policy_context(self, policy: str) -> PolicyContext:
        """What `policy` (a `compare` name) is built with, as `sim.runner.policy_context`
        builds it: the calibration if the policy needs one, else the limits alone."""
        if not needs_calibration(simulated_policy(policy)):
            return PolicyContext(self.limits)
        calibration = self.calibration
        return PolicyContext(self.limits, calibration.predictor, calibration.batches)

    def run(
        self, policy: str, rate: float, seed: int, slo_scale: float, requests: int | None = None
    ) -> BenchSummary:
        """One simulated trial (of `requests`, default the settings' count), summarized
        exactly as `slidingserve bench` summarizes a live one."""
        workload = self.settings.workload_config(slo_scale)
        if requests is not None:
            workload = dataclasses.replace(workload, num_requests=requests)
        trial = scaled_requests(workload, rate, seed, self.steps.max_model_len)
        context = self.policy_context(policy)
        scheduler = get_policy_class(simulated_policy(policy)).from_options(context, {})
        latency = self.latency.with_seed(seed)
        simulator = Simulator(
            scheduler,
            latency,
            latency.kv_capacity_blocks(self.limits.block_size),
            SimulatorOptions(limits=self.limits),
        )
        records = [_record(request) for request in simulator.run(trial).requests]
        duration = max(record.finished for record in records)
        return summarize(records, planned=len(trial), duration=duration)

    def calibrate(self) -> float:
        """The SLO scale by `compare`'s rule, from a light simulated run."""
        summary = self.run(
            "vllm:fcfs", CALIBRATION_RATE, self.settings.seed, 100.0, CALIBRATION_REQUESTS
        )
        return scale_for_tpot(summary.tpot_ms.p50, self.settings.tbt_headroom)


def simulate_comparison(
    steps: EngineSteps,
    settings: LiveSettings,
    policies: Sequence[str],
    rates: Sequence[float],
    search: bool = False,
    say: Callable[[str], None] = print,
) -> LiveComparison:
    """`compare`, predicted: every policy on the simulated copy of the profiled engine."""
    for policy in policies:
        simulated_policy(policy)  # bad names fail before any run
    engine = SimulatedEngine(steps, settings)
    scale = settings.slo_scale
    if scale is None:
        scale = engine.calibrate()
        say(f"SLO scale for the simulated engine: {scale:.3f}")
    rows: list[LiveRow] = []
    goodput: dict[str, GoodputEstimate] = {}
    seeds = [settings.seed + repeat for repeat in range(settings.repeats)]
    for policy in policies:
        for rate in rates:
            runs = [engine.run(policy, rate, seed, scale) for seed in seeds]
            rows.append(median_row(policy, rate, runs))
        if search:
            goodput[policy] = _search(engine, policy, scale, seeds, rates, settings)
            say(f"{policy}: simulated goodput {goodput[policy].goodput:.2f} req/s")
    return LiveComparison(settings, scale, rows, goodput)


def _search(
    engine: SimulatedEngine,
    policy: str,
    scale: float,
    seeds: Sequence[int],
    rates: Sequence[float],
    settings: LiveSettings,
) -> GoodputEstimate:
    def violation_at(rate: float) -> float:
        runs = (engine.run(policy, rate, seed, scale) for seed in seeds)
        return median_violation(run.violations.overall for run in runs)

    return search_goodput(violation_at, min(rates) if rates else 1.0, settings.search)


def _record(request: Request) -> RequestRecord:
    """A finished simulated request as the bench records a streamed one: sent on time,
    one token per chunk."""
    times = tuple(request.token_times)
    return RequestRecord(
        request.request_id,
        scheduled=request.arrival,
        sent=request.arrival,
        finished=times[-1] if times else request.arrival,
        prompt_tokens=request.prompt_len,
        max_tokens=request.output_len,
        slo=request.slo,
        outcome=Outcome.COMPLETED,
        chunk_times=times,
        chunk_tokens=(1,) * len(times),
        usage_tokens=len(times),
    )
