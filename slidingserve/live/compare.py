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

`compare` runs that procedure over any `Trials`: `LiveTrials` here, or the simulated copy of
a profiled engine (`simulated.SimulatedTrials`), so both tables mean the same thing.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from slidingserve.bench.runner import BenchConfig, run_bench
from slidingserve.engines.vllm.runtime import CPU_ENGINE_LIMITS
from slidingserve.eval.goodput import GoodputEstimate, SearchSettings, search_goodput
from slidingserve.live.servers import ServerSpec, running_server
from slidingserve.metrics import RunMetrics
from slidingserve.reporting import format_table
from slidingserve.workloads import SLO_PRESETS, ArrivalConfig, TraceSource, WorkloadConfig
from slidingserve.workloads.prefixes import SystemPrompt
from slidingserve.workloads.slo import CONVERSATIONAL

STRICT_TBT = SLO_PRESETS["strict"][CONVERSATIONAL].tbt  # seconds: what the scale is set by
CALIBRATION_REQUESTS = 12  # the light run that measures the unloaded time per output token
CALIBRATION_RATE = 0.5  # req/s
UNMISSABLE_SLO_SCALE = 100.0  # for runs whose SLOs play no part (calibration, profiling)


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
    max_num_batched_tokens: int = CPU_ENGINE_LIMITS.max_num_batched_tokens
    max_num_seqs: int = CPU_ENGINE_LIMITS.max_num_seqs
    search: SearchSettings = SearchSettings(precision=0.1)
    out_dir: Path = Path("results/live")
    traces: tuple[TraceSource, ...] = ()  # --trace files: the workload "trace"
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)
    system_prompt: SystemPrompt | None = None  # requests that share one (prefix cache)

    def __post_init__(self) -> None:
        for name in ("requests", "repeats"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    def workload_config(self, scale: float, requests: int | None = None) -> WorkloadConfig:
        """The workload of a run: `requests` (default: the settings') at SLO scale `scale`."""
        count = self.requests if requests is None else requests
        return WorkloadConfig(
            self.workload,
            count,
            self.arrival,
            slo_scale=scale,
            traces=self.traces,
            system_prompt=self.system_prompt,
        )


@dataclass(frozen=True, slots=True)
class LiveRow:
    """One policy at one fixed rate."""

    policy: str
    rate: float  # req/s
    violation_rate: float  # any deadline missed (cumulative, docs/design.md §1.1)
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


class Trials(Protocol):
    """Where a comparison's trials run: live servers, or a simulated engine."""

    venue: str  # where the SLO scale was calibrated, for messages ("this machine")
    goodput_label: str  # what a searched goodput is called in messages

    def check(self, policy: str) -> None:
        """Called for every policy before any trial; ValueError if `policy` is unknown."""
        ...

    def serving(self, policy: str) -> AbstractContextManager[object]:
        """Entered around all the trials of `policy` (and the calibration, if it is first)."""
        ...

    def probe(self, workload: WorkloadConfig, rate: float, seed: int) -> RunMetrics:
        """A run whose SLOs play no part, for its timings (`calibrate`'s); called once,
        inside the first policy's `serving`, when the settings give no SLO scale."""
        ...

    def run(self, policy: str, rate: float, seed: int, scale: float) -> RunMetrics:
        """One trial of `policy`: the settings' workload at `rate` req/s with `seed`, its SLO
        presets scaled by `scale`; the figures of every request, per second of the run."""
        ...


class LiveTrials:
    """Trials on live servers, one per policy; each trial a bench run on its policy's."""

    venue = "this machine"
    goodput_label = "goodput"

    def __init__(self, settings: LiveSettings) -> None:
        self.settings = settings
        self.specs: dict[str, ServerSpec] = {}
        self.urls: dict[str, str] = {}  # the running servers', by policy, in start order
        # Every run salts its prefix cache apart: a later run re-sends the same seeds'
        # prompts, which would otherwise start from the cache an earlier run left (the
        # simulator starts each run cold). Requests of one run still share prefixes.
        self.runs = itertools.count()
        self._served: dict[str, int] = {}  # servers started for each policy

    def check(self, policy: str) -> None:
        self.specs[policy] = ServerSpec(
            self.settings.model,
            policy,
            max_num_batched_tokens=self.settings.max_num_batched_tokens,
            max_num_seqs=self.settings.max_num_seqs,
        )

    @contextlib.contextmanager
    def serving(self, policy: str) -> Iterator[None]:
        """`policy`'s server, up while the block runs (blocks may nest: servers of several
        policies up at once); its log is server-POLICY.log, or server-POLICY-2.log (3, ...)
        when these trials served the policy before (a validation serves vLLM's `fcfs` again
        at the end), so none of their logs is overwritten."""
        if policy in self.urls:
            raise RuntimeError(f"{policy}'s server is already running")
        self._served[policy] = served = self._served.get(policy, 0) + 1
        stem = f"server-{policy.replace(':', '-')}" + (f"-{served}" if served > 1 else "")
        log = self.settings.out_dir / f"{stem}.log"
        with running_server(self.specs[policy], log) as url:
            self.urls[policy] = url
            try:
                yield
            finally:
                del self.urls[policy]

    def probe(self, workload: WorkloadConfig, rate: float, seed: int) -> RunMetrics:
        """On the server started last of those running."""
        if not self.urls:
            raise RuntimeError("probes run inside `serving`, while a server runs")
        return self._bench(list(self.urls.values())[-1], workload, rate, seed)

    def run(self, policy: str, rate: float, seed: int, scale: float) -> RunMetrics:
        if policy not in self.urls:
            raise RuntimeError(f"{policy}'s trials run inside its `serving`, while it runs")
        spec = self.specs[policy]
        priority = spec.is_builtin and spec.builtin == "priority"
        workload = self.settings.workload_config(scale)
        return self._bench(self.urls[policy], workload, rate, seed, priority)

    def _bench(
        self, url: str, workload: WorkloadConfig, rate: float, seed: int, priority: bool = False
    ) -> RunMetrics:
        """A bench run on the server at `url`; `priority`: send vLLM's priority field."""
        config = BenchConfig(
            url,
            workload,
            rate=rate,
            seed=seed,
            priority_from_slo=priority,
            progress=False,
            cache_salt=f"run-{next(self.runs)}",
        )
        return run_bench(config).summary.metrics


def compare(
    settings: LiveSettings,
    policies: Sequence[str],
    rates: Sequence[float],
    search: bool = False,
    say: Callable[[str], None] = print,
    trials: Callable[[LiveSettings], Trials] = LiveTrials,
) -> LiveComparison:
    """Run every policy's trials on `trials(settings)` (default: a live server per policy,
    in turn); see the module docstring."""
    if not policies:
        raise ValueError("no policy to compare")
    engine = trials(settings)
    for policy in policies:
        engine.check(policy)  # bad names fail before any run
    seeds = [settings.seed + repeat for repeat in range(settings.repeats)]
    scale = settings.slo_scale
    rows: list[LiveRow] = []
    goodput: dict[str, GoodputEstimate] = {}
    for policy in policies:
        with engine.serving(policy):
            if scale is None:
                scale = calibrate(engine, settings)
                say(f"SLO scale for {engine.venue}: {scale:.3f}")
            for rate in rates:
                runs = [engine.run(policy, rate, seed, scale) for seed in seeds]
                rows.append(median_row(policy, rate, runs))
            if search:
                goodput[policy] = _search(engine, policy, scale, seeds, rates, settings.search)
                say(f"{policy}: {engine.goodput_label} {goodput[policy].goodput:.2f} req/s")
    assert scale is not None  # set with the first policy at the latest
    return LiveComparison(settings, scale, rows, goodput)


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


def median_violation(fractions: Iterable[float]) -> float:
    """The median of repeated live runs at one rate: one noisy run (1% of 200 requests is
    two) must not decide the goodput search alone."""
    return statistics.median(fractions)


def median_row(policy: str, rate: float, runs: Sequence[RunMetrics]) -> LiveRow:
    """The row of the run with the median violation rate (the upper one of an even count),
    with every run's violation rate beside it."""
    if not runs:
        raise ValueError("median_row needs at least one run")
    ordered = sorted(runs, key=lambda run: run.cumulative.overall)
    median = ordered[len(ordered) // 2]
    return LiveRow(
        policy,
        rate,
        median.cumulative.overall,
        median.cumulative.ttft,
        median.cumulative.tbt,
        median.goodput,
        median.goodput_vllm,
        median.failed,
        tuple(run.cumulative.overall for run in ordered),
        median.per_gap.overall,
        1000 * median.itl.p99,
    )


def calibrate(trials: Trials, settings: LiveSettings) -> float:
    """The SLO scale that makes the strict preset's TBT `tbt_headroom` × the unloaded time
    per output token (the median TPOT of a light run, `CALIBRATION_REQUESTS` requests at
    `CALIBRATION_RATE` req/s)."""
    workload = settings.workload_config(UNMISSABLE_SLO_SCALE, CALIBRATION_REQUESTS)
    tpot = trials.probe(workload, CALIBRATION_RATE, settings.seed).tpot.p50
    if not tpot > 0:
        raise RuntimeError("calibration run measured no time per output token")
    return settings.tbt_headroom * tpot / STRICT_TBT


def _search(
    engine: Trials,
    policy: str,
    scale: float,
    seeds: Sequence[int],
    rates: Sequence[float],
    settings: SearchSettings,
) -> GoodputEstimate:
    def violation_at(rate: float) -> float:
        runs = (engine.run(policy, rate, seed, scale) for seed in seeds)
        return median_violation(run.cumulative.overall for run in runs)

    return search_goodput(violation_at, min(rates) if rates else 1.0, settings)
