"""Plots of experiment results (PNG, matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from slidingserve.eval.experiment import ExperimentResult

# Markers and dashes differ so that policies with identical curves stay visible.
_STYLES: list[dict[str, object]] = [
    {"marker": "o", "linestyle": "-"},
    {"marker": "s", "linestyle": "--"},
    {"marker": "^", "linestyle": ":"},
    {"marker": "D", "linestyle": "-."},
    {"marker": "v", "linestyle": "-"},
    {"marker": "x", "linestyle": "--"},
]


def plot_violation_curves(result: ExperimentResult, path: Path) -> Path:
    """Violation rate against request rate, one panel per workload, one line per policy:
    the mean over seeds, with a band from the best to the worst seed."""
    experiment = result.experiment
    count = len(experiment.workloads)
    columns = min(count, 2)
    rows = -(-count // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4 * rows), squeeze=False)
    for panel, workload in zip(axes.flat, experiment.workloads, strict=False):
        for index, policy in enumerate(experiment.policies):
            curve = _seed_spread(result, policy, workload)
            if curve:
                rates, low, mean, high = (list(column) for column in zip(*curve, strict=True))
                style = _STYLES[index % len(_STYLES)]
                (line,) = panel.plot(rates, mean, label=policy, **style)
                panel.fill_between(rates, low, high, color=line.get_color(), alpha=0.15)
        panel.axhline(
            100 * experiment.search.threshold, color="grey", linestyle=":", label="SLO target"
        )
        panel.axvline(
            result.bounds[workload].rate, color="black", linestyle="--", label="capacity bound"
        )
        panel.set_title(workload)
        panel.set_xlabel("request rate (req/s)")
        panel.set_ylabel("requests violating SLO (%)")
        panel.set_yscale("symlog", linthresh=1.0)
        panel.set_ylim(0, 100)
        panel.grid(alpha=0.3)
        panel.legend(fontsize="small")
    for panel in list(axes.flat)[count:]:
        panel.set_visible(False)
    figure.suptitle(
        f"{experiment.hardware.model} on {experiment.hardware.gpu}, {experiment.slo_preset} SLOs "
        f"(×{experiment.slo_scale:g}), {len(experiment.seeds)} seeds: mean and range"
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def _seed_spread(
    result: ExperimentResult, policy: str, workload: str
) -> list[tuple[float, float, float, float]]:
    """(rate, lowest, mean, highest violation %) over the seeds, by increasing rate."""
    by_rate: dict[float, list[float]] = {}
    for point in result.curve:
        if point.policy == policy and point.workload == workload:
            by_rate.setdefault(point.rate, []).append(100 * point.violation_rate)
    return [
        (rate, min(values), statistics.fmean(values), max(values))
        for rate, values in sorted(by_rate.items())
    ]
