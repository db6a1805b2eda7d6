"""Is the simulator right about a real engine? The procedure of `slidingserve validate`.

The same comparison runs twice: on live servers and on the simulated copy of the profiled
engine (`simulated.SimulatedTrials`), through the same `Trials` interface, so every figure
has a measured and a predicted value.

- **The rates come from the engine, not from a guess.** A reference server (vLLM's own
  `fcfs`) serves the workload with every request arriving at once; the requests it completes
  per second are the engine's capacity, and each policy runs at fixed fractions of it
  (`ValidationSettings.loads`). The simulated twin measures its own capacity the same way.
- **A rate is judged on enough requests to measure 1%.** Every rate runs once per seed; a
  seed passes a rate when at most `threshold` of its requests are late, and the pooled count
  over the seeds has a Wilson interval. The rates run from the highest down and stop at the
  first rate every seed passes: the violation rate falls with the load, so the rates below
  pass too (the simulator's search makes the same assumption).
- **Goodput per seed**, between the highest rate the seed passes (with every measured rate
  below it) and the next one up, interpolated linearly in the violating fraction; the mean
  over seeds has a Student-t interval, and policies are compared by per-seed ratios.
- **Warm-up excluded.** Each server first serves a short light run that is thrown away (a
  cold engine's first requests pay for compilation and allocation).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slidingserve.eval.ratios import RatioInterval, per_seed_ratios, ratio_interval
from slidingserve.live.compare import (
    UNMISSABLE_SLO_SCALE,
    LiveSettings,
    LiveTrials,
    Trials,
    calibrate,
)
from slidingserve.metrics import RunMetrics
from slidingserve.predictor.steps import EngineSteps

REFERENCE_POLICY = "vllm:fcfs"  # serves the capacity and calibration runs
BURST_RATE = 1000.0  # req/s: the capacity run's requests all arrive within a fraction of a second
WARMUP_RATE_SHARE = 0.3  # of the capacity: the warm-up run is light
DEFAULT_LOADS = (0.45, 0.6, 0.75, 0.9)  # fractions of the measured capacity
PROFILE_RATES = (2.0, 8.0, 16.0, 32.0)  # req/s: the profiling traffic, light load to overload
CONFIDENCE_Z = 1.959963984540054  # two-sided 95%


@dataclass(frozen=True)
class ValidationSettings:
    """What a validation measures, live and simulated alike."""

    live: LiveSettings  # model, workload, requests per trial, first seed; `repeats` = seeds
    loads: tuple[float, ...] = DEFAULT_LOADS  # fractions of the measured capacity
    threshold: float = 0.01  # most violating share at which a seed passes a rate
    warmup_requests: int = 16  # each server's discarded first run
    capacity_requests: int = 0  # requests of the capacity run (0: the trials' count)
    curve_points: int = 12  # simulated rates per policy for the plot's lines
    budget_s: float = 3600.0  # the live trials' most expected wall time

    def __post_init__(self) -> None:
        if not self.loads or any(not 0 < load <= 2 for load in self.loads):
            raise ValueError(f"loads are fractions of the capacity in (0, 2], got {self.loads}")
        if len(set(self.loads)) != len(self.loads):
            raise ValueError(f"loads must differ, got {self.loads}")
        if not 0 <= self.threshold < 1:
            raise ValueError(f"threshold must be in [0, 1), got {self.threshold}")
        for name in ("warmup_requests", "capacity_requests"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        if self.curve_points < 2:
            raise ValueError(f"curve_points must be ≥ 2, got {self.curve_points}")
        if not self.budget_s > 0:
            raise ValueError(f"the budget must be positive, got {self.budget_s} s")

    @property
    def seeds(self) -> list[int]:
        return [self.live.seed + repeat for repeat in range(self.live.repeats)]


@dataclass(frozen=True, slots=True)
class Trial:
    """One policy at one rate with one seed."""

    rate: float  # req/s
    seed: int
    requests: int  # measured (every request sent)
    violating: int  # any deadline missed, or failed
    ttft_p50: float  # seconds, completed requests
    ttft_p99: float
    tpot_p50: float

    @classmethod
    def of(cls, rate: float, seed: int, metrics: RunMetrics) -> Trial:
        measured = metrics.cumulative.judged
        return cls(
            rate,
            seed,
            measured,
            round(metrics.cumulative.overall * measured) if measured else 0,
            metrics.ttft.p50,
            metrics.ttft.p99,
            metrics.tpot.p50,
        )

    @property
    def violation_rate(self) -> float:
        return self.violating / self.requests if self.requests else 1.0


@dataclass(frozen=True)
class PolicyCurve:
    """A policy's trials at the rates it ran, every seed."""

    policy: str
    trials: tuple[Trial, ...]

    @property
    def rates(self) -> list[float]:
        return sorted({trial.rate for trial in self.trials})

    def at(self, rate: float) -> list[Trial]:
        return [trial for trial in self.trials if trial.rate == rate]

    def pooled(self, rate: float) -> tuple[int, int]:
        """(violating, measured) over the seeds at `rate`."""
        trials = self.at(rate)
        return sum(t.violating for t in trials), sum(t.requests for t in trials)

    def pooled_rate(self, rate: float) -> float:
        violating, measured = self.pooled(rate)
        return violating / measured if measured else 1.0

    def interval(self, rate: float) -> tuple[float, float]:
        """The Wilson 95% interval of the pooled violating share at `rate`."""
        return wilson_interval(*self.pooled(rate))

    def seed_goodput(self, seed: int, threshold: float) -> float:
        """The goodput of one seed's trials (`curve_goodput`)."""
        points = [(t.rate, t.violation_rate) for t in self.trials if t.seed == seed]
        return curve_goodput(points, threshold)

    def pooled_goodput(self, threshold: float) -> float:
        """The goodput of the pooled violating shares (`curve_goodput`)."""
        return curve_goodput([(r, self.pooled_rate(r)) for r in self.rates], threshold)


