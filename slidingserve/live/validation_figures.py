"""The figures of a validation: trials, per-policy curves and the goodputs read from them
(`validation.py` runs the trials)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from slidingserve.eval.ratios import RatioInterval, ratio_interval
from slidingserve.metrics import RunMetrics

CONFIDENCE_Z = 1.959963984540054  # two-sided 95%
RATIO_RESOLUTION = 0.05  # goodputs interpolated between rates ~20% apart: not finer than this


@dataclass(frozen=True, slots=True)
class Trial:
    """One policy at one rate with one seed."""

    rate: float  # req/s
    seed: int
    requests: int  # judged: completed or failed (a refusal is a failure)
    violating: int  # any deadline missed, or failed
    cancelled: int  # still running when the run stopped: not judged
    ttft_p50: float  # seconds, completed requests
    ttft_p99: float
    tpot_p50: float

    @classmethod
    def of(cls, rate: float, seed: int, metrics: RunMetrics) -> Trial:
        judged = metrics.cumulative.judged
        return cls(
            rate,
            seed,
            judged,
            round(metrics.cumulative.overall * judged) if judged else 0,
            metrics.cancelled,
            metrics.ttft.p50,
            metrics.ttft.p99,
            metrics.tpot.p50,
        )

    @property
    def violation_rate(self) -> float:
        return self.violating / self.requests if self.requests else 1.0


class Goodput(NamedTuple):
    """A goodput read from measured rates, and whether it is only a bound."""

    value: float  # req/s
    bound: str = ""  # "": between two measured rates; "≥": every rate passed; "<": none did

    @property
    def exact(self) -> bool:
        return not self.bound

    def text(self) -> str:
        return f"{self.bound} {self.value:.2f}" if self.bound else f"{self.value:.2f}"


def curve_goodput(points: Sequence[tuple[float, float]], threshold: float) -> Goodput:
    """The goodput of measured (rate, violating share) points.

    The highest rate that passes (share ≤ `threshold`) with every lower measured rate,
    moved towards the next rate up in proportion to how far its share lies below the
    threshold (linear interpolation, as the simulator's search reports it). Every rate
    passing gives `≥` the highest; the lowest failing gives `<` the lowest.
    """
    ordered = sorted(points)
    if not ordered:
        raise ValueError("no trials to read a goodput from")
    last: tuple[float, float] | None = None
    for rate, share in ordered:
        if share > threshold:
            if last is None:
                return Goodput(rate, "<")
            last_rate, last_share = last  # last_share ≤ threshold < share
            step = (threshold - last_share) / (share - last_share)
            return Goodput(last_rate + step * (rate - last_rate))
        last = (rate, share)
    assert last is not None
    return Goodput(last[0], "≥")


def wilson_interval(successes: int, count: int) -> tuple[float, float]:
    """Wilson's 95% score interval of a binomial share (0, 1 when nothing was counted).
    It treats requests as independent; late requests come in bursts, so it is narrower
    than the spread between runs."""
    if count <= 0:
        return 0.0, 1.0
    share = successes / count
    z2 = CONFIDENCE_Z**2
    centre = (share + z2 / (2 * count)) / (1 + z2 / count)
    half = CONFIDENCE_Z * math.sqrt(share * (1 - share) / count + z2 / (4 * count**2))
    half /= 1 + z2 / count
    return max(0.0, centre - half), min(1.0, centre + half)


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
        """(violating, judged) over the seeds at `rate`."""
        trials = self.at(rate)
        return sum(t.violating for t in trials), sum(t.requests for t in trials)

    def pooled_rate(self, rate: float) -> float:
        violating, judged = self.pooled(rate)
        return violating / judged if judged else 1.0

    def interval(self, rate: float) -> tuple[float, float]:
        """The Wilson 95% interval of the pooled violating share at `rate`."""
        return wilson_interval(*self.pooled(rate))

    def seed_goodput(self, seed: int, threshold: float) -> Goodput:
        """The goodput of one seed's trials (`curve_goodput`)."""
        points = [(t.rate, t.violation_rate) for t in self.trials if t.seed == seed]
        return curve_goodput(points, threshold)

    @property
    def common_rates(self) -> list[float]:
        """The rates every seed of the curve ran (a seed that climbed on its own ran more)."""
        seeds = {trial.seed for trial in self.trials}
        return [rate for rate in self.rates if {t.seed for t in self.at(rate)} == seeds]

    def pooled_goodput(self, threshold: float) -> Goodput:
        """The goodput of the pooled violating shares at the rates every seed ran
        (`curve_goodput`)."""
        points = [(rate, self.pooled_rate(rate)) for rate in self.common_rates]
        return curve_goodput(points, threshold)


def mean_goodput(goodputs: Sequence[Goodput]) -> Goodput:
    """The mean of `goodputs` (the same figure from several noise draws); where some draw
    gave only a bound, the first such bound, which no error or ratio uses."""
    if not goodputs:
        raise ValueError("no goodput to average")
    bounds = [goodput for goodput in goodputs if not goodput.exact]
    if bounds:
        return bounds[0]
    return Goodput(statistics.fmean(goodput.value for goodput in goodputs))


@dataclass(frozen=True)
class VenueResult:
    """Every policy's trials in one venue (live, or simulated).

    A simulated venue may hold further noise draws of the same trials (`draws`: the curves
    of each, with the same requests on the same engine): its goodputs and latencies are
    then the mean (median) over the draws, and `goodput_draws` gives each draw's, the
    spread that noise alone makes."""

    venue: str
    capacity: float  # req/s completed when every request arrives at once
    slo_scale: float
    rates: tuple[float, ...]  # the grid, req/s (loads × the live capacity)
    curves: dict[str, PolicyCurve]
    lines: dict[str, PolicyCurve] = field(default_factory=dict)  # simulated: dense curves
    # live: the capacity measured again after every policy's trials, req/s (None: not run)
    closing_capacity: float | None = None
    # simulated: the curves of every further noise draw (`curves` is draw 0)
    draws: tuple[dict[str, PolicyCurve], ...] = ()

    @property
    def drift(self) -> float | None:
        """How much the engine's capacity moved while the trials ran: the closing capacity
        relative to the opening one (None without a closing run)."""
        if self.closing_capacity is None:
            return None
        return self.closing_capacity / self.capacity - 1

    def every_draw(self, policy: str) -> list[PolicyCurve]:
        """`policy`'s curve in each noise draw, draw 0 first (live: the one curve)."""
        return [self.curves[policy], *(draw[policy] for draw in self.draws)]

    def goodput_draws(self, threshold: float) -> dict[str, list[Goodput]]:
        """Each policy's pooled goodput in each noise draw, draw 0 first."""
        return {
            policy: [curve.pooled_goodput(threshold) for curve in self.every_draw(policy)]
            for policy in self.curves
        }

    def goodputs(self, threshold: float) -> dict[str, Goodput]:
        """Each policy's goodput from its pooled trials (the mean over noise draws)."""
        draws = self.goodput_draws(threshold)
        return {policy: mean_goodput(draws[policy]) for policy in self.curves}

    def seed_goodputs(self, threshold: float, seeds: Sequence[int]) -> dict[str, list[Goodput]]:
        """Each policy's goodput on each seed, in seed order (the mean over noise draws)."""
        return {
            policy: [
                mean_goodput([curve.seed_goodput(seed, threshold) for curve in curves])
                for seed in seeds
            ]
            for policy in self.curves
            for curves in [self.every_draw(policy)]
        }

    def median_at(self, policy: str, rate: float, name: str) -> float:
        """The median over seeds and noise draws of `policy`'s trials' `name` (a Trial
        field) at `rate`."""
        values = [getattr(t, name) for curve in self.every_draw(policy) for t in curve.at(rate)]
        return statistics.median(values) if values else math.nan


def exact_ratios(values: Sequence[Goodput], reference: Sequence[Goodput]) -> list[float]:
    """values[i] / reference[i] on the seeds where both are measured, not bounds."""
    return [
        value.value / ref.value
        for value, ref in zip(values, reference, strict=True)
        if value.exact and ref.exact and ref.value > 0
    ]


def ratio_to(
    result: VenueResult, threshold: float, seeds: Sequence[int], policy: str, reference: str
) -> RatioInterval:
    """`policy` ÷ `reference` on each seed where both goodputs are exact, with its interval
    (never narrower than the goodputs' resolution)."""
    per_seed = result.seed_goodputs(threshold, seeds)
    ratios = exact_ratios(per_seed[policy], per_seed[reference])
    return ratio_interval(ratios, resolution=RATIO_RESOLUTION)


def common_rate(live: VenueResult, simulated: VenueResult, threshold: float) -> float | None:
    """A rate every policy ran in both venues, the nearest to the median live goodput."""
    shared = set(live.rates)
    for result in (live, simulated):
        for policy in result.curves:
            for curve in result.every_draw(policy):
                shared &= set(curve.rates)
    if not shared:
        return None
    median = statistics.median(g.value for g in live.goodputs(threshold).values())
    return min(shared, key=lambda rate: abs(rate - median))
