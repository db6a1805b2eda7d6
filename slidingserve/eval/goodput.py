"""Goodput: the highest request rate at which at most 1% of requests violate their SLO.

Found by bracketing (doubling or halving the rate) and geometric bisection to a relative
precision, on a function that runs one simulation per rate. With common random numbers
(the same seed gives the same requests and the same unit-rate arrival pattern at every
rate) the violation rate is close to monotone in the rate, which the search relies on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple


class Probe(NamedTuple):
    """One simulated rate and its outcome."""

    rate: float  # requests per second
    violation_rate: float  # fraction of requests that violated their SLO


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """When a rate passes and how finely the search brackets the goodput."""

    threshold: float = 0.01  # most violating fraction that still counts as meeting SLOs
    precision: float = 0.02  # stop when (hi − lo) / lo ≤ precision
    min_rate: float = 1e-3  # below this the SLOs are called unachievable (goodput 0)
    max_rate: float = 1e4  # above this the search stops growing (goodput = max_rate)

    def __post_init__(self) -> None:
        if not 0 <= self.threshold < 1:
            raise ValueError(f"threshold must be in [0, 1), got {self.threshold}")
        if not 0 < self.precision < 1:
            raise ValueError(f"precision must be in (0, 1), got {self.precision}")
        if not 0 < self.min_rate < self.max_rate:
            raise ValueError("need 0 < min_rate < max_rate")


@dataclass(frozen=True, slots=True)
class GoodputEstimate:
    """Result of one search."""

    goodput: float  # highest passing rate found, req/s (0: none passed)
    interpolated: float  # QoServe-style: linear between last passing and first failing rate
    probes: tuple[Probe, ...]  # every rate tried, in order


def search_goodput(
    violation_at: Callable[[float], float],
    initial_rate: float,
    settings: SearchSettings = SearchSettings(),
) -> GoodputEstimate:
    """Search the goodput of `violation_at` (rate → violating fraction) from `initial_rate`."""
    if not (initial_rate > 0 and math.isfinite(initial_rate)):
        raise ValueError(f"initial rate must be positive and finite, got {initial_rate}")
    probes: list[Probe] = []

    def passes(rate: float) -> bool:
        violation = violation_at(rate)
        probes.append(Probe(rate, violation))
        return violation <= settings.threshold

    lo, hi = _bracket(passes, initial_rate, settings)
    if lo is None or hi is None:
        rate = lo or 0.0
        return GoodputEstimate(rate, rate, tuple(probes))
    while (hi - lo) / lo > settings.precision:
        mid = math.sqrt(lo * hi)
        if passes(mid):
            lo = mid
        else:
            hi = mid
    return GoodputEstimate(lo, _interpolate(probes, lo, hi, settings.threshold), tuple(probes))


def _bracket(
    passes: Callable[[float], bool], rate: float, settings: SearchSettings
) -> tuple[float | None, float | None]:
    """A passing and a failing rate a factor of two apart (None where the limit was hit)."""
    if passes(rate):
        while rate * 2 <= settings.max_rate:
            if not passes(rate * 2):
                return rate, rate * 2
            rate *= 2
        return rate, None
    while rate / 2 >= settings.min_rate:
        if passes(rate / 2):
            return rate / 2, rate
        rate /= 2
    return None, rate


def _interpolate(probes: list[Probe], lo: float, hi: float, threshold: float) -> float:
    by_rate = {probe.rate: probe.violation_rate for probe in probes}
    v_lo, v_hi = by_rate[lo], by_rate[hi]
    if v_hi <= v_lo:
        return lo
    return lo + (threshold - v_lo) / (v_hi - v_lo) * (hi - lo)
