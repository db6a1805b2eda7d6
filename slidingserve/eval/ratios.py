"""Differences between policies with their uncertainty: per-seed goodput ratios.

With common random numbers a seed fixes the requests and the arrival pattern for every
policy, so the ratio of two policies' goodputs on the same seed cancels most of what the
seed does to both. The ratios of the seeds are summarised by their mean and a Student-t
interval; a difference is called real only when the interval excludes 1.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scipy import stats

from slidingserve.policies import LABEL_SEPARATOR

if TYPE_CHECKING:
    from slidingserve.eval.experiment import ExperimentResult

CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class RatioInterval:
    """The mean of per-seed ratios and its confidence interval (NaN bounds below 2 seeds)."""

    mean: float
    low: float
    high: float
    per_seed: tuple[float, ...]  # the ratios used, seed order (undefined ones left out)

    @property
    def significant(self) -> bool:
        """Whether the interval excludes 1 (a NaN bound never does)."""
        return self.low > 1 or self.high < 1

    def format(self) -> str:
        """`1.04 [0.98, 1.10]`, with `*` after it when significant; three decimals where
        two would round a bound to 1.00 and hide which side of 1 it lies."""
        if math.isnan(self.mean):
            return "n/a"
        if math.isnan(self.low):
            return f"{self.mean:.2f} [n={len(self.per_seed)}]"
        mark = " *" if self.significant else ""
        digits = 3 if any(_rounds_to_one(bound) for bound in (self.low, self.high)) else 2
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]{mark}"


def _rounds_to_one(value: float) -> bool:
    return value != 1 and f"{value:.2f}" == "1.00"


def ratio_interval(
    ratios: Sequence[float], confidence: float = CONFIDENCE, resolution: float = 0.0
) -> RatioInterval:
    """Mean of `ratios` with a two-sided Student-t interval at `confidence`, never narrower
    than the search's `resolution`.

    A goodput search stops once it brackets the goodput within a relative `resolution`
    (its precision), so each goodput is only known up to a factor 1 + resolution and the
    ratio of two up to the same factor either way: the interval spans at least
    [mean / (1 + resolution), mean × (1 + resolution)]. Without that floor, seeds whose
    searches land on the same grid rates give identical ratios and a falsely exact interval.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not 0 <= resolution < 1:
        raise ValueError(f"resolution must be in [0, 1), got {resolution}")
    values = tuple(ratios)
    if not values:
        return RatioInterval(math.nan, math.nan, math.nan, ())
    mean = statistics.fmean(values)
    if len(values) < 2:
        return RatioInterval(mean, math.nan, math.nan, values)
    quantile = float(stats.t.ppf(0.5 + confidence / 2, len(values) - 1))
    half = quantile * statistics.stdev(values) / math.sqrt(len(values))
    low = min(mean - half, mean / (1 + resolution))
    high = max(mean + half, mean * (1 + resolution))
    return RatioInterval(mean, low, high, values)


@dataclass(frozen=True, slots=True)
class DifferenceInterval:
    """The mean of per-seed differences and its confidence interval (NaN bounds below 2
    seeds): for figures that can be 0 on a seed, where a ratio is undefined."""

    mean: float
    low: float
    high: float

    @property
    def significant(self) -> bool:
        """Whether the interval excludes 0 (a NaN bound never does)."""
        return self.low > 0 or self.high < 0

    def format(self) -> str:
        """`+0.012 [−0.020, +0.044]`, with `*` after it when significant."""
        if math.isnan(self.low):
            return "n/a" if math.isnan(self.mean) else f"{self.mean:+.3f}"
        mark = " *" if self.significant else ""
        return f"{self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}]{mark}"


def difference_interval(
    differences: Sequence[float], confidence: float = CONFIDENCE
) -> DifferenceInterval:
    """Mean of per-seed `differences` with a two-sided Student-t interval at `confidence`."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    values = tuple(differences)
    if not values:
        return DifferenceInterval(math.nan, math.nan, math.nan)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return DifferenceInterval(mean, math.nan, math.nan)
    quantile = float(stats.t.ppf(0.5 + confidence / 2, len(values) - 1))
    half = quantile * statistics.stdev(values) / math.sqrt(len(values))
    return DifferenceInterval(mean, mean - half, mean + half)


def per_seed_ratios(values: Sequence[float], reference: Sequence[float]) -> list[float]:
    """values[i] / reference[i] for every seed where the reference's goodput is positive."""
    if len(values) != len(reference):
        raise ValueError(f"{len(values)} values against {len(reference)} reference values")
    return [v / r for v, r in zip(values, reference, strict=True) if r > 0]


@dataclass(frozen=True, slots=True)
class RatioRow:
    """Goodput of `policy` over that of `reference`, on one workload and criterion."""

    policy: str
    reference: str
    workload: str
    criterion: str
    interval: RatioInterval


def goodput_ratios(
    result: ExperimentResult, reference: str, criterion: str | None = None
) -> list[RatioRow]:
    """Every other policy's per-seed goodput ratio to `reference`, per workload."""
    experiment = result.experiment
    if reference not in experiment.policies:
        raise ValueError(f"reference policy {reference!r} is not in the run")
    criterion = criterion or experiment.criteria[0]
    rows = {(r.policy, r.workload): r for r in result.rows if r.criterion == criterion}
    return [
        RatioRow(
            policy,
            reference,
            workload,
            criterion,
            ratio_interval(
                per_seed_ratios(
                    rows[policy, workload].per_seed, rows[reference, workload].per_seed
                ),
                resolution=experiment.search.precision,
            ),
        )
        for workload in experiment.workloads
        for policy in experiment.policies
        if policy != reference
    ]


def static_families(policies: Sequence[str]) -> dict[str, list[str]]:
    """Policies run under several labels (`sarathi-edf`, `sarathi-edf#256`, ...): the settings
    of one tuning knob, by base name; only families of two or more."""
    families: dict[str, list[str]] = {}
    for policy in policies:
        families.setdefault(policy.split(LABEL_SEPARATOR, 1)[0], []).append(policy)
    return {base: labels for base, labels in families.items() if len(labels) > 1}


def compared_families(policies: Sequence[str]) -> list[str]:
    """The `static_families` with some policy outside them to compare with their best setting
    (a run of `slidingserve` and `slidingserve#x` alone has none)."""
    return [
        base for base, labels in static_families(policies).items() if len(labels) < len(policies)
    ]


def best_static_ratios(
    result: ExperimentResult, base: str, criterion: str | None = None
) -> list[RatioRow]:
    """Per workload, every policy outside `base`'s family over the family's best setting
    there (the label with the highest mean goodput: `sarathi-edf*`, docs/baselines.md §4), per
    seed."""
    experiment = result.experiment
    family = static_families(experiment.policies).get(base)
    if not family:
        raise ValueError(f"{base!r} runs under fewer than two labels: no best setting to pick")
    criterion = criterion or experiment.criteria[0]
    rows = {(r.policy, r.workload): r for r in result.rows if r.criterion == criterion}
    ratios = []
    for workload in experiment.workloads:
        best = max(family, key=lambda label: rows[label, workload].goodput_mean)
        for policy in experiment.policies:
            if policy in family:
                continue
            values = per_seed_ratios(rows[policy, workload].per_seed, rows[best, workload].per_seed)
            interval = ratio_interval(values, resolution=experiment.search.precision)
            ratios.append(RatioRow(policy, best, workload, criterion, interval))
    return ratios
