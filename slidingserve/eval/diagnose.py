"""Where goodput goes: why each violating request of one simulated run missed its SLO.

A request violates when one of its tokens is late under the run's TBT reading
(`Timeline.verdict`). For such a request, with

- a its arrival, L its TTFT SLO, p its prompt length,
- s the start of the first iteration that ran a chunk of it (`RequestTrace.first_chunk`),
- k the index of its first late token under the reading (`Timeline.first_late_token`: 0 is
  the first token; later ones are late past eq. 1 when read cumulatively, or after a gap
  over L_tbt when read per gap) and t_k the time that token came out,
- ρ* the engine's best prefill rate (`best_prefill_rate`: the most prompt tokens per second
  a prefill-only iteration from an empty cache reaches at any chunk size up to the token
  budget, noise-free), so that p / ρ* is a lower bound on the time of its prefill,

the cause is the first of these that holds (the order is the precedence):

1. `preempted`: the engine dropped its KV cache (recompute preemption) before t_k;
2. `relegated`: the policy relegated it (QoServe's eager relegation, any policy that is
   `ReportsRelegations`) before t_k;
3. `queueing`: its first token was late (k = 0) and its first chunk started so late that
   even a prefill at ρ* could not have made the deadline: s + p / ρ* > a + L;
4. `slow-prefill`: its first token was late although its first chunk started in time
   (s + p / ρ* ≤ a + L): once started, its prefill progressed too slowly;
5. `decode-stall`: its first token was on time and a later one was late (k ≥ 1).

Causes 3 to 5 split every request that 1 and 2 leave by k = 0 or not and by the start test,
so each violating request has exactly one cause and the counts add up to the run's
violating requests. A preemption or relegation after t_k did not make the request late and
does not count.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from slidingserve.core.batch import BatchShape
from slidingserve.metrics import TbtReading, Timeline
from slidingserve.reporting import format_table
from slidingserve.sim.hardware import GroundTruthLatency
from slidingserve.sim.runner import simulate_recorded

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import numpy.typing as npt

    from slidingserve.core.request import Request
    from slidingserve.sim.engine import IterationLog
    from slidingserve.sim.runner import SimulationResult, SimulationSpec
    from slidingserve.sim.tracing import RequestTrace


class Cause(enum.Enum):
    """Why a request missed its SLO; declared in order of precedence (module docstring)."""

    REFUSED = "refused"
    PREEMPTED = "preempted"
    RELEGATED = "relegated"
    QUEUEING = "queueing"
    SLOW_PREFILL = "slow-prefill"
    DECODE_STALL = "decode-stall"

    @property
    def key(self) -> str:
        """Its column name in CSV and JSON rows (snake case)."""
        return self.value.replace("-", "_")


MEANINGS = {
    Cause.REFUSED: "refused at admission, no token (admission control)",
    Cause.PREEMPTED: "lost its KV cache before its first late token",
    Cause.RELEGATED: "relegated by the policy before its first late token",
    Cause.QUEUEING: "first chunk too late for even a prefill at ρ*",
    Cause.SLOW_PREFILL: "first chunk in time, first token late",
    Cause.DECODE_STALL: "first token on time, a later one late",
}
"""What each cause means, in a few words (the module docstring defines them)."""


@dataclass(frozen=True, slots=True)
class Violation:
    """One violating request and its cause."""

    request_id: str
    arrival: float  # seconds
    cause: Cause
    first_late_token: int  # index under the run's TBT reading (0: the first token)
    wait: float  # seconds from arrival to the start of its first chunk
    prefill: float  # seconds from the start of its first chunk to its first token
    preemptions: int  # times it lost its KV cache, over the whole run
    relegated: bool  # relegated by the policy at some point


def best_prefill_rate(time: Callable[[BatchShape], float], max_tokens: int) -> float:
    """ρ*, prompt tokens per second: the best rate of a prefill-only iteration from an empty
    cache over chunk sizes 1..`max_tokens`; `time` gives an iteration's noise-free seconds."""
    return max(c / time(BatchShape((), ((c, 0),))) for c in range(1, max_tokens + 1))


