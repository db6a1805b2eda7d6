"""Is the simulator right about a real engine? The procedure of `slidingserve validate`.

The same comparison runs twice: on live servers and on the simulated copy of the profiled
engine (`simulated.SimulatedTrials`), through the same `Trials` interface, so every figure
has a measured and a predicted value (`validation_figures.py`).

- **The rates come from the engine, not from a guess.** A reference server (vLLM's own
  `fcfs`), warmed up first, serves the workload with every request arriving at once; the
  requests it completes per second are the engine's capacity, and each policy runs at fixed
  fractions of it (`ValidationSettings.loads`). The simulated twin measures its own
  capacity the same way and runs the live rates.
- **From the highest rate down, until every seed passes.** Every rate runs once per seed;
  a seed passes a rate when at most `threshold` of its requests are late. The rates run
  from the highest down and stop at the first rate every seed passes: the violation rate
  falls with the load, so the rates below pass too (the simulator's search assumes the
  same). A curve that passes the highest rate climbs above it, one that fails the lowest
  goes on below it, by the grid's step, at most `EXTRA_RATES` rates either way. Where the
  highest rate splits the seeds, those that passed it also climb on their own until each
  fails (`CurveSearch`): otherwise their goodputs would be bounds, which no ratio uses.
- **Every policy in step, on servers up side by side.** A shared machine's speed drifts
  by 10–20% in an hour, so curves run one after another compare the machine's moments as
  much as the policies (docs/results.md §9). With `interleave` (the default on a CPU
  build) every policy's server stays up and the curves advance together: each round runs
  every unfinished policy at its next rate, every policy at a seed before the next seed
  (`run_curves`); the idle servers wait on their queues and cost memory only.
- **Goodput per seed**, between the highest rate the seed passes (with every measured rate
  below it) and the next one up, interpolated linearly in the violating share; a curve
  that never passed or never failed gives a bound, which no error or ratio uses. Policies
  are compared by per-seed ratios with Student-t intervals. The pooled goodput reads the
  rates every seed ran.
- **The twin with several draws of its noise.** A live run is one draw of the engine's
  noise; the twin runs every trial `noise_draws` times, the same requests on the same
  fitted engine with other noise, and reports the mean and the range, which is how far
  live may stand from an exact twin (docs/results.md §9: up to ±12% for a pooled goodput).
- **Every run starts cold and apart.** Each server first serves a small burst that is thrown
  away (a cold engine's first requests pay for compilation and allocation). Capacity,
  calibration and warm-up runs draw their requests from seeds of their own
  (`PROBE_SEED_OFFSET`), and live runs salt the prefix cache apart (`LiveTrials`), so no
  trial finds the prompts of another in the cache; the simulator starts every trial cold.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from slidingserve.live.compare import (
    UNMISSABLE_SLO_SCALE,
    LiveSettings,
    LiveTrials,
    Trials,
    calibrate,
)
from slidingserve.live.validation_figures import PolicyCurve, Trial, VenueResult
from slidingserve.live.validation_plan import (
    BURST_RATE,
    Progress,
    check_budget,
    closing_seconds,
    startup_seconds,
    trial_seconds,
)
from slidingserve.predictor.steps import EngineSteps

REFERENCE_POLICY = "vllm:fcfs"  # serves the capacity and calibration runs
DEFAULT_LOADS = (0.45, 0.6, 0.75, 0.9)  # fractions of the measured capacity
PROFILE_RATES = (2.0, 8.0, 16.0, 32.0)  # req/s: the profiling traffic, light load to overload
PROBE_SEED_OFFSET = 10_000  # capacity, calibration and warm-up runs: seed + this
EXTRA_RATES = 2  # rates a curve may add above or below the grid
DEFAULT_STEP = 1.25  # the factor between extra rates when the grid has a single rate
DEFAULT_NOISE_DRAWS = 4  # the twin's noise draws of every trial (docs/live.md §6, step 6)


@dataclass(frozen=True)
class ValidationSettings:
    """What a validation measures, live and simulated alike."""

    live: LiveSettings  # model, workload, requests per trial, first seed; `repeats` = seeds
    loads: tuple[float, ...] = DEFAULT_LOADS  # fractions of the measured capacity
    threshold: float = 0.01  # most violating share at which a seed passes a rate
    warmup_requests: int = 16  # each server's discarded first burst
    capacity_requests: int = 0  # requests of the capacity run (0: the trials' count)
    curve_points: int = 12  # simulated rates per policy for the plot's lines
    budget_s: float = 3600.0  # the live trials' most expected wall time
    interleave: bool = True  # every policy's server up at once, their trials interleaved
    # the twin runs every trial with this many noise draws and reports their mean (and
    # range); 1: the trials' own seeds alone
    noise_draws: int = DEFAULT_NOISE_DRAWS

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
        if isinstance(self.noise_draws, bool) or not isinstance(self.noise_draws, int):
            raise ValueError(f"noise_draws must be a whole number, got {self.noise_draws!r}")
        if self.noise_draws < 1:
            raise ValueError(f"noise_draws must be ≥ 1, got {self.noise_draws}")

    @property
    def seeds(self) -> list[int]:
        return [self.live.seed + repeat for repeat in range(self.live.repeats)]

    @property
    def probe_seed(self) -> int:
        return self.live.seed + PROBE_SEED_OFFSET


def measure_capacity(trials: Trials, settings: ValidationSettings) -> float:
    """Requests completed per second when the workload's requests all arrive at once."""
    count = settings.capacity_requests or settings.live.requests
    workload = settings.live.workload_config(UNMISSABLE_SLO_SCALE, count)
    metrics = trials.probe(workload, BURST_RATE, settings.probe_seed)
    if not metrics.request_throughput > 0:
        raise RuntimeError("the capacity run completed no request")
    return metrics.request_throughput


