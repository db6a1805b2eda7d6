"""A benchmark run as JSON, as a PNG summary and as a text table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from slidingserve.metrics import Outcome
from slidingserve.reporting import format_table, write_json

if TYPE_CHECKING:
    import numpy.typing as npt

    from slidingserve.bench.runner import BenchResult
    from slidingserve.bench.summary import BenchSummary
    from slidingserve.metrics import Percentiles

MAX_SLO_LINES = 4  # distinct SLO targets drawn on a CDF


def bench_payload(result: BenchResult) -> dict[str, Any]:
    """Everything about the run: settings, summary, errors and every request's record."""
    return {
        "started": result.started,
        "model": result.model,
        "max_model_len": result.max_model_len,
        "config": result.config.to_dict(),
        "summary": result.summary.to_dict(),
        "errors": result.errors,
        "error_messages": result.error_messages,
        "refused": result.refusals.to_dict(),
        "deadlines": (
            "from the scheduled send time; TBT cumulative (docs/design.md §1.1) and per gap"
        ),
        "requests": [record.to_dict() for record in result.records],
    }


def write_bench_json(result: BenchResult, path: Path) -> Path:
    """Write `bench_payload(result)` to `path` as strict JSON (NaN as null); returns `path`."""
    write_json(Path(path), bench_payload(result))
    return Path(path)


class SecondBins(NamedTuple):
    """Per-second counts over the run; bin i covers [i, i + 1) s after the start."""

    tokens: npt.NDArray[np.int64]  # output tokens received
    completed: npt.NDArray[np.int64]  # requests completed
    violating: npt.NDArray[np.int64]  # judged requests that missed a deadline (cumulative)
    failed: npt.NDArray[np.int64]  # requests that ended with an error


def per_second(result: BenchResult) -> SecondBins:
    """Per-second counts of `result`, binned by arrival of the token or end of the request."""
    bins = max(1, math.ceil(result.summary.metrics.duration))
    ended = [(r.timeline, r.finished) for r in result.records]
    tokens = np.concatenate([np.empty(0), *(t.token_times for t, _ in ended)])
    ends = {o: [end for t, end in ended if t.outcome is o] for o in Outcome}
    late = [end for t, end in ended if (v := t.verdict()) is not None and v.cumulative]
    return SecondBins(
        _bin(tokens, bins),
        _bin(ends[Outcome.COMPLETED], bins),
        _bin(late, bins),
        _bin(ends[Outcome.FAILED], bins),
    )


def _bin(times: npt.ArrayLike, bins: int) -> npt.NDArray[np.int64]:
    index = np.clip(np.floor(np.asarray(times, dtype=np.float64)), 0, bins - 1).astype(np.int64)
    return np.bincount(index, minlength=bins).astype(np.int64)


def plot_bench(result: BenchResult, path: Path) -> Path:
    """A PNG summary: TTFT and ITL CDFs with the SLO targets, per-second throughput and
    violations. Returns `path`."""
    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    timelines = [record.timeline for record in result.records]
    done = [t for t in timelines if t.outcome is Outcome.COMPLETED]
    ttft_slos = sorted({t.slo.ttft * 1000 for t in timelines})
    tbt_slos = sorted({t.slo.tbt * 1000 for t in timelines})
    ttfts = [t.ttft * 1000 for t in done if t.ttft is not None]
    gaps = [gap * 1000 for t in done for gap in t.itl.tolist()]
    _cdf(axes[0, 0], ttfts, ttft_slos, "TTFT (ms)")
    _cdf(axes[0, 1], gaps, tbt_slos, "inter-token latency (ms)")
    _throughput(axes[1, 0], per_second(result))
    _outcomes(axes[1, 1], per_second(result))
    figure.suptitle(_title(result), fontsize="medium")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _cdf(panel: Any, values_ms: list[float], slos_ms: list[float], label: str) -> None:
    if values_ms:
        ordered = np.sort(np.asarray(values_ms))
        panel.plot(ordered, np.arange(1, ordered.size + 1) / ordered.size, label="measured")
    else:
        panel.text(0.5, 0.5, "no completed request", ha="center", transform=panel.transAxes)
    for slo in slos_ms[:MAX_SLO_LINES]:
        panel.axvline(slo, color="red", linestyle="--", alpha=0.6, label=f"SLO {slo:g} ms")
    panel.set_xlabel(label)
    panel.set_ylabel("fraction of samples ≤ x")
    panel.set_xscale("log")
    panel.grid(alpha=0.3)
    panel.legend(fontsize="small")