def wilson_interval(successes: int, count: int) -> tuple[float, float]:
    """Wilson's 95% score interval of a binomial share (0, 1 when nothing was counted)."""
    if count <= 0:
        return 0.0, 1.0
    share = successes / count
    z2 = CONFIDENCE_Z**2
    centre = (share + z2 / (2 * count)) / (1 + z2 / count)
    half = CONFIDENCE_Z * math.sqrt(share * (1 - share) / count + z2 / (4 * count**2))
    half /= 1 + z2 / count
    return max(0.0, centre - half), min(1.0, centre + half)


def curve_goodput(points: Sequence[tuple[float, float]], threshold: float) -> float:
    """The goodput of measured (rate, violating share) points.

    The highest rate that passes (share ≤ `threshold`) with every lower measured rate,
    moved towards the next rate up in proportion to how far its share lies below the
    threshold (linear interpolation, as the simulator's search reports it). Every rate
    passing gives the highest rate (a lower bound); the lowest failing gives 0 (below the
    rates measured).
    """
    ordered = sorted(points)
    if not ordered:
        raise ValueError("no trials to read a goodput from")
    last: tuple[float, float] | None = None
    for rate, share in ordered:
        if share > threshold:
            if last is None:
                return 0.0
            last_rate, last_share = last  # last_share ≤ threshold < share
            return last_rate + (threshold - last_share) / (share - last_share) * (rate - last_rate)
        last = (rate, share)
    assert last is not None
    return last[0]


@dataclass(frozen=True)
class VenueResult:
    """Every policy's trials in one venue (live, or simulated)."""

    venue: str
    capacity: float  # req/s completed when every request arrives at once
    slo_scale: float
    rates: tuple[float, ...]  # the grid, req/s (loads × the live capacity)
    curves: dict[str, PolicyCurve]
    lines: dict[str, PolicyCurve] = field(default_factory=dict)  # simulated: dense curves

    def goodputs(self, settings: ValidationSettings) -> dict[str, float]:
        """Each policy's goodput from its pooled trials."""
        return {
            policy: curve.pooled_goodput(settings.threshold)
            for policy, curve in self.curves.items()
        }

    def seed_goodputs(self, settings: ValidationSettings) -> dict[str, list[float]]:
        """Each policy's goodput on each seed, in seed order."""
        return {
            policy: [curve.seed_goodput(seed, settings.threshold) for seed in settings.seeds]
            for policy, curve in self.curves.items()
        }


