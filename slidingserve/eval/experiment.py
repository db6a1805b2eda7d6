"""The goodput experiment: policies × workloads × seeds, searched in parallel.

For each workload the capacity bound gives the first rate to try (half of it). Each
(policy, workload, seed) search is one task; tasks run in a process pool over the
machine's cores. The same seeds serve every policy (common random numbers), and a
violation-rate curve over a common grid of rates is measured for every seed.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from slidingserve.core.view import EngineLimits
from slidingserve.eval.capacity import CapacityBound, capacity_bound
from slidingserve.eval.criteria import OVERALL, known_criteria, violation_for
from slidingserve.eval.goodput import GoodputEstimate, SearchSettings, search_goodput
from slidingserve.eval.memory_bound import MemoryBound, memory_bound
from slidingserve.eval.pool import Progress, map_tasks, task_pool
from slidingserve.eval.slo_bound import SloAwareBound, slo_aware_bound
from slidingserve.metrics import TbtReading
from slidingserve.policies import get_policy_class
from slidingserve.predictor.calibration import Calibration
from slidingserve.routing import router_class
from slidingserve.sim.calibration import calibrate
from slidingserve.sim.cluster import ClusterLayout
from slidingserve.sim.hardware import HardwareConfig
from slidingserve.sim.runner import (
    SimulationResult,
    SimulationSpec,
    needs_calibration,
    simulate,
)
from slidingserve.workloads import ArrivalConfig, TierMix, TraceSource, WorkloadConfig
from slidingserve.workloads.prefixes import Conversations, SystemPrompt

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class GoodputExperiment:
    """What to compare and how."""

    policies: tuple[str, ...] = (
        "vllm",
        "sarathi",
        "sarathi-edf",
        "qoserve",
        "slidingserve-paper",
        "slidingserve",
    )
    workloads: tuple[str, ...] = ("sharegpt", "arxiv", "mixed-v1", "mixed-v2")
    seeds: tuple[int, ...] = (0, 1, 2)
    reference: str = "sarathi-edf"  # goodput ratios are to this policy (the first if absent)
    num_requests: int = 600  # requests per simulated trial
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)
    # The workload's settings default to those of `WorkloadConfig` (defined there only).
    slo_preset: str = WorkloadConfig.slo_preset
    slo_scale: float = WorkloadConfig.slo_scale
    trace_dir: str | None = None  # None: embedded length tables
    traces: tuple[TraceSource, ...] = ()  # --trace files: the workload "trace"
    trace_start: int = WorkloadConfig.trace_start  # replays: seed 0's window starts here
    trace_spread: bool = WorkloadConfig.trace_spread  # replays: space shared timestamps
    trace_block_size: int = WorkloadConfig.trace_block_size  # tokens of a trace's hash id
    system_prompt: SystemPrompt | None = None  # a shared system prompt (workloads/prefixes.py)
    conversations: Conversations | None = None  # multi-turn conversations
    tbt_reading: TbtReading = SimulationSpec.tbt_reading  # how TBT violations are counted
    tiers: TierMix | None = None  # SLO tiers of every workload
    criteria: tuple[str, ...] = (OVERALL,)  # what must stay ≤ threshold: see criteria.py
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    limits: EngineLimits = field(default_factory=EngineLimits)
    policy_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    search: SearchSettings = field(default_factory=SearchSettings)
    curve_points: int = 8  # rates on the violation curve per workload (0: no curve)
    jobs: int = 0  # worker processes; 0: one per core
    cluster: ClusterLayout | None = None  # replicas behind a router (its first replica's
    # hardware is `hardware`); rates, goodputs and bounds are then the cluster's

    def __post_init__(self) -> None:
        if not self.policies or not self.workloads or not self.seeds:
            raise ValueError("need at least one policy, one workload and one seed")
        for name in self.policies:
            get_policy_class(name)
        for name in self.workloads:
            self.workload_config(name)  # a known name, or "trace" with trace files
        unknown = sorted(set(self.policy_options) - set(self.policies))
        if unknown:
            raise ValueError(f"options given for policies not in the run: {', '.join(unknown)}")
        self.workload_config(self.workloads[0])  # validates SLO preset, counts, trace dir
        if not self.criteria:
            raise ValueError("need at least one goodput criterion")
        known = known_criteria(self.tiers.names if self.tiers else ())
        for criterion in self.criteria:
            if criterion not in known:
                raise ValueError(
                    f"unknown goodput criterion {criterion!r}; known here: {', '.join(known)}"
                )
        if self.curve_points < 0 or self.jobs < 0:
            raise ValueError("curve_points and jobs must be non-negative")
        if self.cluster is not None and self.cluster.replicas[0] != self.hardware:
            raise ValueError("a cluster's first replica must be the experiment's hardware")

    @property
    def replica_hardware(self) -> tuple[HardwareConfig, ...]:
        """The hardware of each replica: `hardware` alone without a cluster."""
        return self.cluster.replicas if self.cluster else (self.hardware,)

    @property
    def reference_policy(self) -> str:
        """The policy the ratio table divides by: `reference` if it runs, else the first."""
        return self.reference if self.reference in self.policies else self.policies[0]

    def workload_config(self, name: str) -> WorkloadConfig:
        return WorkloadConfig(
            name,
            self.num_requests,
            self.arrival,
            self.slo_preset,
            self.slo_scale,
            Path(self.trace_dir) if self.trace_dir else None,
            tiers=self.tiers,
            traces=self.traces,
            trace_start=self.trace_start,
            trace_spread=self.trace_spread,
            trace_block_size=self.trace_block_size,
            system_prompt=self.system_prompt,
            conversations=self.conversations,
        )

    def spec(
        self,
        policy: str,
        workload: str,
        calibration: Calibration | None = None,
        replica_calibrations: Mapping[HardwareConfig, Calibration] | None = None,
    ) -> SimulationSpec:
        return SimulationSpec(
            policy,
            self.workload_config(workload),
            self.hardware,
            self.limits,
            dict(self.policy_options.get(policy, {})),
            self.tbt_reading,
            calibration,
            self.cluster,
            dict(replica_calibrations or {}),
        )

    @property
    def worker_count(self) -> int:
        return self.jobs or os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class GoodputRow:
    """Goodput of one policy on one workload under one criterion, over the seeds."""

    policy: str
    workload: str
    criterion: str  # which requests must meet their SLO: see criteria.py
    goodput_mean: float  # req/s
    goodput_std: float  # req/s, sample standard deviation over seeds (0 for one seed)
    interpolated_mean: float  # req/s, QoServe-style interpolation
    per_seed: tuple[float, ...]  # req/s, in seed order
    capacity_bound: float  # req/s
    trials: int  # simulations the searches ran
    at_goodput: AtGoodput  # the runs at each seed's goodput, averaged over the seeds

    @property
    def fraction_of_bound(self) -> float:
        return self.goodput_mean / self.capacity_bound


class AtGoodput(NamedTuple):
    """A run at a policy's goodput rate as a user sees it, whatever the TBT reading of the
    search (NaN when no rate passed)."""

    tbt_p99: float  # seconds, p99 of every gap between tokens
    cumulative_violation: float  # fraction late under the cumulative deadlines
    per_gap_violation: float  # fraction late when every gap is held to L_tbt
    prefix_hit_rate: float = math.nan  # the prefix cache's hit rate; NaN without one
    preemptions: float = math.nan  # preemptions in the run (a mean over seeds: a float)

    @classmethod
    def of(cls, result: SimulationResult | None) -> AtGoodput:
        if result is None:
            return cls(math.nan, math.nan, math.nan)
        m, hits = result.metrics, result.prefix_hit_rate
        return cls(
            m.itl.p99,
            m.cumulative.overall,
            m.per_gap.overall,
            math.nan if hits is None else hits,
            float(result.num_preemptions),
        )

    @classmethod
    def mean(cls, runs: Sequence[AtGoodput]) -> AtGoodput:
        """Field by field, over the runs where a rate passed."""
        passed = [run for run in runs if not math.isnan(run.tbt_p99)]
        if not passed:
            return cls(*[math.nan] * len(cls._fields))
        return cls(*(statistics.fmean(values) for values in zip(*passed, strict=True)))


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One point of a violation-rate curve, for one seed."""

    policy: str
    workload: str
    seed: int
    rate: float  # req/s
    violation_rate: float  # fraction of requests with any late token
    ttft_violation_rate: float  # fraction with a late first token
    tbt_violation_rate: float  # fraction with a late later token


