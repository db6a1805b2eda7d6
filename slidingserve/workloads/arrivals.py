"""Request arrival times: Poisson or gamma renewal processes, with an optional overload window.

Common random numbers: the random draws do not depend on the rate. `unit_arrivals` draws the
gaps of a unit-rate process (mean gap 1) and cumulates them to event "times" U in units of
expected arrivals; `scale_arrivals` maps U to seconds by inverting the cumulative intensity
Λ(t) = U. Without an overload window Λ(t) = rate · t, so rate only rescales time: for one rng
state the arrivals at rate 2 are exactly those at rate 1 divided by 2. With a window
[start, start + duration) at `factor` × rate, Λ is piecewise linear with slope factor · rate
inside the window, and the same U give the same events, denser inside the window.

The first request arrives at time 0; request i arrives after the first i gaps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from slidingserve.core.checks import require_int

if TYPE_CHECKING:
    import numpy.typing as npt

ArrivalProcess = Literal["poisson", "gamma", "trace"]
ARRIVAL_PROCESSES: tuple[str, ...] = ("poisson", "gamma", "trace")
"""`trace`: the arrival times of the workload's trace files, replayed (`replay.py`)."""


def _check_finite(name: str, value: float, *, positive: bool) -> None:
    """ValueError unless `value` is finite and positive (or nonnegative)."""
    bound_ok = value > 0 if positive else value >= 0
    if not math.isfinite(value) or not bound_ok:
        need = "positive" if positive else "nonnegative"
        raise ValueError(f"{name} must be {need} and finite, got {value!r}")


@dataclass(frozen=True)
class OverloadWindow:
    """A transient overload: the arrival rate is multiplied by `factor` in the window."""

    start: float  # seconds after the first arrival
    duration: float  # seconds; 0 means no overload
    factor: float  # rate multiplier inside [start, start + duration); > 1 is a burst

    def __post_init__(self) -> None:
        _check_finite("overload start", self.start, positive=False)
        _check_finite("overload duration", self.duration, positive=False)
        _check_finite("overload factor", self.factor, positive=True)

    @property
    def end(self) -> float:
        """End of the window, seconds (exclusive)."""
        return self.start + self.duration


@dataclass(frozen=True)
class ArrivalConfig:
    """How requests arrive; the base rate is given separately (it is what goodput searches).

    `burstiness` is the coefficient of variation of the gaps of the gamma process (shape
    1 / burstiness², mean gap 1 / rate); 1.0 gives exponential gaps like Poisson, larger is
    burstier. The Poisson process has coefficient of variation 1 and takes no other value.
    """

    process: ArrivalProcess = "poisson"
    burstiness: float = 1.0  # coefficient of variation of the gaps (gamma only)
    overload: OverloadWindow | None = None

    def __post_init__(self) -> None:
        if self.process not in ARRIVAL_PROCESSES:
            raise ValueError(
                f"unknown arrival process {self.process!r}; known: {', '.join(ARRIVAL_PROCESSES)}"
            )
        _check_finite("burstiness", self.burstiness, positive=True)
        if self.process == "poisson" and self.burstiness != 1.0:
            raise ValueError(
                f"burstiness {self.burstiness} needs process 'gamma'; Poisson gaps have CV 1"
            )
        if self.process == "trace" and (self.burstiness != 1.0 or self.overload is not None):
            raise ValueError(
                "replayed trace arrivals keep the trace's own bursts: no burstiness or overload"
            )


def arrival_times(
    n: int, rate: float, config: ArrivalConfig, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """Arrival times of `n` requests at base `rate` (requests/s): seconds, sorted, first at 0."""
    _check_finite("arrival rate", rate, positive=True)
    return scale_arrivals(unit_arrivals(n, config, rng), rate, config.overload)


def unit_arrivals(
    n: int, config: ArrivalConfig, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """Event times of the unit-rate process, in expected arrivals: 0, g_1, g_1 + g_2, ..."""
    require_int("number of requests", n)
    if config.process == "trace":
        raise ValueError("trace arrivals come from the workload's trace files (replay.py)")
    gaps = _unit_gaps(n - 1, config, rng)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def _unit_gaps(
    count: int, config: ArrivalConfig, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """`count` gaps with mean 1 and the configured coefficient of variation."""
    if config.process == "poisson":
        return rng.exponential(1.0, size=count)
    shape = 1.0 / config.burstiness**2
    return rng.gamma(shape, 1.0 / shape, size=count)


def scale_arrivals(
    unit_times: npt.NDArray[np.float64], rate: float, overload: OverloadWindow | None = None
) -> npt.NDArray[np.float64]:
    """Seconds t with Λ(t) = U for each unit-rate time U (module docstring)."""
    _check_finite("arrival rate", rate, positive=True)
    if overload is None or overload.duration == 0.0:
        return unit_times / rate
    at_start = rate * overload.start  # Λ(start), expected arrivals
    at_end = at_start + overload.factor * rate * overload.duration  # Λ(end)
    if at_end <= at_start:  # a window too short to hold any arrival mass (float underflow)
        return unit_times / rate
    before = unit_times / rate
    inside = overload.start + (unit_times - at_start) / (overload.factor * rate)
    after = overload.end + (unit_times - at_end) / rate
    times = np.where(unit_times < at_start, before, np.where(unit_times < at_end, inside, after))
    # The first event is the run's start even when Λ underflows for a denormal window.
    scaled: npt.NDArray[np.float64] = np.where(unit_times == 0.0, 0.0, times)
    return scaled