def goodput_interval(values: Sequence[float]) -> RatioInterval:
    """The mean of per-seed goodputs with its Student-t interval."""
    return ratio_interval(values)


def ratio_to(
    result: VenueResult, settings: ValidationSettings, policy: str, reference: str
) -> RatioInterval:
    """`policy` ÷ `reference` per seed, with its interval."""
    per_seed = result.seed_goodputs(settings)
    return ratio_interval(per_seed_ratios(per_seed[policy], per_seed[reference]))


class Progress:
    """What is left of the planned trials, in expected seconds, told after each."""

    def __init__(self, planned_s: float, say: Callable[[str], None], clock: Callable[[], float]):
        self.planned_s = planned_s
        self.done_s = 0.0
        self.say = say
        self.clock = clock
        self.start = clock()

    def advance(self, expected_s: float, what: str) -> None:
        self.done_s += expected_s
        elapsed = self.clock() - self.start
        pace = elapsed / self.done_s if self.done_s > 0 else 1.0
        left = max(0.0, self.planned_s - self.done_s) * pace
        share = min(1.0, self.done_s / self.planned_s) if self.planned_s > 0 else 1.0
        bar = "#" * round(20 * share)
        self.say(f"[{bar:<20}] {what} · {elapsed / 60:.1f} min elapsed, ≤ {left / 60:.1f} min left")

    def skip(self, expected_s: float) -> None:
        """Planned work that was not needed."""
        self.planned_s -= expected_s


SERVER_START_S = 45.0  # a small model's server on two cores


def trial_seconds(requests: int, rate: float, capacity: float) -> float:
    """A trial's expected wall time: its arrivals, then the backlog the engine still holds."""
    arrivals = requests / rate
    drain = max(0.0, requests / capacity - arrivals) + 3.0
    return arrivals + drain


def planned_seconds(settings: ValidationSettings, policies: int, capacity: float) -> float:
    """The most the live trials can take: every rate, seed and policy, servers included."""
    live = settings.live
    rates = [load * capacity for load in settings.loads]
    per_policy = sum(trial_seconds(live.requests, rate, capacity) for rate in rates)
    per_policy *= len(settings.seeds)
    warmup = trial_seconds(settings.warmup_requests, WARMUP_RATE_SHARE * capacity, capacity)
    return policies * (per_policy + SERVER_START_S + warmup)


def check_budget(
    settings: ValidationSettings, policies: int, capacity: float, source: str = "measured"
) -> float:
    """The planned seconds; ValueError saying what to cut when they exceed the budget."""
    planned = planned_seconds(settings, policies, capacity)
    if planned > settings.budget_s:
        raise ValueError(
            f"the live trials could take {planned / 60:.0f} min at a {source} capacity of "
            f"{capacity:.2f} req/s, over the budget of {settings.budget_s / 60:.0f} min: "
            "give fewer --requests, --seeds, --loads or policies, or a larger --budget"
        )
    return planned


def measure_capacity(trials: Trials, settings: ValidationSettings) -> float:
    """Requests completed per second when the workload's requests all arrive at once."""
    count = settings.capacity_requests or settings.live.requests
    workload = settings.live.workload_config(UNMISSABLE_SLO_SCALE, count)
    metrics = trials.probe(workload, BURST_RATE, settings.live.seed)
    if not metrics.request_throughput > 0:
        raise RuntimeError("the capacity run completed no request")
    return metrics.request_throughput


