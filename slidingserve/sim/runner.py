"""One simulation, end to end: workload → requests → policy on the modelled GPU → metrics."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from slidingserve.core.view import EngineLimits
from slidingserve.metrics import (
    RunMetrics,
    TbtReading,
    Timeline,
    ViolationRates,
    measure,
    measure_tiers,
    span,
)
from slidingserve.policies import PolicyContext, get_policy_class, make_policy, unrecorded
from slidingserve.predictor.calibration import Calibration
from slidingserve.routing import ReplicaModel, make_router, router_class
from slidingserve.sim.calibration import calibrate
from slidingserve.sim.cluster import (
    ClusterFigures,
    ClusterLayout,
    ClusterRun,
    replica_seed,
    run_cluster,
)
from slidingserve.sim.engine import IterationTimer, SimulationRun, Simulator, SimulatorOptions
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig, load_model
from slidingserve.workloads import WorkloadConfig, generate_requests

if TYPE_CHECKING:
    from slidingserve.core.request import Request
    from slidingserve.policies import Policy

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
    cluster: ClusterLayout | None = None  # many replicas behind a router; None: one engine
    # on `hardware` (with a cluster, `hardware` is its first replica's, `calibration` its)
    replica_calibrations: Mapping[HardwareConfig, Calibration] = field(default_factory=dict)
    # a cluster's other GPUs, calibrated once for every run; one missing is calibrated per run

    def __post_init__(self) -> None:
        get_policy_class(self.policy)  # unknown names fail here, before any run
        if self.cluster is not None and self.cluster.replicas[0] != self.hardware:
            raise ValueError("a cluster's first replica must be the spec's hardware")

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
    metrics: RunMetrics  # from the first arrival to the last token
    tiers: dict[str, RunMetrics]  # per SLO tier, when the workload has tiers
    tbt_reading: TbtReading  # the reading `violations` reports
    num_iterations: int
    num_preemptions: int
    wall_seconds: float  # host time the simulation took
    prefix_hit_rate: float | None = None  # share of queried prompt tokens the prefix cache
    # held (vLLM's reading); None when the run had no prefix cache
    cluster: ClusterFigures | None = None  # a cluster's placements; None: one engine

    @property
    def violations(self) -> ViolationRates:
        """The violations of every request under the run's TBT reading."""
        return self.metrics.violations(self.tbt_reading)

    def tier_violations(self, tier: str) -> ViolationRates:
        """The violations of `tier` under the run's TBT reading."""
        return self.tiers[tier].violations(self.tbt_reading)

    def to_row(self) -> dict[str, Any]:
        """A flat dict, milliseconds for latencies, for tables and CSV files."""
        m, violations = self.metrics, self.violations
        row: dict[str, Any] = {
            "policy": self.policy,
            "workload": self.workload,
            "rate": self.rate,
            "seed": self.seed,
            "requests": m.requests,
            "violation_rate": violations.overall,
            "ttft_violation_rate": violations.ttft,
            "tbt_violation_rate": violations.tbt,
            "tbt_reading": self.tbt_reading.value,
            "cumulative_violation_rate": m.cumulative.overall,
            "per_gap_violation_rate": m.per_gap.overall,
            "throughput_rps": m.request_throughput,
            "output_tps": m.output_throughput,
        }
        for name, stats in (("ttft", m.ttft), ("tbt", m.itl), ("tpot", m.tpot), ("e2e", m.e2e)):
            for quantile in ("p50", "p90", "p99"):
                row[f"{name}_{quantile}_ms"] = getattr(stats, quantile) * 1000
        for tier in self.tiers:
            row[f"violation_rate[{tier}]"] = self.tier_violations(tier).overall
        row.update(iterations=self.num_iterations, preemptions=self.num_preemptions)
        row["prefix_hit_rate"] = self.prefix_hit_rate
        if self.cluster is not None:
            row.update(self.cluster.row())
        row["wall_s"] = self.wall_seconds
        return row


class SimulatedGpu(IterationTimer, Protocol):
    """What the simulator runs on: it times batches and holds the KV cache."""

    def kv_capacity_blocks(self, block_size: int) -> int:
        """KV blocks of `block_size` tokens that fit beside the model."""
        ...


def needs_calibration(policy: str) -> bool:
    policy_class = get_policy_class(policy)
    return policy_class.needs_predictor or policy_class.needs_profile


def context_for(
    policy: str, limits: EngineLimits, calibration: Callable[[], Calibration]
) -> PolicyContext:
    """What `policy` is built with: `limits`, and the predictor and timed batches of
    `calibration()` if it plans with a predictor or fits its own (else it is not called)."""
    if not needs_calibration(policy):
        return PolicyContext(limits)
    calibrated = calibration()
    return PolicyContext(
        limits, calibrated.predictor, calibrated.batches, dict(calibrated.predictors)
    )


def policy_context(spec: SimulationSpec) -> PolicyContext:
    """What the policy of `spec` is built with (calibrating first if it needs it and `spec`
    carries no calibration)."""

    def calibration() -> Calibration:
        if spec.calibration is not None:
            return spec.calibration
        return calibrate(spec.hardware, spec.limits)

    return context_for(spec.policy, spec.limits, calibration)


def unrecorded_options(spec: SimulationSpec) -> dict[str, Any]:
    """The options `spec`'s policy runs with: no decision records unless it asks for them
    (`policies.unrecorded`: nothing in a simulation reads them)."""
    return unrecorded(get_policy_class(spec.policy), spec.policy_options)


