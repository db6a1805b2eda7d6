"""The figures of a group of request timelines: latencies, SLO violations, goodput.

Latencies (vLLM's, see `timeline`) and throughputs cover completed requests, as vLLM's do.
SLO violations are fractions of the *judged* requests: completed and failed ones (a failed
request violates, see `Timeline.verdict`); cancelled ones are left out. Both TBT readings are
always counted. Goodput, the project's: completed requests that met every deadline, per
second; vLLM's (`--goodput`): completed requests with TTFT ≤ L_ttft and TPOT ≤ L_tbt.
Everything is in seconds; reports convert.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from slidingserve.metrics.timeline import Outcome, TbtReading, Timeline, Verdict


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Distribution of one latency, seconds (NaN without samples)."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: npt.ArrayLike) -> Percentiles:
        samples = np.asarray(values, dtype=np.float64)
        if samples.size == 0:
            return cls(math.nan, math.nan, math.nan, math.nan)
        p50, p90, p99 = np.percentile(samples, [50, 90, 99])
        return cls(float(samples.mean()), float(p50), float(p90), float(p99))

    def in_ms(self) -> dict[str, float]:
        """The four figures in milliseconds, for reports."""
        return {name: 1000 * getattr(self, name) for name in ("mean", "p50", "p90", "p99")}


@dataclass(frozen=True, slots=True)
class ViolationRates:
    """Violating fractions of the judged requests under one TBT reading (NaN when none was
    judged)."""

    judged: int  # completed + failed requests
    overall: float  # any deadline missed
    ttft: float  # the first token's deadline missed
    tbt: float  # a later token's deadline missed

    @classmethod
    def of(cls, verdicts: Sequence[Verdict], reading: TbtReading) -> ViolationRates:
        if not verdicts:
            return cls(0, math.nan, math.nan, math.nan)
        ttft = np.array([v.ttft for v in verdicts])
        tbt = np.array([v.tbt_late(reading) for v in verdicts])
        return cls(len(verdicts), float(np.mean(ttft | tbt)), float(ttft.mean()), float(tbt.mean()))


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """Everything a report needs about a group of requests (a run, or one SLO tier of it)."""

    completed: int  # every asked-for token arrived
    failed: int  # ended by an error
    cancelled: int  # still running when the run was stopped
    duration: float  # seconds the throughputs and goodputs are per
    request_throughput: float  # completed requests per second
    output_throughput: float  # output tokens of completed requests per second
    ttft: Percentiles  # seconds, completed requests
    tpot: Percentiles  # seconds, completed requests with ≥ 2 tokens
    itl: Percentiles  # seconds, every gap between chunks (vLLM's ITL; the simulator's TBT)
    e2e: Percentiles  # seconds, completed requests
    cumulative: ViolationRates  # TBT read cumulatively (eq. 1), the scheduler's reading
    per_gap: ViolationRates  # TBT read per gap, what a user sees
    goodput: float  # completed requests meeting every cumulative deadline, per second
    goodput_per_gap: float  # the same under the per-gap reading
    goodput_vllm: float  # vLLM's --goodput: TTFT ≤ L_ttft and TPOT ≤ L_tbt, per second

    @property
    def requests(self) -> int:
        """Every request measured."""
        return self.completed + self.failed + self.cancelled

    def violations(self, reading: TbtReading) -> ViolationRates:
        """The violations under `reading`."""
        return self.cumulative if reading is TbtReading.CUMULATIVE else self.per_gap


def measure(timelines: Sequence[Timeline], duration: float) -> RunMetrics:
    """The figures of `timelines`, rates per second of `duration`."""
    readings = [timeline.read() for timeline in timelines]
    outcomes = Counter(r.outcome for r in readings)
    done = [r for r in readings if r.outcome is Outcome.COMPLETED]
    verdicts = [r.verdict for r in readings if r.verdict is not None]
    done_verdicts = [r.verdict for r in done if r.verdict is not None]

    def per_second(count: float) -> float:
        return count / duration if duration > 0 else math.nan

    return RunMetrics(
        completed=outcomes[Outcome.COMPLETED],
        failed=outcomes[Outcome.FAILED],
        cancelled=outcomes[Outcome.CANCELLED],
        duration=duration,
        request_throughput=per_second(len(done)),
        output_throughput=per_second(sum(r.tokens for r in done)),
        ttft=Percentiles.of([r.ttft for r in done if r.ttft is not None]),
        tpot=Percentiles.of([r.tpot for r in done if r.tpot is not None]),
        itl=Percentiles.of(np.concatenate([np.empty(0), *(r.itl for r in done)])),
        e2e=Percentiles.of([r.e2e for r in done if r.e2e is not None]),
        cumulative=ViolationRates.of(verdicts, TbtReading.CUMULATIVE),
        per_gap=ViolationRates.of(verdicts, TbtReading.PER_GAP),
        goodput=per_second(sum(not v.cumulative for v in done_verdicts)),
        goodput_per_gap=per_second(sum(not v.per_gap for v in done_verdicts)),
        goodput_vllm=per_second(sum(r.meets_vllm_goodput for r in done)),
    )


def measure_tiers(timelines: Sequence[Timeline], duration: float) -> dict[str, RunMetrics]:
    """`measure` of each SLO tier, by tier name (requests without a tier are left out)."""
    tiers: dict[str, list[Timeline]] = {}
    for timeline in timelines:
        if timeline.slo.tier is not None:
            tiers.setdefault(timeline.slo.tier, []).append(timeline)
    return {name: measure(members, duration) for name, members in sorted(tiers.items())}


def span(timelines: Sequence[Timeline], start: float | None = None) -> float:
    """Seconds from `start` (default: the first arrival) to the last chunk of output."""
    if not timelines:
        raise ValueError("no requests to measure")
    first = min(t.arrival for t in timelines) if start is None else start
    return max((t.chunk_times[-1] for t in timelines if t.chunk_times), default=first) - first