def cause_of(
    request: Request, trace: RequestTrace, reading: TbtReading, best_rate: float
) -> Violation | None:
    """The cause of `request`'s violation under `reading` (module docstring), None if it
    met its SLO; `best_rate` is ρ* (tokens/s). The request must have finished and `trace`
    must come from the same run."""
    late = Timeline.of_request(request).first_late_token(reading)
    if late is None:
        return None
    if request.refused:
        return Violation(
            request.request_id, request.arrival, Cause.REFUSED, 0, math.nan, math.nan, 0, False
        )
    start = _first_chunk(request, trace)
    return Violation(
        request.request_id,
        request.arrival,
        _first_cause(request, trace, late, best_rate),
        late,
        start - request.arrival,
        request.token_times[0] - start,
        len(trace.preemptions),
        trace.relegated is not None,
    )


def _first_cause(request: Request, trace: RequestTrace, late: int, best_rate: float) -> Cause:
    """The first cause that holds, in order of precedence, for `request` whose first late
    token is token `late`."""
    late_at = request.token_times[late]
    if any(time < late_at for time in trace.preemptions):
        return Cause.PREEMPTED
    if trace.relegated is not None and trace.relegated < late_at:
        return Cause.RELEGATED
    if late > 0:
        return Cause.DECODE_STALL
    least_prefill = request.prompt_len / best_rate
    if _first_chunk(request, trace) + least_prefill > request.ttft_deadline:
        return Cause.QUEUEING
    return Cause.SLOW_PREFILL


@dataclass(frozen=True)
class Diagnosis:
    """One policy's run, every violating request with its cause, and what explains them."""

    result: SimulationResult
    iterations: list[IterationLog]  # every iteration of the run, in order
    violations: list[Violation]  # by arrival
    waits: npt.NDArray[np.float64]  # every request's wait before its first chunk, seconds
    prefills: npt.NDArray[np.float64]  # every request's first chunk to first token, seconds
    best_rate: float  # ρ*, tokens per second
    preempted: tuple[int, ...] = ()  # requests preempted k times at index k (k = 0, 1, …)
    preemption_times: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    # every preemption of the run (the start of the iteration that dropped a KV cache), s

    @property
    def policy(self) -> str:
        return self.result.policy

    @property
    def counts(self) -> dict[Cause, int]:
        """Violating requests per cause, every cause present (in precedence order)."""
        found = Counter(v.cause for v in self.violations)
        return {cause: found[cause] for cause in Cause}

    def row(self) -> dict[str, Any]:
        """A flat dict for tables and CSV files: counts, shares of the violating requests,
        medians in milliseconds."""
        result, violating = self.result, len(self.violations)
        row: dict[str, Any] = {
            "policy": result.policy,
            "workload": result.workload,
            "rate": result.rate,
            "seed": result.seed,
            "tbt_reading": result.tbt_reading.value,
            "requests": result.metrics.requests,
            "violating": violating,
            "violation_rate": result.violations.overall,
        }
        for cause, count in self.counts.items():
            row[cause.key] = count
            row[f"{cause.key}_share"] = count / violating if violating else math.nan
        wait_v = [v.wait for v in self.violations]
        prefill_v = [v.prefill for v in self.violations]
        row.update(
            wait_p50_ms=_median_ms(self.waits),
            wait_p50_violating_ms=_median_ms(wait_v),
            prefill_p50_ms=_median_ms(self.prefills),
            prefill_p50_violating_ms=_median_ms(prefill_v),
            gap_p99_ms=1000 * result.metrics.itl.p99,
            preemptions=result.num_preemptions,
            best_prefill_rate_tps=self.best_rate,
            prefix_hit_rate=result.prefix_hit_rate,
        )
        *exact, more = PREEMPTION_COLUMNS
        counts = list(self.preempted) + [0] * len(exact)
        row.update(zip(exact, counts, strict=False))
        row[more] = sum(self.preempted[len(exact) :])
        row.update(self.occupancy().row())
        return row

    def occupancy(self) -> Occupancy:
        """The KV cache's use over the run (iterations weighted by their time)."""
        return Occupancy.of(self.iterations)


