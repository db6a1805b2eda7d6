"""Latency metrics and SLO violations of a finished run.

Definitions follow vLLM's benchmark where it has one: TTFT is first token minus arrival,
TPOT is (e2e − TTFT) / (output tokens − 1) per request, ITL/TBT is every gap between
consecutive tokens. SLO violations use the project's per-token deadlines (SPEC §1), read
either cumulatively (eq. 1, the scheduler's reading) or per gap.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.request import Request


class TbtReading(enum.Enum):
    CUMULATIVE = "cumulative"  # token k+1 late if after a + L_ttft + k·L_tbt
    PER_GAP = "per-gap"  # a later token late if its gap to the previous one exceeds L_tbt


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Distribution summary of one latency, seconds."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: np.ndarray) -> Percentiles:
        if values.size == 0:
            return cls(float("nan"), float("nan"), float("nan"), float("nan"))
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return cls(float(values.mean()), float(p50), float(p90), float(p99))


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """Everything a report needs about one run."""

    num_requests: int
    duration: float  # seconds from the first arrival to the last token
    request_throughput: float  # finished requests per second
    output_throughput: float  # output tokens per second
    ttft: Percentiles  # seconds
    tbt: Percentiles  # seconds, every gap between consecutive tokens (vLLM's ITL)
    tpot: Percentiles  # seconds, per request (requests with ≥ 2 tokens)
    e2e: Percentiles  # seconds, arrival to last token
    violation_rate: float  # fraction of requests with any late token
    ttft_violation_rate: float  # fraction whose first token was late
    tbt_violation_rate: float  # fraction with a later token late
    tbt_reading: str  # how TBT violations were counted in the three rates above
    cumulative_violation_rate: float  # any late token, TBT read cumulatively (eq. 1)
    per_gap_violation_rate: float  # any late token, TBT read per gap (what a user sees)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _TokenTable:
    """All token times of a run, flattened, with per-request offsets."""

    times: np.ndarray  # emission time of every token, request by request
    starts: np.ndarray  # index in `times` of each request's first token
    counts: np.ndarray  # tokens per request
    arrival: np.ndarray
    ttft_slo: np.ndarray
    tbt_slo: np.ndarray


def compute_metrics(
    requests: Sequence[Request], tbt_reading: TbtReading = TbtReading.CUMULATIVE
) -> RunMetrics:
    """Metrics of finished requests (each must have emitted at least one token)."""
    if not requests:
        raise ValueError("no requests to measure")
    table = _token_table(requests)
    first = table.times[table.starts]
    last = table.times[table.starts + table.counts - 1]
    ttft = first - table.arrival
    e2e = last - table.arrival
    multi = table.counts > 1
    tpot = (e2e[multi] - ttft[multi]) / (table.counts[multi] - 1)
    gaps = _gaps(table)
    ttft_late = first > table.arrival + table.ttft_slo
    late_by_reading = {reading: _tbt_late(table, reading) for reading in TbtReading}
    tbt_late = late_by_reading[tbt_reading]
    duration = float(last.max() - table.arrival.min())
    return RunMetrics(
        num_requests=len(requests),
        duration=duration,
        request_throughput=len(requests) / duration if duration > 0 else float("nan"),
        output_throughput=float(table.counts.sum()) / duration if duration > 0 else float("nan"),
        ttft=Percentiles.of(ttft),
        tbt=Percentiles.of(gaps),
        tpot=Percentiles.of(tpot),
        e2e=Percentiles.of(e2e),
        violation_rate=float(np.mean(ttft_late | tbt_late)),
        ttft_violation_rate=float(np.mean(ttft_late)),
        tbt_violation_rate=float(np.mean(tbt_late)),
        tbt_reading=tbt_reading.value,
        cumulative_violation_rate=float(
            np.mean(ttft_late | late_by_reading[TbtReading.CUMULATIVE])
        ),
        per_gap_violation_rate=float(np.mean(ttft_late | late_by_reading[TbtReading.PER_GAP])),
    )


def _token_table(requests: Sequence[Request]) -> _TokenTable:
    counts = np.fromiter((len(r.token_times) for r in requests), np.int64, len(requests))
    if (counts == 0).any():
        missing = next(r.request_id for r in requests if not r.token_times)
        raise ValueError(f"request {missing} emitted no token: the run did not finish")
    times = np.fromiter((t for r in requests for t in r.token_times), np.float64, int(counts.sum()))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return _TokenTable(
        times=times,
        starts=starts,
        counts=counts,
        arrival=np.array([r.arrival for r in requests]),
        ttft_slo=np.array([r.slo.ttft for r in requests]),
        tbt_slo=np.array([r.slo.tbt for r in requests]),
    )


def _gaps(table: _TokenTable) -> np.ndarray:
    """Every gap between consecutive tokens of the same request."""
    diffs = np.diff(table.times)
    not_first = np.ones(table.times.size, dtype=bool)
    not_first[table.starts] = False
    gaps: np.ndarray = diffs[not_first[1:]]
    return gaps


def _tbt_late(table: _TokenTable, reading: TbtReading) -> np.ndarray:
    """Per request: whether any token after the first missed its TBT target."""
    owner = np.repeat(np.arange(table.counts.size), table.counts)
    index = np.arange(table.times.size) - table.starts[owner]  # k of token k+1
    if reading is TbtReading.CUMULATIVE:
        deadline = table.arrival[owner] + table.ttft_slo[owner] + index * table.tbt_slo[owner]
        late = table.times > deadline
    else:
        late = np.zeros(table.times.size, dtype=bool)
        late[1:] = np.diff(table.times) > table.tbt_slo[owner[1:]]
    late[table.starts] = False  # the first token is TTFT's business
    return np.logical_or.reduceat(late, table.starts)


def metrics_by_tier(
    requests: Sequence[Request], tbt_reading: TbtReading = TbtReading.CUMULATIVE
) -> dict[str, RunMetrics]:
    """Metrics of each SLO tier (requests without a tier are left out), by tier name."""
    tiers: dict[str, list[Request]] = {}
    for request in requests:
        if request.slo.tier is not None:
            tiers.setdefault(request.slo.tier, []).append(request)
    return {name: compute_metrics(members, tbt_reading) for name, members in sorted(tiers.items())}