def grid_step(rates: Sequence[float]) -> float:
    """The factor between the grid's two highest rates (`DEFAULT_STEP` for one rate)."""
    ordered = sorted(rates)
    return ordered[-1] / ordered[-2] if len(ordered) > 1 else DEFAULT_STEP


def _rates_to_run(
    rates: Sequence[float], step: float, passed: Callable[[], bool]
) -> Iterator[float]:
    """The grid from the top down, then up to `EXTRA_RATES` below it while `passed()` is
    false after each; if the top passes, up to `EXTRA_RATES` above it until one fails."""
    descending = sorted(rates, reverse=True)
    yield descending[0]
    if passed():
        rate = descending[0]
        for _ in range(EXTRA_RATES):
            rate *= step
            yield rate
            if not passed():
                return
        return
    for rate in descending[1:]:
        yield rate
        if passed():
            return
    rate = descending[-1]
    for _ in range(EXTRA_RATES):
        rate /= step
        yield rate
        if passed():
            return


class CurveSearch:
    """One policy's walk over the rates: the trials its seeds run next, and those measured.

    Every seed runs each rate of `_rates_to_run` (the module docstring). When the grid's
    top rate splits the seeds, those that passed it also climb above it on their own, by
    the grid's step, each until it fails (at most `EXTRA_RATES` rates), so that their
    goodputs are measured rather than bounds while every seed goes down the grid."""

    def __init__(
        self, policy: str, rates: Sequence[float], seeds: Sequence[int], threshold: float
    ) -> None:
        self.policy = policy
        self.seeds = list(seeds)
        self.threshold = threshold
        self.top = max(rates)
        self.step = grid_step(rates)
        self.measured: list[Trial] = []
        self.batch: list[Trial] = []  # the trials of the round now running
        self._rate: float | None = None  # the rate every seed runs in this round
        self._climbs: dict[int, int] = {}  # seed: the steps above the top it runs next
        self._rates = _rates_to_run(rates, self.step, self._every_seed_passed)

    def _passed(self, trial: Trial) -> bool:
        return trial.violation_rate <= self.threshold

    def _every_seed_passed(self) -> bool:
        return all(self._passed(trial) for trial in self.batch if trial.rate == self._rate)

    def _climb_rate(self, steps: int) -> float:
        return self.top * self.step**steps

    def next_trials(self) -> list[tuple[float, int]]:
        """The (rate, seed) trials of the next round, once the round before is judged;
        none when the curve is done."""
        self._advance_climbs()
        self._rate = next(self._rates, None)
        self.measured.extend(self.batch)
        self.batch = []
        every_seed = [] if self._rate is None else [(self._rate, seed) for seed in self.seeds]
        climbs = [(self._climb_rate(steps), seed) for seed, steps in self._climbs.items()]
        return every_seed + climbs

    def _advance_climbs(self) -> None:
        """The climbs after the round just run: they start where the top splits the seeds
        and end where their seed fails or has climbed `EXTRA_RATES` rates."""
        if self._rate == self.top and not self.measured:  # the top's round
            passed = [trial.seed for trial in self.batch if self._passed(trial)]
            if len(passed) < len(self.seeds):
                self._climbs = dict.fromkeys(passed, 1)
            return
        for trial in self.batch:
            steps = self._climbs.get(trial.seed)
            if steps is None or trial.rate <= self.top:  # not a climb: the seed's grid rate
                continue
            if self._passed(trial) and steps < EXTRA_RATES:
                self._climbs[trial.seed] = steps + 1
            else:
                del self._climbs[trial.seed]

    def curve(self) -> PolicyCurve:
        return PolicyCurve(self.policy, tuple(self.measured + self.batch))


