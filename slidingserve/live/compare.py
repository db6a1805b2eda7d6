"""Policies side by side on a live engine: the same model, workload and seed for each.

One server per policy, in turn (ours through the adapter, vLLM's own `fcfs` and `priority`).
SLOs are scaled to this machine first: a light run measures the unloaded time per output
token, and the SLO presets are scaled so that the TBT target is `tbt_headroom` times it, so
the comparison sits where scheduling matters (at low load every policy meets such SLOs).
Each policy then runs at the given fixed rates and, optionally, a goodput search (the
highest rate with ≤ 1% violating requests) on the same server. A live run is noisy (one
stall of the shared CPU can make a dozen requests late), so every rate, fixed or searched,
is run `repeats` times with seeds `seed`, `seed + 1`, …: a fixed rate reports the run with
the median violation rate (and all the runs' rates), the search judges by that median.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slidingserve.bench.metrics import BenchSummary
from slidingserve.bench.runner import BenchConfig, BenchResult, run_bench
from slidingserve.eval.goodput import GoodputEstimate, SearchSettings, search_goodput
from slidingserve.live.servers import ServerSpec, running_server
from slidingserve.reporting import format_table
from slidingserve.workloads import WorkloadConfig

STRICT_TBT_MS = 50.0  # the strict preset's TBT, which the scale is computed against


@dataclass(frozen=True)
class LiveSettings:
    """What every policy of a comparison shares."""

    model: str  # model folder
    workload: str = "sharegpt"
    requests: int = 200  # per measured run
    seed: int = 0
    slo_scale: float | None = None  # None: calibrate on this machine
    tbt_headroom: float = 3.0  # TBT target = this × the unloaded time per output token
    repeats: int = 3  # runs per rate (seeds seed, seed + 1, ...); their median decides
    max_num_batched_tokens: int = 256
    max_num_seqs: int = 64
    search: SearchSettings = SearchSettings(precision=0.1)
    out_dir: Path = Path("results/live")

    def __post_init__(self) -> None:
        for name in ("requests", "repeats"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    def workload_config(self, scale: float) -> WorkloadConfig:
        return WorkloadConfig(self.workload, self.requests, slo_scale=scale)


@dataclass(frozen=True, slots=True)
class LiveRow:
    """One policy at one fixed rate."""

    policy: str
    rate: float  # req/s
    violation_rate: float  # any deadline missed (cumulative, SPEC eq. 1)
    ttft_violation_rate: float
    tbt_violation_rate: float
    goodput: float  # req/s meeting every deadline, this run
    goodput_vllm: float  # req/s meeting TTFT and TPOT, vLLM's --goodput sense
    failed: int  # requests that ended in an error
    violation_runs: tuple[float, ...] = ()  # every repeat's violation rate, sorted
    per_gap_violation_rate: float = math.nan  # any gap over L_tbt, or a late first token
    itl_p99_ms: float = math.nan  # p99 gap between streamed tokens (vLLM's ITL), ms


@dataclass(frozen=True)
class LiveComparison:
    settings: LiveSettings
    slo_scale: float
    rows: list[LiveRow]
    goodput: dict[str, GoodputEstimate]  # per policy, when searched


def compare(
    settings: LiveSettings,
    policies: Sequence[str],
    rates: Sequence[float],
    search: bool = False,
    say: Callable[[str], None] = print,
) -> LiveComparison:
    """Run every policy on its own server, in turn; see the module docstring."""
    specs = [_spec(settings, policy) for policy in policies]  # bad names fail before any run
    scale = settings.slo_scale
    rows: list[LiveRow] = []
    goodput: dict[str, GoodputEstimate] = {}
    for spec in specs:
        log = settings.out_dir / f"server-{spec.policy.replace(':', '-')}.log"
        with running_server(spec, log) as url:
            if scale is None:
                scale = calibrate(settings, url)
                say(f"SLO scale for this machine: {scale:.3f}")
            for rate in rates:
                runs = [
                    _bench(settings, url, rate, scale, spec, seed=settings.seed + repeat).summary
                    for repeat in range(settings.repeats)
                ]
                rows.append(median_row(spec.policy, rate, runs))
            if search:
                goodput[spec.policy] = _search(settings, url, scale, spec, rates)
                say(f"{spec.policy}: goodput {goodput[spec.policy].goodput:.2f} req/s")
    assert scale is not None
    return LiveComparison(settings, scale, rows, goodput)


def calibrate(settings: LiveSettings, url: str) -> float:
    """The SLO scale that makes the TBT target `tbt_headroom` × the unloaded TPOT here."""
    probe = dataclasses.replace(settings, requests=12)
    result = run_bench(
        BenchConfig(
            url,
            probe.workload_config(100.0),  # SLOs that nobody misses: only timings matter
            rate=0.5,
            seed=settings.seed,
            progress=False,
        )
    )
    return scale_for_tpot(result.summary.tpot_ms.p50, settings.tbt_headroom)


def table(comparison: LiveComparison) -> str:
    """Policies × rates: violation rates (cumulative, and `gap%` per gap), the p99 gap
    between tokens, and goodput; the searched goodput when there is one."""
    header = ["policy", "rate", "viol%", "ttft%", "tbt%", "gap%", "ITL p99 ms"]
    header += ["goodput", "goodput(vLLM)", "failed", "viol% of each run"]
    header += ["searched goodput"] if comparison.goodput else []
    rows = []
    for row in comparison.rows:
        cells = [
            row.policy,
            f"{row.rate:.2f}",
            f"{100 * row.violation_rate:.1f}",
            f"{100 * row.ttft_violation_rate:.1f}",
            f"{100 * row.tbt_violation_rate:.1f}",
            f"{100 * row.per_gap_violation_rate:.1f}",
            f"{row.itl_p99_ms:.1f}",
            f"{row.goodput:.2f}",
            f"{row.goodput_vllm:.2f}",
            str(row.failed),
            " ".join(f"{100 * fraction:.1f}" for fraction in row.violation_runs),
        ]
        if comparison.goodput:
            estimate = comparison.goodput.get(row.policy)
            cells.append(f"{estimate.goodput:.2f}" if estimate else "-")
        rows.append(cells)
    return format_table(header, rows)


def _spec(settings: LiveSettings, policy: str) -> ServerSpec:
    return ServerSpec(
        settings.model,
        policy,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs,
    )


def median_violation(fractions: Iterable[float]) -> float:
    """The median of repeated live runs at one rate: one noisy run (1% of 200 requests is
    two) must not decide the goodput search alone."""
    return statistics.median(fractions)


def _bench(
    settings: LiveSettings,
    url: str,
    rate: float,
    scale: float,
    spec: ServerSpec,
    seed: int | None = None,
) -> BenchResult:
    return run_bench(
        BenchConfig(
            url,
            settings.workload_config(scale),
            rate=rate,
            seed=settings.seed if seed is None else seed,
            priority_from_slo=spec.is_builtin and spec.builtin == "priority",
            progress=False,
        )
    )


def median_row(policy: str, rate: float, runs: Sequence[BenchSummary]) -> LiveRow:
    """The row of the run with the median violation rate (the upper one of an even count),
    with every run's violation rate beside it."""
    if not runs:
        raise ValueError("median_row needs at least one run")
    ordered = sorted(runs, key=lambda run: run.violations.overall)
    median = ordered[len(ordered) // 2]
    return LiveRow(
        policy,
        rate,
        median.violations.overall,
        median.violations.ttft,
        median.violations.tbt,
        median.goodput,
        median.goodput_vllm,
        median.failed,
        tuple(run.violations.overall for run in ordered),
        median.violations_per_gap.overall,
        median.itl_ms.p99,
    )


def scale_for_tpot(tpot_ms: float, headroom: float) -> float:
    """The SLO scale that puts the strict preset's TBT at `headroom` × `tpot_ms`."""
    if not tpot_ms > 0:
        raise RuntimeError("calibration run measured no time per output token")
    return headroom * tpot_ms / STRICT_TBT_MS


def _search(
    settings: LiveSettings, url: str, scale: float, spec: ServerSpec, rates: Sequence[float]
) -> GoodputEstimate:
    def violation_at(rate: float) -> float:
        return median_violation(
            _bench(
                settings, url, rate, scale, spec, seed=settings.seed + repeat
            ).summary.violations.overall
            for repeat in range(settings.repeats)
        )

    start = min(rates) if rates else 1.0
    return search_goodput(violation_at, start, settings.search)