PREEMPTION_COLUMNS = ("preempted_0", "preempted_1", "preempted_2", "preempted_3_plus")
"""Requests preempted 0, 1, 2 and 3 or more times: columns of a diagnosis row."""

FULL = 0.95
"""The share of the KV blocks in use from which the cache counts as full (`Occupancy`)."""


@dataclass(frozen=True, slots=True)
class Occupancy:
    """How full the KV cache was: shares of its blocks in use while iterations ran, each
    iteration weighted by its time (idle time left out)."""

    mean: float  # time-weighted mean share in use
    peak: float  # largest share in use
    full: float  # share of the busy time with at least FULL of the blocks in use
    # time-weighted mean share held by started, unfinished prefills (the part of `mean`
    # that emits nothing yet: `IterationLog.kv_prefilling`)
    prefilling: float = math.nan

    @classmethod
    def of(cls, iterations: Sequence[IterationLog]) -> Occupancy:
        if not iterations or not iterations[0].kv_total:
            return cls(math.nan, math.nan, math.nan)
        used = np.array([log.kv_used / log.kv_total for log in iterations])
        weights = np.array([log.duration for log in iterations])
        busy = float(weights.sum())
        if busy <= 0:
            return cls(math.nan, float(used.max()), math.nan)
        prefilling = np.array([log.kv_prefilling / log.kv_total for log in iterations])
        mean = float(used @ weights) / busy
        full = float(weights[used >= FULL].sum()) / busy
        return cls(mean, float(used.max()), full, float(prefilling @ weights) / busy)

    def row(self) -> dict[str, float]:
        return {
            "kv_used_mean": self.mean,
            "kv_used_peak": self.peak,
            "kv_full_share": self.full,
            "kv_prefilling_mean": self.prefilling,
        }


def diagnose(spec: SimulationSpec, rate: float, seed: int) -> Diagnosis:
    """Simulate `spec` at `rate` req/s with `seed`, recording, and find every violating
    request's cause under the spec's TBT reading."""
    result, run = simulate_recorded(spec, rate, seed)
    latency = GroundTruthLatency(spec.hardware)
    best = best_prefill_rate(latency.expected_time, spec.limits.max_num_batched_tokens)
    return diagnose_run(result, run.requests, run.traces, run.iterations, best)


def diagnose_run(
    result: SimulationResult,
    requests: Sequence[Request],
    traces: Mapping[str, RequestTrace],
    iterations: list[IterationLog],
    best_rate: float,
) -> Diagnosis:
    """The diagnosis of a recorded run: `requests` finished, `traces` by request id."""
    ordered = sorted(requests, key=lambda r: r.arrival)
    violations = attribute(ordered, traces, result.tbt_reading, best_rate)
    served = [r for r in ordered if not r.refused]
    starts = np.array([_first_chunk(r, traces[r.request_id]) for r in served])
    firsts = np.array([r.token_times[0] for r in served])
    arrivals = np.array([r.arrival for r in served])
    counts = [len(traces[r.request_id].preemptions) for r in ordered]
    times = sorted(t for r in ordered for t in traces[r.request_id].preemptions)
    return Diagnosis(
        result,
        iterations,
        violations,
        starts - arrivals,
        firsts - starts,
        best_rate,
        tuple(np.bincount(np.array(counts, dtype=np.int64), minlength=1).tolist()),
        np.array(times, dtype=np.float64),
    )


def attribute(
    requests: Sequence[Request],
    traces: Mapping[str, RequestTrace],
    reading: TbtReading,
    best_rate: float,
) -> list[Violation]:
    """Every violating request of `requests` (finished, in their order) under `reading`,
    with its cause; `traces` by request id, `best_rate` ρ* in tokens/s."""
    missing = [r.request_id for r in requests if r.request_id not in traces]
    if missing:
        raise ValueError(f"no trace of request {missing[0]}: simulate the run recorded")
    found = (cause_of(r, traces[r.request_id], reading, best_rate) for r in requests)
    return [violation for violation in found if violation is not None]


