"""What a trace holds: its length distributions and, when it records them, its arrivals.

`trace_stats(trace)` describes a `TimedTrace` (see `trace_files`) in a `TraceStats`. The
definitions, one home for each:

- Quantiles (p50, p90, p99) interpolate linearly between order statistics (numpy's default,
  as `metrics.figures.Percentiles`); mean and max are over every row.
- The share of prompts over a context length C: rows whose prompt has more than C tokens,
  ÷ rows (only the prompt: a prompt of exactly C tokens fits).
- Gaps: the differences between consecutive arrival times in file order; requests that share
  a timestamp give gaps of 0. The CV (coefficient of variation) of a set of values is their
  standard deviation (population, ddof = 0) ÷ their mean; it is undefined (None) for no
  values or a mean of 0. Evenly spaced arrivals have a gap CV of 0, Poisson ones about 1.
- Per-second counts: arrivals in each second [k, k + 1) from the first arrival, for every
  second up to the one of the last arrival, empty seconds included (the last may be partial).
  Their CV is 0 for one arrival a second and grows with burstiness; the busiest second is
  their maximum. Per-minute counts and the busiest minute alike, with minutes [60k, 60k + 60).
- Per-minute gap CV: for each minute (as above) with at least `MIN_MINUTE_ARRIVALS`
  arrivals, the CV of the gaps between its consecutive arrivals (gaps that cross a minute's
  edge belong to neither); minutes whose gaps are all 0 are left out. Summarised by the
  median and the maximum over those minutes: whether arrivals are bursty within a minute, not
  only from one minute to the next.
- Repeated prompt blocks (traces with `hash_ids`): the prompt blocks are all rows' hash ids;
  one repeats when its id appeared in an earlier row (file order). The share that repeat is
  what a prefix cache that kept every block could reuse, an upper bound on its hit rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from slidingserve.workloads.trace_files import HashIds, TimedTrace

CONTEXT_LENGTHS = (4096, 8192, 32768)
"""Tokens: the context lengths whose share of longer prompts is reported."""
MIN_MINUTE_ARRIVALS = 3
"""A minute's gaps have a CV only with at least this many arrivals (two gaps)."""


@dataclass(frozen=True, slots=True)
class LengthStats:
    """One length (prompt or output) over a trace's rows, tokens."""

    mean: float
    p50: float  # quantiles interpolate linearly (module docstring)
    p90: float
    p99: float
    max: int

    @classmethod
    def of(cls, tokens: npt.NDArray[np.int64]) -> LengthStats:
        p50, p90, p99 = np.percentile(tokens, [50, 90, 99])
        return cls(float(tokens.mean()), float(p50), float(p90), float(p99), int(tokens.max()))


@dataclass(frozen=True, slots=True)
class ArrivalStats:
    """How a trace's requests arrive (definitions in the module docstring)."""

    duration: float  # seconds from the first arrival to the last
    mean_rate: float | None  # req/s, (rows − 1) ÷ duration; None when duration is 0
    gap_cv: float | None  # CV of all gaps; None with no gap or only gaps of 0
    second_count_cv: float  # CV of the arrivals per second
    busiest_second: int  # arrivals in the fullest second
    busiest_minute: int  # arrivals in the fullest minute
    minutes_with_gap_cv: int  # minutes with ≥ MIN_MINUTE_ARRIVALS arrivals and some gap > 0
    minute_gap_cv_median: float | None  # over those minutes; None when there is none
    minute_gap_cv_max: float | None


@dataclass(frozen=True, slots=True)
class BlockStats:
    """A trace's prompt blocks by hash id (module docstring)."""

    blocks: int  # hash ids over all rows
    repeated: int  # those whose id appeared in an earlier row
    repeat_share: float  # repeated ÷ blocks; 0 without blocks

    @classmethod
    def of(cls, hash_ids: HashIds) -> BlockStats:
        seen: set[int] = set()
        blocks = repeated = 0
        for row in hash_ids:
            blocks += len(row)
            repeated += sum(1 for block in row if block in seen)
            seen.update(row)
        return cls(blocks, repeated, repeated / blocks if blocks else 0.0)


@dataclass(frozen=True)
class TraceStats:
    """A trace described: its rows, lengths and arrivals."""

    source: str  # the file, for reports
    rows: int  # requests
    prompt: LengthStats  # prompt tokens
    output: LengthStats  # output tokens
    prompt_share_over: dict[int, float]  # context length (tokens) → share of longer prompts
    arrivals: ArrivalStats | None  # None when the trace records no arrival times
    blocks: BlockStats | None = None  # None when the trace records no hash_ids


def trace_stats(trace: TimedTrace, contexts: tuple[int, ...] = CONTEXT_LENGTHS) -> TraceStats:
    """Describe `trace` (at least one row); `contexts` in tokens."""
    prompt = trace.lengths.prompt
    return TraceStats(
        source=trace.source,
        rows=len(trace),
        prompt=LengthStats.of(prompt),
        output=LengthStats.of(trace.lengths.output),
        prompt_share_over={c: float(np.count_nonzero(prompt > c)) / len(prompt) for c in contexts},
        arrivals=None if trace.arrivals is None else arrival_stats(trace),
        blocks=None if trace.hash_ids is None else BlockStats.of(trace.hash_ids),
    )


def arrival_stats(trace: TimedTrace) -> ArrivalStats:
    """The arrival figures of a trace that has arrival times."""
    assert trace.arrivals is not None
    arrivals = trace.arrivals
    per_second = counts_per(arrivals, 1.0)
    minute_cvs = minute_gap_cvs(arrivals)
    return ArrivalStats(
        duration=trace.duration,
        mean_rate=trace.mean_rate if trace.duration > 0 else None,
        gap_cv=cv(np.diff(arrivals)),
        second_count_cv=cv(per_second) or 0.0,  # the mean count is > 0: never None
        busiest_second=int(per_second.max()),
        busiest_minute=int(counts_per(arrivals, 60.0).max()),
        minutes_with_gap_cv=len(minute_cvs),
        minute_gap_cv_median=float(np.median(minute_cvs)) if minute_cvs else None,
        minute_gap_cv_max=max(minute_cvs) if minute_cvs else None,
    )


def cv(values: npt.ArrayLike) -> float | None:
    """Standard deviation (ddof = 0) ÷ mean; None for no values or a mean of 0."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0 or array.mean() == 0:
        return None
    return float(array.std() / array.mean())


def counts_per(arrivals: npt.NDArray[np.float64], width: float) -> npt.NDArray[np.int64]:
    """Arrivals in each interval [k·width, (k + 1)·width) up to the last arrival's, seconds
    from the first arrival (which is at 0)."""
    return np.bincount(np.floor(arrivals / width).astype(np.int64))


def minute_gap_cvs(arrivals: npt.NDArray[np.float64]) -> list[float]:
    """The gap CV of each minute with enough arrivals and some gap > 0, in time order."""
    minutes = np.floor(arrivals / 60.0).astype(np.int64)
    starts = np.flatnonzero(np.diff(minutes)) + 1  # where a new minute begins
    found = []
    for group in np.split(arrivals, starts):
        if len(group) >= MIN_MINUTE_ARRIVALS and (value := cv(np.diff(group))) is not None:
            found.append(value)
    return found