@dataclass(frozen=True)
class ExperimentResult:
    experiment: GoodputExperiment
    bounds: dict[str, CapacityBound]  # by workload
    rows: list[GoodputRow]
    curve: list[CurvePoint]
    slo_bounds: dict[str, SloAwareBound] = field(default_factory=dict)  # by workload, if run
    memory_bounds: dict[str, MemoryBound] = field(default_factory=dict)  # by workload

    def bound_rates(self, workload: str) -> list[float]:
        """req/s: the capacity bound of `workload`, then its SLO-aware and memory-aware
        bounds where they were computed. Each is an upper bound, so their minimum is one."""
        rates = [self.bounds[workload].rate]
        for bound in (self.slo_bounds.get(workload), self.memory_bounds.get(workload)):
            if bound is not None:
                rates.append(bound.rate)
        return rates


@dataclass(frozen=True, slots=True)
class _SearchTask:
    spec: SimulationSpec
    seed: int
    initial_rate: float
    settings: SearchSettings
    criteria: tuple[str, ...]


SearchOutcome = tuple[GoodputEstimate, AtGoodput]


def _run_search(task: _SearchTask) -> dict[str, SearchOutcome]:
    """One search per criterion; they share the simulations of the rates they both try."""
    runs: dict[float, SimulationResult] = {}

    def result_at(rate: float) -> SimulationResult:
        if rate not in runs:
            runs[rate] = simulate(task.spec, rate, task.seed)
        return runs[rate]

    outcomes = {}
    for criterion in task.criteria:
        estimate = search_goodput(
            lambda rate, c=criterion: violation_for(result_at(rate), c),  # type: ignore[misc]
            task.initial_rate,
            task.settings,
        )
        outcomes[criterion] = (estimate, AtGoodput.of(runs.get(estimate.goodput)))
    return outcomes


