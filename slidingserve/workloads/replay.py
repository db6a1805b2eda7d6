"""Workloads from trace files: their lengths resampled, or their requests replayed.

`--trace FILE[:CLASS[:WEIGHT]]` makes a workload of one or more trace files (`TraceSource`),
each with the SLO class of its requests and, for a mix, its share. Under Poisson or gamma
arrivals the files' rows are resampled like the built-in traces. Under `--arrival trace` the
requests are replayed: the files' rows merged in time order (ties keep file order), a
contiguous window of `num_requests` rows taken from row `trace_start + seed × num_requests`
(so seeds are consecutive windows), each request with its own lengths and its own arrival
time, the window's times scaled so that its mean rate is the requested one. The window does
not depend on the rate: a goodput search over the rate keeps the trace's burst shape and
sees the same requests at every rate (common random numbers).

Some traces record time coarsely: Mooncake's timestamps step by 3 s, about ten requests on
each. Replayed as they are, every step is a burst of simultaneous requests at any rate.
`spread=True` reads such a timestamp as the recording's resolution: the k requests that share
one are spaced evenly over the interval to the next distinct timestamp (the last group over
the median interval), which keeps each interval's count and the mean rate.

A replayed request keeps its row's `hash_ids` (Mooncake's prompt blocks, trace_files.py), so
a prefix cache sees which replayed prompts share blocks. Resampled rows carry none: a row
drawn twice would share every block with itself and fake cache hits.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from slidingserve.workloads.slo import CONVERSATIONAL, WORKLOAD_CLASSES
from slidingserve.workloads.trace_files import HashIds, TimedTrace, TraceColumns, read_trace_file

TRACE_WORKLOAD = "trace"
"""The name of the workload that `--trace` files make."""


@dataclass(frozen=True, slots=True)
class TraceSource:
    """One trace file of a workload, the SLO class of its requests and its share of a mix."""

    path: str
    workload_class: str = CONVERSATIONAL
    weight: float = 1.0
    columns: TraceColumns | None = None

    def __post_init__(self) -> None:
        if self.workload_class not in WORKLOAD_CLASSES:
            raise ValueError(
                f"trace {self.path}: unknown class {self.workload_class!r}; "
                f"known: {', '.join(WORKLOAD_CLASSES)}"
            )
        if not self.weight > 0:
            raise ValueError(f"trace {self.path}: weight must be positive, got {self.weight}")

    @classmethod
    def parse(cls, text: str, columns: TraceColumns | None = None) -> TraceSource:
        """`FILE`, `FILE:CLASS` or `FILE:CLASS:WEIGHT` (the file may itself hold colons)."""
        parts = text.split(":")
        weight = 1.0
        workload_class = CONVERSATIONAL
        if len(parts) >= 3 and parts[-2] in WORKLOAD_CLASSES:
            try:
                weight = float(parts[-1])
            except ValueError:
                raise ValueError(
                    f"--trace {text!r}: weight {parts[-1]!r} is not a number"
                ) from None
            workload_class, parts = parts[-2], parts[:-2]
        elif len(parts) >= 2 and parts[-1] in WORKLOAD_CLASSES:
            workload_class, parts = parts[-1], parts[:-1]
        path = ":".join(parts)
        if not path:
            raise ValueError(f"--trace {text!r}: no file")
        return cls(path, workload_class, weight, columns)

    @property
    def label(self) -> str:
        return Path(self.path).name


@lru_cache(maxsize=16)
def load_trace(path: str, columns: TraceColumns | None) -> TimedTrace:
    """A trace file, read once per process."""
    return read_trace_file(path, columns)


class Replay(NamedTuple):
    """A window of a replayed trace: arrivals at the requested rate, lengths, sources."""

    arrivals: npt.NDArray[np.float64]  # seconds from the window's first request
    prompt: npt.NDArray[np.int64]
    output: npt.NDArray[np.int64]
    source_index: npt.NDArray[np.intp]  # which TraceSource each request comes from
    recorded_rate: float  # the window's own mean rate, requests/s
    # each request's prompt block ids (an empty tuple for a row of a file without them);
    # None when no file has them
    hash_ids: HashIds | None = None


def spread_ties(times: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Sorted `times` with each group of equal values spaced evenly up to the next distinct
    value (module docstring)."""
    distinct, first, counts = np.unique(times, return_index=True, return_counts=True)
    if len(distinct) == len(times):
        return times
    gaps = np.diff(distinct)
    last_gap = float(np.median(gaps)) if len(gaps) else 0.0
    widths = np.append(gaps, last_gap)
    group = np.repeat(np.arange(len(distinct)), counts)
    rank = np.arange(len(times)) - first[group]
    spread: npt.NDArray[np.float64] = times + rank * (widths / counts)[group]
    return spread


def replay_window(
    sources: tuple[TraceSource, ...],
    start: int,
    count: int,
    rate: float | None,
    spread: bool = False,
) -> Replay:
    """Rows `start` .. `start + count − 1` of the sources merged in time order; times scaled
    to mean `rate` (None: as recorded); `spread`: equal timestamps spaced (module docstring)."""
    traces = [load_trace(source.path, source.columns) for source in sources]
    for source, trace in zip(sources, traces, strict=True):
        if trace.arrivals is None:
            raise ValueError(
                f"{source.path}: no arrival times (an `arrived_at` or `timestamp` column, "
                "or time=COLUMN) to replay; use poisson or gamma arrivals to resample it"
            )
    raw = np.concatenate([trace.arrivals for trace in traces if trace.arrivals is not None])
    prompt = np.concatenate([trace.lengths.prompt for trace in traces])
    output = np.concatenate([trace.lengths.output for trace in traces])
    index = np.concatenate([np.full(len(t), k, dtype=np.intp) for k, t in enumerate(traces)])
    order = np.argsort(raw, kind="stable")  # merged in time; a tie keeps file order
    times = spread_ties(raw[order]) if spread else raw[order]
    if start < 0 or count < 1:
        raise ValueError(f"a trace window needs start >= 0 and count >= 1, got {start}, {count}")
    if start + count > len(order):
        names = ", ".join(source.label for source in sources)
        raise ValueError(
            f"{names}: {count} requests from row {start} need {start + count} rows; the "
            f"trace has {len(order)} (fewer --requests, an earlier --trace-start, fewer seeds)"
        )
    rows = order[start : start + count]
    window = times[start : start + count] - times[start]
    duration = float(window[-1])
    if count > 1 and duration <= 0:
        raise ValueError(f"the {count} requests from row {start} all arrive at one instant")
    recorded = (count - 1) / duration if count > 1 else 1.0
    scale = 1.0 if rate is None else recorded / rate
    hash_ids = _window_hash_ids(traces, rows.tolist())
    return Replay(window * scale, prompt[rows], output[rows], index[rows], recorded, hash_ids)


def _window_hash_ids(traces: list[TimedTrace], rows: list[int]) -> HashIds | None:
    """The hash ids of `rows` (indices into the traces' rows concatenated); None when no
    trace has any."""
    if all(trace.hash_ids is None for trace in traces):
        return None
    merged = [ids for trace in traces for ids in (trace.hash_ids or ((),) * len(trace))]
    return tuple(merged[row] for row in rows)