def _throughput(panel: Any, line: SecondBins) -> None:
    edges = np.arange(line.tokens.size + 1)
    panel.stairs(line.tokens, edges, label="output tokens")
    panel.set_xlabel("seconds after the start")
    panel.set_ylabel("output tokens per second")
    panel.set_ylim(bottom=0)
    panel.grid(alpha=0.3)
    panel.legend(fontsize="small")


def _outcomes(panel: Any, line: SecondBins) -> None:
    edges = np.arange(line.completed.size + 1)
    panel.stairs(line.completed, edges, label="completed")
    panel.stairs(line.violating, edges, label="violating SLO", color="red")
    panel.stairs(line.failed, edges, label="failed", color="black", linestyle=":")
    panel.set_xlabel("seconds after the start (request end)")
    panel.set_ylabel("requests per second")
    panel.set_ylim(bottom=0)
    panel.grid(alpha=0.3)
    panel.legend(fontsize="small")


def _title(result: BenchResult) -> str:
    s, m, config = result.summary, result.summary.metrics, result.config
    return (
        f"{result.model} · {config.workload.name} at {config.rate:g} req/s · "
        f"{m.completed}/{s.requests_sent} completed · "
        f"{_percent(m.cumulative.overall)} violating (cumulative) · "
        f"goodput {m.goodput:.2f} req/s"
    )


def format_summary(result: BenchResult) -> str:
    """A few lines and two tables for the terminal."""
    s, m = result.summary, result.summary.metrics
    lines = [
        f"{result.model} (context {result.max_model_len} tokens), {result.config.workload.name} "
        f"at {result.config.rate:g} req/s, {m.duration:.1f} s"
        + (" (interrupted)" if s.interrupted else ""),
        f"requests: {s.requests_planned} planned, {s.requests_sent} sent, {m.completed} "
        f"completed, {m.failed} failed, {m.cancelled} cancelled, {s.not_sent} not sent",
        f"throughput: {m.request_throughput:.2f} req/s, {m.output_throughput:.1f} output tok/s; "
        f"goodput: {m.goodput:.2f} req/s (per gap {m.goodput_per_gap:.2f}, "
        f"vLLM's {m.goodput_vllm:.2f})",
    ]
    refusals = result.refusals
    if refusals.count:
        latency = refusals.latency.in_ms()
        lines.append(
            f"refused: {refusals.count} by the server's admission control, answered in "
            f"{latency['p50']:.1f} ms (p50), {latency['p99']:.1f} ms (p99)"
        )
    if result.errors:
        lines.append("errors: " + ", ".join(f"{k} {n}" for k, n in result.errors.items()))
        lines += [f"  {kind}: {message}" for kind, message in result.error_messages.items()]
    return "\n".join([*lines, "", _latency_table(s), "", _violation_table(result)])


def _latency_table(s: BenchSummary) -> str:
    m = s.metrics
    rows: list[tuple[str, Percentiles]] = [
        ("TTFT", m.ttft),
        ("TPOT", m.tpot),
        ("ITL", m.itl),
        ("e2e", m.e2e),
    ]
    return format_table(
        ("latency (ms)", "mean", "p50", "p90", "p99"),
        [(name, *(_number(v) for v in x.in_ms().values())) for name, x in rows],
    )


def _violation_table(result: BenchResult) -> str:
    s = result.summary
    groups = [("all", s.metrics.cumulative, s.metrics.per_gap)]
    groups += [(f"tier {name}", t.cumulative, t.per_gap) for name, t in s.tiers.items()]
    rows = [
        (name, str(c.judged), *map(_percent, (c.overall, c.ttft, c.tbt, g.overall, g.tbt)))
        for name, c, g in groups
    ]
    header = ("SLO violations", "judged", "any", "TTFT", "TBT", "any/gap", "TBT/gap")
    return format_table(header, rows)


def _percent(fraction: float) -> str:
    return "-" if math.isnan(fraction) else f"{100 * fraction:.1f}%"


def _number(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"
