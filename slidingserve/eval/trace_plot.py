"""A trace's picture as a PNG (matplotlib's Agg backend: no display needed): arrivals over
time, when it records them, and its length histograms."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from slidingserve.eval.plots import save_figure
from slidingserve.workloads.trace_stats import counts_per

if TYPE_CHECKING:
    import numpy.typing as npt

    from slidingserve.workloads.trace_files import TimedTrace
    from slidingserve.workloads.trace_stats import LengthStats, TraceStats

_LENGTH_BINS = 60  # log-spaced bins of each length histogram


def plot_trace(trace: TimedTrace, stats: TraceStats, path: Path) -> Path:
    """Arrivals per second over the trace with its mean rate and per-minute average (when it
    has arrival times), above histograms of prompt and output tokens (log-spaced bins) with
    their p50, p90 and p99 marked."""
    timed = trace.arrivals is not None
    layout = "aa;po" if timed else "po"  # arrivals across the top; prompt, output
    figure, axes = plt.subplot_mosaic(layout, figsize=(12, 7.5 if timed else 4))
    if trace.arrivals is not None:
        _plot_arrivals(axes["a"], trace.arrivals, stats)
    _plot_lengths(axes["p"], trace.lengths.prompt, stats.prompt, "prompt tokens")
    _plot_lengths(axes["o"], trace.lengths.output, stats.output, "output tokens")
    figure.suptitle(f"{Path(stats.source).name}: {stats.rows:,} requests{_rate_text(stats)}")
    return save_figure(figure, path, dpi=110)


def _plot_arrivals(panel: Any, arrivals: npt.NDArray[np.float64], stats: TraceStats) -> None:
    per_second = counts_per(arrivals, 1.0)
    seconds = np.arange(len(per_second))
    panel.step(seconds, per_second, where="post", linewidth=0.4, alpha=0.6, label="per second")
    per_minute = counts_per(arrivals, 60.0) / 60.0
    minutes = 60.0 * np.arange(len(per_minute) + 1)
    panel.stairs(
        per_minute, minutes, color="tab:orange", linewidth=2, zorder=3, label="minute average"
    )
    assert stats.arrivals is not None
    if stats.arrivals.mean_rate is not None:
        rate = stats.arrivals.mean_rate
        panel.axhline(
            rate, color="black", linestyle="--", zorder=4, label=f"mean rate {rate:.2f} req/s"
        )
    panel.set_xlabel("seconds from the first request")
    panel.set_ylabel("arrivals per second")
    panel.set_xlim(0, max(len(per_second), 1))
    panel.grid(alpha=0.3)
    panel.legend(fontsize="small", loc="upper right")


def _plot_lengths(
    panel: Any, tokens: npt.NDArray[np.int64], summary: LengthStats, label: str
) -> None:
    edges = np.geomspace(tokens.min(), tokens.max() + 1, _LENGTH_BINS + 1)
    panel.hist(tokens, bins=edges, color="tab:gray")
    for name, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
        value = getattr(summary, name)
        panel.axvline(value, color="tab:red", linestyle=style, label=f"{name} {value:,.0f}")
    panel.set_xscale("log")
    panel.set_xlabel(f"{label} (log scale)")
    panel.set_ylabel("requests")
    panel.grid(alpha=0.3)
    panel.legend(fontsize="small", title=f"max {summary.max:,}", title_fontsize="small")


def _rate_text(stats: TraceStats) -> str:
    arrivals = stats.arrivals
    if arrivals is None:
        return " (no arrival times)"
    rate = "" if arrivals.mean_rate is None else f" at {arrivals.mean_rate:.2f} req/s"
    return f" over {arrivals.duration:,.0f} s{rate}"