@dataclass(frozen=True, slots=True)
class _CurveTask:
    spec: SimulationSpec
    seed: int
    rate: float


def _run_curve_point(task: _CurveTask) -> CurvePoint:
    violations = simulate(task.spec, task.rate, task.seed).violations
    return CurvePoint(
        task.spec.policy,
        task.spec.workload.name,
        task.seed,
        task.rate,
        violations.overall,
        violations.ttft,
        violations.tbt,
    )


@dataclass(frozen=True)
class _Searches:
    """An experiment's goodput searches: one task per (policy, workload, seed)."""

    experiment: GoodputExperiment
    bounds: dict[str, CapacityBound]
    keys: list[tuple[str, str, int]]  # (policy, workload, seed) of each task
    tasks: list[_SearchTask]

    def rows(self, outcomes: Sequence[dict[str, SearchOutcome]]) -> list[GoodputRow]:
        """The goodput rows, given the outcomes of `tasks` in their order."""
        estimates = dict(zip(self.keys, outcomes, strict=True))
        return _rows(self.experiment, self.bounds, estimates)


def _plan_searches(experiment: GoodputExperiment, calibration: SharedCalibration) -> _Searches:
    """Each search starts at half the capacity bound of its workload."""
    bounds = {
        name: _cluster_bound(experiment, name, capacity_bound, ("rate",))
        for name in experiment.workloads
    }
    keys = [
        (policy, workload, seed)
        for workload in experiment.workloads
        for policy in experiment.policies
        for seed in experiment.seeds
    ]
    tasks = [
        _SearchTask(
            experiment.spec(p, w, *calibration),
            s,
            0.5 * bounds[w].rate,
            experiment.search,
            experiment.criteria,
        )
        for p, w, s in keys
    ]
    return _Searches(experiment, bounds, keys, tasks)


def run_experiment(
    experiment: GoodputExperiment, progress: Progress | None = None, ray: str | None = None
) -> ExperimentResult:
    """Run every search, then the curves, in the experiment's worker processes or as tasks
    on the Ray cluster at `ray` (`eval/pool.py`); `progress` hears of each finished task.
    The result carries the bounds of every workload: capacity, SLO-aware and memory-aware."""
    calibration = _shared_calibration(experiment)
    searches = _plan_searches(experiment, calibration)
    with task_pool(experiment.worker_count, ray) as pool:
        rows = searches.rows(map_tasks(pool, _run_search, searches.tasks, progress))
        curve_tasks = _curve_tasks(experiment, rows, calibration)
        curve = map_tasks(pool, _run_curve_point, curve_tasks, progress)
    slo_bounds = {
        name: _cluster_bound(experiment, name, slo_aware_bound, ("rate", "capacity"))
        for name in experiment.workloads
    }
    return ExperimentResult(
        experiment, searches.bounds, rows, curve, slo_bounds, _memory_bounds(experiment)
    )


def run_searches(
    experiments: Sequence[GoodputExperiment],
    workers: int,
    progress: Progress | None = None,
    ray: str | None = None,
) -> list[ExperimentResult]:
    """The goodput searches of several experiments in one pool of `workers` processes (or on
    the Ray cluster at `ray`), so that no experiment waits for another's slowest search; no
    violation curves (their `curve_points` are ignored). Results in the order of
    `experiments`; `progress` hears of each finished search."""
    plans = [_plan_searches(e, _shared_calibration(e)) for e in experiments]
    with task_pool(workers, ray) as pool:
        tasks = [task for plan in plans for task in plan.tasks]
        outcomes = iter(map_tasks(pool, _run_search, tasks, progress))
    return [
        ExperimentResult(
            plan.experiment,
            plan.bounds,
            plan.rows(list(itertools.islice(outcomes, len(plan.tasks)))),
            [],
            memory_bounds=_memory_bounds(plan.experiment),
        )
        for plan in plans
    ]