def run_policy(
    policy: Policy,
    gpu: SimulatedGpu,
    limits: EngineLimits,
    requests: Sequence[Request],
    record: bool = False,
) -> SimulationRun:
    """Run `requests` (mutated in place) through `policy` on `gpu` within `limits`; `record`:
    keep every iteration and each request's trace (the same token times, slower)."""
    blocks = gpu.kv_capacity_blocks(limits.block_size)
    options = SimulatorOptions(limits=limits, record_iterations=record, trace_requests=record)
    return Simulator(policy, gpu, blocks, options).run(requests)


def simulate_cluster(
    spec: SimulationSpec,
    cluster: ClusterLayout,
    requests: Sequence[Request],
    seed: int,
    record: bool = False,
) -> ClusterRun:
    """Run `requests` (mutated in place) on `cluster`: on each replica its own `spec.policy`
    (with the calibration of its own GPU), its GPU's noise from `replica_seed`, its KV
    cache; `cluster.router` in front, told each replica's GPU through the same
    calibration the policies get (those that predict)."""
    calibrations = _Calibrations(spec)
    options = SimulatorOptions(limits=spec.limits, record_iterations=record, trace_requests=record)
    predicts = router_class(cluster.router).needs_models
    engines = []
    for index, hardware in enumerate(cluster.replicas):
        context = context_for(spec.policy, spec.limits, calibrations.for_hardware(hardware))
        policy = make_policy(spec.policy, context, unrecorded_options(spec))
        gpu = GroundTruthLatency(hardware, replica_seed(seed, index))
        blocks = gpu.kv_capacity_blocks(spec.limits.block_size)
        engines.append(Simulator(policy, gpu, blocks, options))
    models = tuple(
        ReplicaModel(
            calibrations.of(h).predictor if predicts else None,
            spec.limits.max_num_batched_tokens,
        )
        for h in cluster.replicas
    )
    return run_cluster(engines, make_router(cluster.router, models), requests)


class _Calibrations:
    """Each GPU of a cluster calibrated once per run; the spec's own from the spec."""

    def __init__(self, spec: SimulationSpec) -> None:
        self.spec = spec
        self._done: dict[HardwareConfig, Calibration] = dict(spec.replica_calibrations)
        if spec.calibration is not None:
            self._done[spec.hardware] = spec.calibration

    def for_hardware(self, hardware: HardwareConfig) -> Callable[[], Calibration]:
        """`of(hardware)`, called only when asked for (a policy without a predictor never
        asks)."""
        return lambda: self.of(hardware)

    def of(self, hardware: HardwareConfig) -> Calibration:
        calibration = self._done.get(hardware)
        if calibration is None:
            calibration = calibrate(hardware, self.spec.limits)
            self._done[hardware] = calibration
        return calibration


class RunFigures(NamedTuple):
    """The metrics of a simulated run, from its first arrival to its last token."""

    metrics: RunMetrics  # of every request
    tiers: dict[str, RunMetrics]  # of each SLO tier, by name ({} without tiers)


def run_figures(requests: Sequence[Request]) -> RunFigures:
    """The metrics of finished simulated requests (ValueError if one emitted no token and
    was not refused)."""
    finished = [Timeline.of_request(request) for request in requests]
    duration = span(finished)
    return RunFigures(measure(finished, duration), measure_tiers(finished, duration))


class RecordedRun(NamedTuple):
    """A simulation with its record (`simulate_recorded`)."""

    result: SimulationResult
    run: SimulationRun  # the requests with their token times, every iteration, each
    # request's trace


def simulate(spec: SimulationSpec, rate: float, seed: int) -> SimulationResult:
    """Run `spec` at `rate` req/s with `seed` (which fixes requests, arrivals and noise)."""
    return _simulate(spec, rate, seed, record=False).result


def simulate_recorded(spec: SimulationSpec, rate: float, seed: int) -> RecordedRun:
    """`simulate`, keeping every iteration (`IterationLog`) and each request's events
    (`RequestTrace`) for a diagnosis: the same token times, more memory and time."""
    return _simulate(spec, rate, seed, record=True)


def _simulate(spec: SimulationSpec, rate: float, seed: int, record: bool) -> RecordedRun:
    if not MIN_RATE <= rate < math.inf:
        raise ValueError(f"rate must be at least {MIN_RATE} req/s and finite, got {rate}")
    started = time.perf_counter()
    requests = generate_requests(spec.workload, rate, seed, spec.max_model_len)
    cluster = None
    if spec.cluster is not None:
        cluster_run = simulate_cluster(spec, spec.cluster, requests, seed, record)
        run, cluster = cluster_run.merged, ClusterFigures.of(spec.cluster, cluster_run)
    else:
        policy = make_policy(spec.policy, policy_context(spec), unrecorded_options(spec))
        gpu = GroundTruthLatency(spec.hardware, seed)
        run = run_policy(policy, gpu, spec.limits, requests, record)
    figures = run_figures(run.requests)
    result = SimulationResult(
        policy=spec.policy,
        workload=spec.workload.name,
        rate=rate,
        seed=seed,
        metrics=figures.metrics,
        tiers=figures.tiers,
        tbt_reading=spec.tbt_reading,
        num_iterations=run.num_iterations + run.num_fast_forwarded,
        num_preemptions=run.num_preemptions,
        wall_seconds=time.perf_counter() - started,
        prefix_hit_rate=run.prefix_cache.hit_rate if run.prefix_cache is not None else None,
        cluster=cluster,
    )
    return RecordedRun(result, run)