def run_curve(
    trials: Trials,
    settings: ValidationSettings,
    policy: str,
    rates: Sequence[float],
    scale: float,
    progress: Progress | None = None,
    capacity: float = math.inf,
) -> PolicyCurve:
    """`policy` at `rates` from the highest down, every seed, until a rate every seed
    passes (the module docstring)."""
    measured: list[Trial] = []
    descending = sorted(rates, reverse=True)
    for index, rate in enumerate(descending):
        batch = []
        for seed in settings.seeds:
            batch.append(Trial.of(rate, seed, trials.run(policy, rate, seed, scale)))
            if progress is not None:
                what = f"{policy} at {rate:.2f} req/s, seed {seed}: {batch[-1].violation_rate:.1%}"
                progress.advance(trial_seconds(settings.live.requests, rate, capacity), what)
        measured.extend(batch)
        if all(trial.violation_rate <= settings.threshold for trial in batch):
            if progress is not None:
                for lower in descending[index + 1 :]:
                    skipped = trial_seconds(settings.live.requests, lower, capacity)
                    progress.skip(skipped * len(settings.seeds))
            break
    return PolicyCurve(policy, tuple(measured))


def run_lines(
    trials: Trials,
    settings: ValidationSettings,
    policy: str,
    rates: Sequence[float],
    scale: float,
) -> PolicyCurve:
    """`policy` at every one of `rates` and seeds: the simulated curve drawn as a line."""
    measured = [
        Trial.of(rate, seed, trials.run(policy, rate, seed, scale))
        for rate in rates
        for seed in settings.seeds
    ]
    return PolicyCurve(policy, tuple(measured))


def line_rates(grid: Sequence[float], points: int) -> list[float]:
    """`points` evenly spaced rates over the grid's span and a little beyond, for lines."""
    low, high = 0.8 * min(grid), 1.1 * max(grid)
    step = (high - low) / (points - 1)
    return [low + index * step for index in range(points)]


def ordered_policies(policies: Sequence[str]) -> list[str]:
    """The reference policy first when it is compared (its server also runs the capacity
    and calibration runs), the others in the order given."""
    unique = list(dict.fromkeys(policies))
    if REFERENCE_POLICY in unique:
        unique.remove(REFERENCE_POLICY)
        unique.insert(0, REFERENCE_POLICY)
    return unique


def run_venue(
    trials: Trials,
    settings: ValidationSettings,
    policies: Sequence[str],
    say: Callable[[str], None] = print,
    grid: Sequence[float] | None = None,
    scale: float | None = None,
    lines: bool = False,
    clock: Callable[[], float] | None = None,
) -> VenueResult:
    """Every policy's curve in one venue.

    The reference server runs first: it measures the capacity and (unless `scale` is given)
    calibrates the SLO scale, then warms up and runs its own trials when it is compared.
    `grid` (req/s) defaults to the loads × this venue's capacity; the simulated twin gets
    the live grid and scale, so both run the same trials. `lines`: also run every policy on
    the dense rates of the plot.
    """
    import time

    for policy in [REFERENCE_POLICY, *policies]:
        trials.check(policy)
    order = ordered_policies(policies)
    curves: dict[str, PolicyCurve] = {}
    with trials.serving(REFERENCE_POLICY):
        capacity = measure_capacity(trials, settings)
        say(f"{trials.venue}: capacity {capacity:.2f} req/s (every request at once)")
        if scale is None:
            scale = settings.live.slo_scale or calibrate(trials, settings.live)
            say(f"SLO scale for {trials.venue}: {scale:.3f}")
        rates = list(grid) if grid is not None else [load * capacity for load in settings.loads]
        planned = check_budget(settings, len(order), capacity) if grid is None else 0.0
        progress = Progress(planned, say, clock or time.monotonic) if grid is None else None
        if progress is not None:
            progress.skip(SERVER_START_S)  # the reference server started before the clock
        if order and order[0] == REFERENCE_POLICY:
            curves[REFERENCE_POLICY] = _served_curve(
                trials, settings, REFERENCE_POLICY, rates, scale, progress, capacity
            )
    for policy in order:
        if policy in curves:
            continue
        with trials.serving(policy):
            if progress is not None:
                progress.advance(SERVER_START_S, f"{policy}: server started")
            curves[policy] = _served_curve(
                trials, settings, policy, rates, scale, progress, capacity
            )
    dense: dict[str, PolicyCurve] = {}
    if lines:
        dense_rates = line_rates(rates, settings.curve_points)
        dense = {p: run_lines(trials, settings, p, dense_rates, scale) for p in order}
    return VenueResult(trials.venue, capacity, scale, tuple(sorted(rates)), curves, dense)