def _memory_bounds(experiment: GoodputExperiment) -> dict[str, MemoryBound]:
    """The memory-aware bound of every workload (a fraction of a second each)."""
    return {
        name: _cluster_bound(experiment, name, memory_bound, ("rate", "compute", "kv"))
        for name in experiment.workloads
    }


B = TypeVar("B", CapacityBound, SloAwareBound, MemoryBound)


def _cluster_bound(
    experiment: GoodputExperiment,
    workload: str,
    bound: Callable[[WorkloadConfig, HardwareConfig, EngineLimits], B],
    rates: tuple[str, ...],
) -> B:
    """`bound` of `workload` on the experiment's hardware; on a cluster, the sum over its
    replicas of each field in `rates` (req/s: a router that never misplaces a request),
    the rest from the first replica's (each distinct replica computed once). On a mixed
    cluster each replica's bound is for the whole workload on its GPU: a router that sent
    each GPU the requests it serves best could pass the sum, so it is a guide there, not a
    bound."""
    config = experiment.workload_config(workload)
    hardware = experiment.replica_hardware
    each = {h: bound(config, h, experiment.limits) for h in dict.fromkeys(hardware)}
    first = each[hardware[0]]
    if len(hardware) == 1:
        return first
    summed = {name: sum(getattr(each[h], name) for h in hardware) for name in rates}
    return dataclasses.replace(first, **summed)


def task_count(experiment: GoodputExperiment) -> int:
    """How many tasks `run_experiment` reports through `progress`."""
    searches = len(experiment.policies) * len(experiment.workloads) * len(experiment.seeds)
    return searches * (1 + experiment.curve_points)


def _rows(
    experiment: GoodputExperiment,
    bounds: Mapping[str, CapacityBound],
    estimates: Mapping[tuple[str, str, int], dict[str, SearchOutcome]],
) -> list[GoodputRow]:
    rows = []
    for criterion, workload, policy in itertools.product(
        experiment.criteria, experiment.workloads, experiment.policies
    ):
        outcomes = [estimates[policy, workload, seed][criterion] for seed in experiment.seeds]
        rows.append(_row(policy, workload, criterion, outcomes, bounds[workload]))
    return rows


def _row(
    policy: str,
    workload: str,
    criterion: str,
    outcomes: list[SearchOutcome],
    bound: CapacityBound,
) -> GoodputRow:
    found = [estimate for estimate, _ in outcomes]
    values = tuple(e.goodput for e in found)
    return GoodputRow(
        policy=policy,
        workload=workload,
        criterion=criterion,
        goodput_mean=statistics.fmean(values),
        goodput_std=statistics.stdev(values) if len(values) > 1 else 0.0,
        interpolated_mean=statistics.fmean(e.interpolated for e in found),
        per_seed=values,
        capacity_bound=bound.rate,
        trials=sum(len(e.probes) for e in found),
        at_goodput=AtGoodput.mean([at for _, at in outcomes]),
    )


class SharedCalibration(NamedTuple):
    """The calibrations every run of an experiment shares."""

    first: Calibration | None  # of `hardware` (a cluster's first replica); None: none needs it
    others: dict[HardwareConfig, Calibration]  # a cluster's other GPUs


def _shared_calibration(experiment: GoodputExperiment) -> SharedCalibration:
    """One calibration of each simulated GPU, for every policy and router that needs one."""
    cluster = experiment.cluster
    routed = cluster is not None and router_class(cluster.router).needs_models
    if not routed and not any(needs_calibration(p) for p in experiment.policies):
        return SharedCalibration(None, {})
    others = {
        hardware: calibrate(hardware, experiment.limits)
        for hardware in dict.fromkeys(experiment.replica_hardware)
        if hardware != experiment.hardware
    }
    return SharedCalibration(calibrate(experiment.hardware, experiment.limits), others)


def _curve_tasks(
    experiment: GoodputExperiment, rows: list[GoodputRow], calibration: SharedCalibration
) -> list[_CurveTask]:
    """A common grid per workload, from 0.225× to 1.5× the best goodput found (or up to half
    the capacity bound when no policy met the SLOs at any rate)."""
    tasks = []
    points = experiment.curve_points
    for workload in experiment.workloads:
        mine = [r for r in rows if r.workload == workload and r.criterion == experiment.criteria[0]]
        best = max(r.goodput_mean for r in mine)
        top = 1.5 * best if best > 0 else 0.5 * mine[0].capacity_bound
        rates = [top * (0.15 + 0.85 * i / max(1, points - 1)) for i in range(points)]
        for policy in experiment.policies:
            spec = experiment.spec(policy, workload, *calibration)
            tasks += [_CurveTask(spec, seed, rate) for seed in experiment.seeds for rate in rates]
    return tasks
