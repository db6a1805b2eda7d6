"""One simulation, end to end: workload → requests → policy on the modelled GPU → metrics."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slidingserve.core.view import EngineLimits
from slidingserve.policies import PolicyContext, get_policy_class
from slidingserve.predictor.calibration import Calibration
from slidingserve.sim.engine import Simulator, SimulatorOptions
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig, load_model
from slidingserve.sim.metrics import RunMetrics, TbtReading, compute_metrics, metrics_by_tier
from slidingserve.sim.profiling import calibrate
from slidingserve.workloads import WorkloadConfig, generate_requests

MIN_RATE = 1e-4
"""Slowest rate simulated, req/s: below it arrival times swamp the latencies in float64."""


@dataclass(frozen=True)
class SimulationSpec:
    """Everything that defines a simulation except the rate and the seed."""

    policy: str  # a key of slidingserve.policies.POLICIES
    workload: WorkloadConfig
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    limits: EngineLimits = field(default_factory=EngineLimits)
    policy_options: Mapping[str, Any] = field(default_factory=dict)  # the policy's config
    tbt_reading: TbtReading = TbtReading.CUMULATIVE
    calibration: Calibration | None = None  # shared by runs; None: calibrate if needed

    def __post_init__(self) -> None:
        get_policy_class(self.policy)  # unknown names fail here, before any run

    @property
    def max_model_len(self) -> int:
        return load_model(self.hardware.model).max_model_len


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """One run's metrics and what it cost."""

    policy: str
    workload: str
    rate: float  # requests per second (base rate of the arrival process)
    seed: int
    metrics: RunMetrics
    tiers: dict[str, RunMetrics]  # per SLO tier, when the workload has tiers
    num_iterations: int
    num_preemptions: int
    wall_seconds: float  # host time the simulation took

    def to_row(self) -> dict[str, Any]:
        """A flat dict, milliseconds for latencies, for tables and CSV files."""
        m = self.metrics
        row: dict[str, Any] = {
            "policy": self.policy,
            "workload": self.workload,
            "rate": self.rate,
            "seed": self.seed,
            "requests": m.num_requests,
            "violation_rate": m.violation_rate,
            "ttft_violation_rate": m.ttft_violation_rate,
            "tbt_violation_rate": m.tbt_violation_rate,
            "tbt_reading": m.tbt_reading,
            "cumulative_violation_rate": m.cumulative_violation_rate,
            "per_gap_violation_rate": m.per_gap_violation_rate,
            "throughput_rps": m.request_throughput,
            "output_tps": m.output_throughput,
        }
        for name in ("ttft", "tbt", "tpot", "e2e"):
            stats = getattr(m, name)
            for quantile in ("p50", "p90", "p99"):
                row[f"{name}_{quantile}_ms"] = getattr(stats, quantile) * 1000
        for tier, metrics in self.tiers.items():
            row[f"violation_rate[{tier}]"] = metrics.violation_rate
        row.update(iterations=self.num_iterations, preemptions=self.num_preemptions)
        row["wall_s"] = self.wall_seconds
        return row


def needs_calibration(policy: str) -> bool:
    policy_class = get_policy_class(policy)
    return policy_class.needs_predictor or policy_class.needs_profile


def calibrated(spec: SimulationSpec) -> SimulationSpec:
    """`spec` carrying a calibration if its policy needs one, so that many runs share it."""
    if spec.calibration is not None or not needs_calibration(spec.policy):
        return spec
    return dataclasses.replace(spec, calibration=calibrate(spec.hardware, spec.limits))


def policy_context(spec: SimulationSpec) -> PolicyContext:
    """What the policy of `spec` is built with (calibrating first if it needs it)."""
    calibration = calibrated(spec).calibration
    if calibration is None:
        return PolicyContext(spec.limits)
    return PolicyContext(spec.limits, calibration.predictor, calibration.batches)


def simulate(spec: SimulationSpec, rate: float, seed: int) -> SimulationResult:
    """Run `spec` at `rate` req/s with `seed` (which fixes requests, arrivals and noise)."""
    if not MIN_RATE <= rate < math.inf:
        raise ValueError(f"rate must be at least {MIN_RATE} req/s and finite, got {rate}")
    started = time.perf_counter()
    requests = generate_requests(spec.workload, rate, seed, spec.max_model_len)
    latency = GroundTruthLatency(spec.hardware, seed)
    policy = get_policy_class(spec.policy).from_options(policy_context(spec), spec.policy_options)
    simulator = Simulator(
        policy,
        latency,
        latency.kv_capacity_blocks(spec.limits.block_size),
        SimulatorOptions(limits=spec.limits),
    )
    run = simulator.run(requests)
    return SimulationResult(
        policy=spec.policy,
        workload=spec.workload.name,
        rate=rate,
        seed=seed,
        metrics=compute_metrics(run.requests, spec.tbt_reading),
        tiers=metrics_by_tier(run.requests, spec.tbt_reading),
        num_iterations=run.num_iterations + run.num_fast_forwarded,
        num_preemptions=run.num_preemptions,
        wall_seconds=time.perf_counter() - started,
    )


OVERALL = "overall"
WORST_TIER = "worst-tier"
TIER_PREFIX = "tier:"


def violation_for(result: SimulationResult, criterion: str) -> float:
    """The violating fraction a goodput criterion looks at.

    "overall": all requests; "worst-tier": the worst tier's (QoServe's goodput);
    "tier:NAME": that tier's.
    """
    if criterion == OVERALL:
        return result.metrics.violation_rate
    if not result.tiers:
        raise ValueError(f"criterion {criterion!r} needs a workload with SLO tiers")
    if criterion == WORST_TIER:
        return max(metrics.violation_rate for metrics in result.tiers.values())
    name = criterion.removeprefix(TIER_PREFIX)
    if not criterion.startswith(TIER_PREFIX) or name not in result.tiers:
        known = ", ".join([OVERALL, WORST_TIER, *(TIER_PREFIX + t for t in result.tiers)])
        raise ValueError(f"unknown goodput criterion {criterion!r}; known: {known}")
    return result.tiers[name].violation_rate