def run_curves(
    trials: Trials,
    settings: ValidationSettings,
    policies: Sequence[str],
    rates: Sequence[float],
    scale: float,
    progress: Progress | None = None,
    capacity: float = math.inf,
    measured: Callable[[PolicyCurve], None] = lambda _: None,
) -> dict[str, PolicyCurve]:
    """Every policy's curve (`CurveSearch`), interleaved: each round runs every unfinished
    policy's next trials seed by seed, every policy at a seed before the next seed, in an
    order that turns by one with each seed. A machine whose speed drifts then moves every
    policy alike instead of the ones that ran last. `measured` gets each curve as it is
    done."""
    seeds = settings.seeds
    searches = [CurveSearch(policy, rates, seeds, settings.threshold) for policy in policies]
    due = {search.policy: search.next_trials() for search in searches}
    turn = 0
    while active := [search for search in searches if due[search.policy]]:
        for seed in seeds:
            for search in active[turn % len(active) :] + active[: turn % len(active)]:
                for rate in [rate for rate, of in due[search.policy] if of == seed]:
                    metrics = trials.run(search.policy, rate, seed, scale)
                    search.batch.append(Trial.of(rate, seed, metrics))
                    if progress is not None:
                        _tell(progress, settings, search, rate, rates, capacity)
            turn += 1
        for search in active:
            due[search.policy] = search.next_trials()
            if not due[search.policy]:
                measured(search.curve())
                if progress is not None:
                    _skip_unrun(progress, settings, search.curve(), rates, capacity)
    return {search.policy: search.curve() for search in searches}


def _tell(
    progress: Progress,
    settings: ValidationSettings,
    search: CurveSearch,
    rate: float,
    grid: Sequence[float],
    capacity: float,
) -> None:
    """The progress after a trial; a rate beyond the grid adds its trial to the plan."""
    expected = trial_seconds(settings.live.requests, rate, capacity)
    if rate not in grid:
        progress.skip(-expected)
    trial = search.batch[-1]
    what = f"{search.policy} at {rate:.2f} req/s, seed {trial.seed}: {trial.violation_rate:.1%}"
    progress.advance(expected, what)


def _skip_unrun(
    progress: Progress,
    settings: ValidationSettings,
    curve: PolicyCurve,
    grid: Sequence[float],
    capacity: float,
) -> None:
    """The planned trials a finished curve did not need."""
    ran = {trial.rate for trial in curve.trials}
    for rate in grid:
        if rate not in ran:
            expected = trial_seconds(settings.live.requests, rate, capacity)
            progress.skip(expected * len(settings.seeds))


def run_curve(
    trials: Trials,
    settings: ValidationSettings,
    policy: str,
    rates: Sequence[float],
    scale: float,
    progress: Progress | None = None,
    capacity: float = math.inf,
) -> PolicyCurve:
    """`policy`'s trials alone, every seed at each rate of `_rates_to_run`."""
    return run_curves(trials, settings, [policy], rates, scale, progress, capacity)[policy]