def _first_chunk(request: Request, trace: RequestTrace) -> float:
    if trace.first_chunk is None:
        raise ValueError(f"request {request.request_id} has no recorded first chunk")
    return trace.first_chunk


def _median_ms(values: Sequence[float] | npt.NDArray[np.float64]) -> float:
    """Median in ms of the values that are numbers (a refused request has no wait)."""
    known = [v for v in values if not math.isnan(v)]
    return 1000 * float(np.median(known)) if known else math.nan


def diagnosis_table(diagnoses: Sequence[Diagnosis]) -> str:
    """Per policy: requests, violating, each cause's count and share of the violating
    requests, median wait and prefill (all requests / violating ones), the p99 gap, the
    requests preempted 0/1/2/3+ times and the KV cache's use (time-weighted mean / peak,
    the share of the time it was full, and the mean share held by started, unfinished
    prefills), and the prefix cache's hit rate where a run had one."""
    cached = any(d.result.prefix_hit_rate is not None for d in diagnoses)
    header = ["policy", "requests", "violating", *(cause.value for cause in Cause)]
    header += ["wait p50 ms", "prefill p50 ms", "gap p99 ms", "preempted 0/1/2/3+"]
    header += ["KV mean/peak (full), prefills", *(["prefix hits"] if cached else [])]
    rows = []
    for diagnosis in diagnoses:
        row = diagnosis.row()
        violating = row["violating"]
        cells = [
            diagnosis.policy,
            str(row["requests"]),
            f"{violating} ({row['violation_rate']:.1%})",
        ]
        cells += [_count_cell(row[c.key], row[f"{c.key}_share"]) for c in Cause]
        cells += [
            f"{_ms(row['wait_p50_ms'])} / {_ms(row['wait_p50_violating_ms'])}",
            f"{_ms(row['prefill_p50_ms'])} / {_ms(row['prefill_p50_violating_ms'])}",
            _ms(row["gap_p99_ms"]),
            "/".join(str(row[key]) for key in PREEMPTION_COLUMNS),
            _occupancy_cell(diagnosis.occupancy()),
        ]
        if cached:
            hits = row["prefix_hit_rate"]
            cells.append("off" if hits is None else f"{hits:.0%}")
        rows.append(cells)
    return format_table(header, rows)


def _occupancy_cell(occupancy: Occupancy) -> str:
    if math.isnan(occupancy.mean):
        return "-"
    return (
        f"{occupancy.mean:.0%}/{occupancy.peak:.0%} ({occupancy.full:.0%}), "
        f"{occupancy.prefilling:.0%}"
    )


def _count_cell(count: int, share: float) -> str:
    return f"{count} ({share:.0%})" if count else "0"


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f}"


def describe(diagnoses: Sequence[Diagnosis]) -> str:
    """One line: what was run, and how violations were read."""
    first = diagnoses[0].result
    return (
        f"{first.workload} at {first.rate:g} req/s, seed {first.seed}, "
        f"{first.metrics.requests} requests; TBT read {first.tbt_reading.value}; "
        f"ρ* = {diagnoses[0].best_rate:,.0f} prompt tokens/s"
    )


def diagnosis_payload(diagnoses: Sequence[Diagnosis]) -> dict[str, Any]:
    """What the JSON file holds: the setup, each policy's row and every violating request."""
    return {
        "setup": describe(diagnoses),
        "causes": [cause.value for cause in Cause],
        "policies": [
            {
                **d.row(),
                "preempted_requests_by_count": list(d.preempted),
                "violations": [_violation_dict(v) for v in d.violations],
            }
            for d in diagnoses
        ],
    }


def _violation_dict(violation: Violation) -> dict[str, Any]:
    return {
        "request_id": violation.request_id,
        "arrival_s": violation.arrival,
        "cause": violation.cause.value,
        "first_late_token": violation.first_late_token,
        "wait_ms": 1000 * violation.wait,
        "prefill_ms": 1000 * violation.prefill,
        "preemptions": violation.preemptions,
        "relegated": violation.relegated,
    }
