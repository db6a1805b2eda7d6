"""The regime map: where a policy's goodput stands against the best baseline.

A cell is one hardware × workload × arrival process × SLO scale. In every cell each policy's
goodput is searched on the same seeds (common random numbers), and the candidate's goodput
is divided, seed by seed, by the best baseline's goodput on that seed: the highest among the
baselines on that seed. That is the strictest bar, so the fair one to the baselines: the
candidate must beat, on each seed, whichever baseline did best there (and the maximum of
noisy goodputs even leans towards the baselines). The per-seed ratios give a mean and a 95%
Student-t interval (`ratios.py`); a cell is significant when the interval excludes 1.

Every search of the map runs in one process pool (`run_searches`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from slidingserve.eval.experiment import ExperimentResult, GoodputExperiment, run_searches
from slidingserve.eval.pool import Progress
from slidingserve.eval.ratios import RatioInterval, per_seed_ratios, ratio_interval
from slidingserve.sim.hardware import HardwareConfig, hardware_label
from slidingserve.workloads import ArrivalConfig, OverloadWindow
from slidingserve.workloads.arrivals import ArrivalProcess

BEST_BASELINE = (
    "best baseline: on each seed, the baseline with the highest goodput on that seed "
    "(the strictest bar for the candidate, so the fair one to the baselines)"
)
DEFAULT_SLO_SCALES = (0.5, 0.75, 1.0, 1.5, 2.0)
DEFAULT_ARRIVALS = (ArrivalConfig(), ArrivalConfig("gamma", 2.0))


@dataclass(frozen=True)
class RegimeMap:
    """What the map compares, and over which settings."""

    candidate: str = "slidingserve"  # the policy whose goodput is divided
    baselines: tuple[str, ...] = ("sarathi-edf", "qoserve")
    slo_scales: tuple[float, ...] = DEFAULT_SLO_SCALES  # columns of the map
    arrivals: tuple[ArrivalConfig, ...] = DEFAULT_ARRIVALS
    hardware: tuple[HardwareConfig, ...] = (HardwareConfig(),)  # one map per point
    setup: GoodputExperiment = field(default_factory=lambda: GoodputExperiment(curve_points=0))
    """What every cell shares: workloads, seeds, requests, SLO preset, engine limits, search,
    criteria (the first is mapped), policy options, jobs. Its policies, SLO scale, arrival
    and hardware are replaced by the map's; it never measures violation curves."""

    def __post_init__(self) -> None:
        if self.candidate in self.baselines:
            raise ValueError(
                f"the baselines include the candidate {self.candidate!r}: "
                "it would be measured against itself"
            )
        for axis, labels in (
            ("baselines", self.baselines),
            ("SLO scales", [f"{scale:g}" for scale in self.slo_scales]),
            ("arrivals", self.arrival_labels),
            ("hardware points", self.hardware_labels),
        ):
            if not labels:
                raise ValueError(f"the regime map needs at least one of its {axis}")
            if len(set(labels)) < len(labels):
                raise ValueError(f"repeated {axis}: {', '.join(labels)}")
        for scale in self.slo_scales:
            if not (math.isfinite(scale) and scale > 0):
                raise ValueError(f"SLO scales must be positive, got {scale:g}")
        self.experiments()  # checks the names, options and setup of every cell

    @property
    def policies(self) -> tuple[str, ...]:
        """The candidate first, then the baselines."""
        return (self.candidate, *self.baselines)

    @property
    def arrival_labels(self) -> list[str]:
        return [arrival_label(arrival) for arrival in self.arrivals]

    @property
    def hardware_labels(self) -> list[str]:
        return [hardware_label(point) for point in self.hardware]

    @property
    def criterion(self) -> str:
        """Which requests must meet their SLO: the setup's first criterion."""
        return self.setup.criteria[0]

    def experiments(self) -> dict[tuple[str, str, float], GoodputExperiment]:
        """One experiment over every workload per (hardware, arrival, SLO scale)."""
        return {
            (hardware_label(point), arrival_label(arrival), scale): dataclasses.replace(
                self.setup,
                policies=self.policies,
                hardware=point,
                arrival=arrival,
                slo_scale=scale,
                curve_points=0,
            )
            for point in self.hardware
            for arrival in self.arrivals
            for scale in self.slo_scales
        }

    @property
    def search_count(self) -> int:
        """Goodput searches in the map: what `run_regimes` reports through `progress`."""
        settings = len(self.hardware) * len(self.arrivals) * len(self.slo_scales)
        return settings * len(self.policies) * len(self.setup.workloads) * len(self.setup.seeds)