def run_lines(
    trials: Trials, settings: ValidationSettings, policy: str, rates: Sequence[float], scale: float
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


@dataclass(frozen=True)
class _Venue:
    """What every policy's trials in one venue share."""

    trials: Trials
    settings: ValidationSettings
    capacity: float
    rates: list[float]
    scale: float
    progress: Progress | None

    def curves(
        self, policies: Sequence[str], measured: Callable[[PolicyCurve], None]
    ) -> dict[str, PolicyCurve]:
        """On the policies' running servers (warmed up): their curves, interleaved."""
        return run_curves(
            self.trials, self.settings, policies, self.rates, self.scale, self.progress,
            self.capacity, measured,
        )  # fmt: skip

    def start(self, policy: str, servers: contextlib.ExitStack) -> None:
        """`policy`'s server started (until `servers` closes) and warmed up."""
        servers.enter_context(self.trials.serving(policy))
        warm_up(self.trials, self.settings)
        if self.progress is not None:
            started = startup_seconds(self.settings, self.capacity)
            self.progress.advance(started, f"{policy}: server started and warmed up")


def run_venue(
    trials: Trials,
    settings: ValidationSettings,
    policies: Sequence[str],
    say: Callable[[str], None] = print,
    grid: Sequence[float] | None = None,
    scale: float | None = None,
    lines: bool = False,
    clock: Callable[[], float] = time.monotonic,
    measured: Callable[[PolicyCurve], None] = lambda _: None,
    closing: bool = False,
    opened: Callable[[float, float, list[float]], None] = lambda *_: None,
) -> VenueResult:
    """Every policy's curve in one venue.

    The reference server starts first: it warms up, measures the capacity and (unless
    `scale` is given) calibrates the SLO scale. With `settings.interleave` every other
    policy's server then starts beside it and all the curves run together (`run_curves`);
    without, each policy's server runs its curve alone, in turn. `grid` (req/s) defaults to
    the loads × this venue's capacity, checked against the budget; the simulated twin gets
    the live grid and scale. `lines`: also run every policy on the dense rates of the plot.
    `opened` gets the venue's capacity, SLO scale and grid as soon as they are known, and
    `measured` each policy's curve as it is done. `closing`: once every server has
    stopped, start the reference server again and measure the capacity once more, so that
    the result says how far the engine's speed moved while the trials ran (a shared
    machine's does; the twin's profile is of one moment).
    """
    for policy in [REFERENCE_POLICY, *policies]:
        trials.check(policy)
    order = ordered_policies(policies)
    curves: dict[str, PolicyCurve] = {}
    with contextlib.ExitStack() as servers:
        servers.enter_context(trials.serving(REFERENCE_POLICY))
        venue = _open(trials, settings, order, say, grid, scale, clock, closing)
        opened(venue.capacity, venue.scale, venue.rates)
        if settings.interleave:
            for policy in order[1:] if order[0] == REFERENCE_POLICY else order:
                venue.start(policy, servers)
            curves = venue.curves(order, measured)
        elif order[0] == REFERENCE_POLICY:
            curves = venue.curves([REFERENCE_POLICY], measured)
    for policy in [policy for policy in order if policy not in curves]:
        with contextlib.ExitStack() as servers:
            venue.start(policy, servers)
            curves |= venue.curves([policy], measured)
    closing_capacity = _closing_capacity(venue, say) if closing else None
    dense: dict[str, PolicyCurve] = {}
    if lines:
        dense_rates = line_rates(venue.rates, settings.curve_points)
        dense = {p: run_lines(trials, settings, p, dense_rates, venue.scale) for p in order}
    return VenueResult(
        trials.venue, venue.capacity, venue.scale, tuple(sorted(venue.rates)), curves, dense,
        closing_capacity,
    )  # fmt: skip


def _open(
    trials: Trials,
    settings: ValidationSettings,
    order: Sequence[str],
    say: Callable[[str], None],
    grid: Sequence[float] | None,
    scale: float | None,
    clock: Callable[[], float],
    closing: bool,
) -> _Venue:
    """On the reference server, just started: its warm-up, the capacity, the SLO scale
    (unless given), the rates and the progress of the planned trials (`run_venue`)."""
    warm_up(trials, settings)
    capacity = measure_capacity(trials, settings)
    say(f"{trials.venue}: capacity {capacity:.2f} req/s (every request at once)")
    if scale is None:
        probe_settings = dataclasses.replace(settings.live, seed=settings.probe_seed)
        scale = settings.live.slo_scale or calibrate(trials, probe_settings)
        say(f"SLO scale for {trials.venue}: {scale:.3f}")
    rates = list(grid) if grid is not None else [load * capacity for load in settings.loads]
    progress = None
    if grid is None:
        progress = _progress(settings, order, capacity, closing, say, clock)
    return _Venue(trials, settings, capacity, rates, scale, progress)


def _progress(
    settings: ValidationSettings,
    order: Sequence[str],
    capacity: float,
    closing: bool,
    say: Callable[[str], None],
    clock: Callable[[], float],
) -> Progress:
    """The progress of the planned trials (checked against the budget), less what runs
    before its clock starts (the reference server and its warm-up, when it is compared)
    and the closing capacity run when there is none."""
    progress = Progress(check_budget(settings, len(order), capacity), say, clock)
    if order[0] == REFERENCE_POLICY:
        progress.skip(startup_seconds(settings, capacity))
    if not closing:
        progress.skip(closing_seconds(settings, capacity))
    return progress


def _closing_capacity(venue: _Venue, say: Callable[[str], None]) -> float | None:
    """The capacity measured again on a fresh, warmed-up reference server; None, said, if
    that fails (the trials are kept: the drift is a diagnosis, not a result)."""
    trials, settings = venue.trials, venue.settings
    try:
        with trials.serving(REFERENCE_POLICY):
            warm_up(trials, settings)
            closing = measure_capacity(trials, settings)
    except (OSError, RuntimeError, ValueError) as error:
        say(f"{trials.venue}: the capacity could not be measured again at the end: {error}")
        return None
    drift = closing / venue.capacity - 1
    what = f"capacity at the end {closing:.2f} req/s ({drift:+.1%} from the start)"
    if venue.progress is not None:
        venue.progress.advance(closing_seconds(settings, venue.capacity), what)
    else:
        say(f"{trials.venue}: {what}")
    return closing


def warm_up(trials: Trials, settings: ValidationSettings) -> None:
    """A small burst on the running server whose figures are thrown away."""
    if settings.warmup_requests:
        workload = settings.live.workload_config(UNMISSABLE_SLO_SCALE, settings.warmup_requests)
        trials.probe(workload, BURST_RATE, settings.probe_seed + 1)


@dataclass(frozen=True)
class Validation:
    """The live and simulated results of one validation."""

    settings: ValidationSettings
    policies: list[str]
    live: VenueResult
    simulated: VenueResult
    engine: str  # the profiled engine, as its steps file names it
    steps_file: str  # the profile the simulated engine was built from
    # the whole validation, profiling included (finished from kept curves: the twin alone)
    wall_s: float

    def to_dict(self) -> dict[str, object]:
        """Everything, JSON-ready, with the procedure's constants (the report adds the
        derived figures)."""
        data = dataclasses.asdict(self)
        data["settings"]["live"]["out_dir"] = str(self.settings.live.out_dir)
        data["procedure"] = {
            "reference_policy": REFERENCE_POLICY,
            "burst_rate": BURST_RATE,
            "profile_rates": list(PROFILE_RATES),
            "probe_seed_offset": PROBE_SEED_OFFSET,
            "extra_rates": EXTRA_RATES,
        }
        return data


def validate(
    settings: ValidationSettings,
    policies: Sequence[str],
    steps: EngineSteps | None = None,
    steps_file: Path | None = None,
    say: Callable[[str], None] = print,
    live_trials: Callable[[LiveSettings], Trials] = LiveTrials,
    measured: Callable[[PolicyCurve], None] = lambda _: None,
    opened: Callable[[float, float, list[float]], None] = lambda *_: None,
    closed: Callable[[float], None] = lambda _: None,
) -> Validation:
    """Profile the engine unless `steps` are given (written to `steps_file`), run every
    policy live (the venue's capacity, SLO scale and grid to `opened` once measured, each
    curve to `measured` as it is done, the closing capacity to `closed`, so an
    interrupted run keeps them), then the simulated twin of the same trials from the
    profile (`finish_validation`)."""
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
    live = run_venue(
        engine, settings, policies, say, measured=measured, closing=True, opened=opened
    )
    if live.closing_capacity is not None:
        closed(live.closing_capacity)
    return finish_validation(settings, policies, steps, steps_path, live, say, start)


def finish_validation(
    settings: ValidationSettings,
    policies: Sequence[str],
    steps: EngineSteps,
    steps_file: Path,
    live: VenueResult,
    say: Callable[[str], None] = print,
    start: float | None = None,
) -> Validation:
    """The validation of the live venue `live`: the simulated twin of its trials, run from
    the profile `steps` on its grid and SLO scale, with `settings.noise_draws` draws.
    `validate` ends with it; `kept_curves.read_live_venue` gives it the live venue of a run
    stopped before its twin. `start` (`time.monotonic`): when the validation began (now
    if None)."""
    from slidingserve.live.simulated import SimulatedTrials

    start = time.monotonic() if start is None else start
    missing = [policy for policy in policies if policy not in live.curves]
    if missing:
        raise ValueError(f"no live curve of {', '.join(missing)}")
    twin = SimulatedTrials(steps, dataclasses.replace(settings.live, slo_scale=live.slo_scale))
    say("the simulated twin: the same trials on the profiled engine")
    simulated = run_venue(
        twin, settings, policies, say, grid=live.rates, scale=live.slo_scale, lines=True
    )
    draws = []
    for draw in range(1, settings.noise_draws):
        say(f"the simulated twin, noise draw {draw + 1} of {settings.noise_draws}")
        other = twin.with_noise_draw(draw)
        result = run_venue(other, settings, policies, say, grid=live.rates, scale=live.slo_scale)
        draws.append(result.curves)
    simulated = dataclasses.replace(simulated, draws=tuple(draws))
    return Validation(
        settings, ordered_policies(policies), live, simulated, steps.engine, str(steps_file),
        time.monotonic() - start,
    )  # fmt: skip