def _served_curve(
    trials: Trials,
    settings: ValidationSettings,
    policy: str,
    rates: Sequence[float],
    scale: float,
    progress: Progress | None,
    capacity: float,
) -> PolicyCurve:
    """On `policy`'s running server: a light run whose figures are thrown away, then its
    curve."""
    if settings.warmup_requests:
        workload = settings.live.workload_config(UNMISSABLE_SLO_SCALE, settings.warmup_requests)
        rate = WARMUP_RATE_SHARE * capacity
        trials.probe(workload, rate, settings.live.seed)
        if progress is not None:
            expected = trial_seconds(settings.warmup_requests, rate, capacity)
            progress.advance(expected, f"{policy}: warmed up")
    return run_curve(trials, settings, policy, rates, scale, progress, capacity)


@dataclass(frozen=True)
class Validation:
    """The live and simulated results of one validation."""

    settings: ValidationSettings
    policies: list[str]
    live: VenueResult
    simulated: VenueResult
    steps_file: str  # the profile the simulated engine was built from
    wall_s: float  # the whole validation, profiling included

    def to_dict(self) -> dict[str, object]:
        """Everything, JSON-ready (the report adds the derived figures)."""
        data = dataclasses.asdict(self)
        data["settings"]["live"]["out_dir"] = str(self.settings.live.out_dir)
        return data


def validate(
    settings: ValidationSettings,
    policies: Sequence[str],
    steps: EngineSteps | None = None,
    steps_file: Path | None = None,
    say: Callable[[str], None] = print,
    live_trials: Callable[[LiveSettings], Trials] = LiveTrials,
) -> Validation:
    """Profile the engine unless `steps` are given (written to `steps_file`), run every
    policy live, then the simulated twin of the same trials from the profile."""
    import time

    from slidingserve.live.server_timing import time_server
    from slidingserve.live.simulated import SimulatedTrials, simulated_policy

    if not policies:
        raise ValueError("no policy to validate")
    start = time.monotonic()
    live_settings = settings.live
    engine = live_trials(live_settings)
    for policy in [REFERENCE_POLICY, *policies]:  # names fail before any server starts
        simulated_policy(policy)
        engine.check(policy)
    steps_path = steps_file or live_settings.out_dir / "steps.json"
    if steps is None:
        say(f"profiling the served engine into {steps_path}")
        steps = time_server(live_settings, steps_path, PROFILE_RATES, say)
    predicted = measure_capacity(SimulatedTrials(steps, live_settings), settings)
    try:  # before any server starts
        check_budget(settings, len(ordered_policies(policies)), predicted, "predicted")
    except ValueError as error:
        raise ValueError(f"{error} (the profile is kept: --steps {steps_path})") from None
    live = run_venue(engine, settings, policies, say)
    twin = SimulatedTrials(steps, dataclasses.replace(live_settings, slo_scale=live.slo_scale))
    say("the simulated twin: the same trials on the profiled engine")
    simulated = run_venue(
        twin, settings, policies, say, grid=live.rates, scale=live.slo_scale, lines=True
    )
    return Validation(
        settings, ordered_policies(policies), live, simulated, str(steps_path),
        time.monotonic() - start,
    )  # fmt: skip


def common_rate(result: VenueResult, settings: ValidationSettings) -> float:
    """The grid rate every policy ran at that lies nearest the median goodput."""
    shared = set(result.rates)
    for curve in result.curves.values():
        shared &= set(curve.rates)
    if not shared:
        return max(result.rates)
    median = statistics.median(result.goodputs(settings).values())
    return min(shared, key=lambda rate: abs(rate - median))