@dataclass(frozen=True, slots=True)
class RegimeCell:
    """The candidate against the best baseline in one setting of the map."""

    hardware: str  # GPU:MODEL:TP
    workload: str
    arrival: str  # poisson, or gamma:CV
    slo_scale: float  # every SLO target times this
    seeds: tuple[int, ...]
    candidate: str
    goodput: Mapping[str, tuple[float, ...]]  # req/s by policy (candidate first), seed order
    best_baseline: tuple[str, ...]  # per seed, the baseline with the highest goodput
    ratio: RatioInterval  # candidate ÷ best baseline per seed (seeds where that is 0 left out)
    capacity_bound: float = math.nan  # req/s, the capacity bound (NaN: not computed)
    memory_bound: float = math.nan  # req/s, the memory-aware bound (NaN: not computed)
    memory_binding: str = ""  # what binds the memory-aware bound: kv or compute

    @property
    def best_baseline_goodput(self) -> tuple[float, ...]:
        """req/s per seed: the goodput the candidate is divided by."""
        return tuple(self.goodput[name][i] for i, name in enumerate(self.best_baseline))


def regime_cell(
    candidate: str,
    baselines: Sequence[str],
    goodput: Mapping[str, Sequence[float]],
    *,
    hardware: str,
    workload: str,
    arrival: str,
    slo_scale: float,
    seeds: Sequence[int],
    resolution: float = 0.0,
    bounds: tuple[float, float, str] = (math.nan, math.nan, ""),
) -> RegimeCell:
    """The cell of per-seed goodputs (req/s, seed order) of the candidate and the baselines;
    on a tie the baseline listed first is the best. `resolution`: the searches' relative
    precision, the least uncertainty of a ratio (see `ratio_interval`); `bounds`: the
    capacity and memory-aware bounds (req/s) and what binds the latter."""
    if not baselines:
        raise ValueError("need at least one baseline")
    values = {name: tuple(goodput[name]) for name in (candidate, *baselines)}
    if any(len(v) != len(seeds) for v in values.values()):
        raise ValueError(f"every policy needs one goodput per seed ({len(seeds)})")
    best = tuple(max(baselines, key=lambda b: values[b][i]) for i in range(len(seeds)))
    bar = [values[name][i] for i, name in enumerate(best)]
    return RegimeCell(
        hardware,
        workload,
        arrival,
        slo_scale,
        tuple(seeds),
        candidate,
        values,
        best,
        ratio_interval(per_seed_ratios(values[candidate], bar), resolution=resolution),
        *bounds,
    )


@dataclass(frozen=True)
class RegimeResult:
    regimes: RegimeMap
    cells: list[RegimeCell]  # by hardware, workload, arrival, then SLO scale (fastest)

    def cell(self, hardware: str, workload: str, arrival: str, slo_scale: float) -> RegimeCell:
        return next(
            c
            for c in self.cells
            if (c.hardware, c.workload, c.arrival, c.slo_scale)
            == (hardware, workload, arrival, slo_scale)
        )


def run_regimes(
    regimes: RegimeMap, progress: Progress | None = None, ray: str | None = None
) -> RegimeResult:
    """Search every policy's goodput in every cell, all in one process pool (or as tasks on
    the Ray cluster at `ray`); `progress` hears of each finished search
    (`regimes.search_count` in all)."""
    experiments = regimes.experiments()
    results = run_searches(list(experiments.values()), regimes.setup.worker_count, progress, ray)
    by_setting = dict(zip(experiments, results, strict=True))
    cells = [
        _cell(regimes, by_setting[point, arrival, scale], workload)
        for point in regimes.hardware_labels
        for workload in regimes.setup.workloads
        for arrival in regimes.arrival_labels
        for scale in regimes.slo_scales
    ]
    return RegimeResult(regimes, cells)


def _cell(regimes: RegimeMap, result: ExperimentResult, workload: str) -> RegimeCell:
    experiment = result.experiment
    goodput = {
        row.policy: row.per_seed
        for row in result.rows
        if row.workload == workload and row.criterion == regimes.criterion
    }
    return regime_cell(
        regimes.candidate,
        regimes.baselines,
        goodput,
        hardware=hardware_label(experiment.hardware),
        workload=workload,
        arrival=arrival_label(experiment.arrival),
        slo_scale=experiment.slo_scale,
        seeds=experiment.seeds,
        resolution=experiment.search.precision,
        bounds=_bounds(result, workload),
    )


def _bounds(result: ExperimentResult, workload: str) -> tuple[float, float, str]:
    """The capacity and memory-aware bounds of `workload` (req/s) and what binds the latter."""
    memory = result.memory_bounds.get(workload)
    if memory is None:
        return result.bounds[workload].rate, math.nan, ""
    return result.bounds[workload].rate, memory.rate, memory.binding


def arrival_label(arrival: ArrivalConfig) -> str:
    """`poisson`, `trace` (replayed), or `gamma:CV`: what `parse_arrival` reads."""
    if arrival.process in ("poisson", "trace"):
        return arrival.process
    return f"{arrival.process}:{arrival.burstiness:g}"


def parse_arrival(text: str, overload: OverloadWindow | None = None) -> ArrivalConfig:
    """`poisson` or `gamma:CV` (CV: the coefficient of variation of the gaps)."""
    process, colon, cv = text.strip().partition(":")
    try:
        burstiness = float(cv) if colon else 1.0
    except ValueError:
        raise ValueError(f"an arrival is poisson or gamma:CV, got {text!r}") from None
    return ArrivalConfig(cast(ArrivalProcess, process), burstiness, overload)
