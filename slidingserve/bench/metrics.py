"""The figures of a benchmark run, from its request records.

Latencies (TTFT, TPOT, ITL, e2e; mean/p50/p90/p99 in ms) follow vLLM's benchmark and cover
completed requests, as vLLM's do; so do the throughputs (per second of the run).

SLO violations use the project's per-token deadlines (SPEC eq. 1) counted from each request's
*scheduled* send time: token k+1 is due at scheduled + L_ttft + k·L_tbt (cumulative reading),
or, per gap, no gap between tokens over L_tbt. They are fractions of the *judged* requests:
completed ones, and failed ones, which count as violating (TTFT when no token came, else TBT:
the missing tokens never came). Requests cancelled by a stop are left out (`cancelled`).

Goodput, the project's: completed requests that met every deadline, per second of the run;
vLLM's (`--goodput`): completed requests with TTFT ≤ L_ttft and TPOT ≤ L_tbt (their own
SLO; a one-token request has TPOT 0), per second.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from slidingserve.bench.records import Outcome, RequestRecord


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Distribution of one latency, milliseconds (NaN without samples)."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of_seconds(cls, values: Sequence[float]) -> LatencyStats:
        if not values:
            return cls(float("nan"), float("nan"), float("nan"), float("nan"))
        ms = np.asarray(values, dtype=np.float64) * 1000.0
        p50, p90, p99 = np.percentile(ms, [50, 90, 99])
        return cls(float(ms.mean()), float(p50), float(p90), float(p99))


class Verdict(NamedTuple):
    """Which deadlines one judged request missed."""

    ttft: bool  # the first token late, or none came
    tbt: bool  # a later token past its cumulative deadline (eq. 1), or missing
    tbt_per_gap: bool  # a gap between tokens over L_tbt, or tokens missing

    @property
    def cumulative(self) -> bool:
        return self.ttft or self.tbt

    @property
    def per_gap(self) -> bool:
        return self.ttft or self.tbt_per_gap


@dataclass(frozen=True, slots=True)
class ViolationRates:
    """Violating fractions of the judged requests (NaN when none was judged)."""

    judged: int  # completed + failed requests
    overall: float  # any deadline missed
    ttft: float  # the first token's deadline missed
    tbt: float  # a later token's deadline missed

    @classmethod
    def of(cls, verdicts: Sequence[Verdict], *, per_gap: bool) -> ViolationRates:
        if not verdicts:
            return cls(0, float("nan"), float("nan"), float("nan"))
        ttft = np.array([v.ttft for v in verdicts])
        tbt = np.array([v.tbt_per_gap if per_gap else v.tbt for v in verdicts])
        return cls(len(verdicts), float(np.mean(ttft | tbt)), float(ttft.mean()), float(tbt.mean()))


@dataclass(frozen=True, slots=True)
class TierViolations:
    """The violations of one SLO tier."""

    name: str
    cumulative: ViolationRates
    per_gap: ViolationRates


@dataclass(frozen=True, slots=True)
class BenchSummary:
    """The figures of one run."""

    requests_planned: int  # requests of the workload
    requests_sent: int
    completed: int  # every asked-for token arrived
    failed: int  # ended by an error (kinds in BenchResult.errors)
    cancelled: int  # in flight when the run was stopped
    not_sent: int  # planned but never sent (stopped by --duration or Ctrl-C)
    duration_s: float  # seconds from the run start to the end of the last request
    request_throughput: float  # completed requests per second
    output_throughput: float  # output tokens of completed requests per second
    ttft_ms: LatencyStats  # first token − send time
    tpot_ms: LatencyStats  # (e2e − TTFT) / (output tokens − 1), requests with ≥ 2 tokens
    itl_ms: LatencyStats  # every gap between consecutive chunks
    e2e_ms: LatencyStats  # last token − send time
    violations: ViolationRates  # cumulative deadlines (SPEC eq. 1), the scheduler's reading
    violations_per_gap: ViolationRates  # per-gap TBT reading
    tiers: tuple[TierViolations, ...]  # by tier name; empty without tiers
    goodput: float  # completed requests meeting every cumulative deadline, per second
    goodput_per_gap: float  # the same under the per-gap reading
    goodput_vllm: float  # vLLM's --goodput: TTFT ≤ L_ttft and TPOT ≤ L_tbt, per second
    interrupted: bool  # the run was stopped by Ctrl-C (or a stop request)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def verdict(record: RequestRecord) -> Verdict | None:
    """The deadlines `record` missed; None for a cancelled request (not judged)."""
    if record.outcome is Outcome.CANCELLED:
        return None
    times = np.asarray(record.token_times)
    if times.size == 0:
        return Verdict(ttft=True, tbt=False, tbt_per_gap=False)
    k = np.arange(times.size)
    deadlines = record.scheduled + record.slo.ttft + k * record.slo.tbt  # SPEC eq. (1)
    late = times > deadlines
    gaps_late = bool((np.diff(times) > record.slo.tbt).any())
    missing = record.outcome is Outcome.FAILED
    return Verdict(
        ttft=bool(late[0]),
        tbt=bool(late[1:].any()) or missing,
        tbt_per_gap=gaps_late or missing,
    )


def meets_vllm_goodput(record: RequestRecord) -> bool:
    """vLLM's `--goodput ttft:L_ttft tpot:L_tbt` test with the request's own SLO."""
    if record.outcome is not Outcome.COMPLETED or record.ttft is None:
        return False
    tpot = record.tpot if record.tpot is not None else 0.0
    return record.ttft <= record.slo.ttft and tpot <= record.slo.tbt


def summarize(
    records: Sequence[RequestRecord],
    *,
    planned: int,
    duration: float,
    interrupted: bool = False,
) -> BenchSummary:
    """The summary of a run of `planned` requests that lasted `duration` seconds."""
    counts = dict.fromkeys(Outcome, 0)
    for record in records:
        counts[record.outcome] += 1
    done = [r for r in records if r.outcome is Outcome.COMPLETED]
    judged = [(r, v) for r in records if (v := verdict(r)) is not None]
    verdicts = [v for _, v in judged]
    done_verdicts = [v for r, v in judged if r.outcome is Outcome.COMPLETED]
    latencies = _Latencies.of(done)

    def per_second(count: float) -> float:
        return count / duration if duration > 0 else float("nan")

    return BenchSummary(
        requests_planned=planned,
        requests_sent=len(records),
        completed=counts[Outcome.COMPLETED],
        failed=counts[Outcome.FAILED],
        cancelled=counts[Outcome.CANCELLED],
        not_sent=planned - len(records),
        duration_s=duration,
        request_throughput=per_second(len(done)),
        output_throughput=per_second(sum(r.output_tokens for r in done)),
        ttft_ms=latencies.ttft,
        tpot_ms=latencies.tpot,
        itl_ms=latencies.itl,
        e2e_ms=latencies.e2e,
        violations=ViolationRates.of(verdicts, per_gap=False),
        violations_per_gap=ViolationRates.of(verdicts, per_gap=True),
        tiers=_tiers(judged),
        goodput=per_second(sum(not v.cumulative for v in done_verdicts)),
        goodput_per_gap=per_second(sum(not v.per_gap for v in done_verdicts)),
        goodput_vllm=per_second(sum(meets_vllm_goodput(r) for r in done)),
        interrupted=interrupted,
    )


class _Latencies(NamedTuple):
    """vLLM's latency figures of the completed requests, ms."""

    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2e: LatencyStats

    @classmethod
    def of(cls, done: Sequence[RequestRecord]) -> _Latencies:
        return cls(
            LatencyStats.of_seconds([r.ttft for r in done if r.ttft is not None]),
            LatencyStats.of_seconds([r.tpot for r in done if r.tpot is not None]),
            LatencyStats.of_seconds([gap for r in done for gap in r.itl]),
            LatencyStats.of_seconds([r.e2e for r in done if r.e2e is not None]),
        )


def _tiers(judged: Sequence[tuple[RequestRecord, Verdict]]) -> tuple[TierViolations, ...]:
    by_tier: dict[str, list[Verdict]] = {}
    for record, v in judged:
        if record.slo.tier is not None:
            by_tier.setdefault(record.slo.tier, []).append(v)
    return tuple(
        TierViolations(
            name,
            ViolationRates.of(verdicts, per_gap=False),
            ViolationRates.of(verdicts, per_gap=True),
        )
        for name, verdicts in sorted(by_tier.items())
    )
