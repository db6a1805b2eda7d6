"""Plots of experiment results (PNG, matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

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
    """Violation rate against request rate, one panel per workload, one line per policy."""
    experiment = result.experiment
    count = len(experiment.workloads)
    columns = min(count, 2)
    rows = -(-count // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4 * rows), squeeze=False)
    for panel, workload in zip(axes.flat, experiment.workloads, strict=False):
        for index, policy in enumerate(experiment.policies):
            points = sorted(
                (p.rate, 100 * p.violation_rate)
                for p in result.curve
                if p.policy == policy and p.workload == workload
            )
            if points:
                rates, violations = zip(*points, strict=True)
                style = _STYLES[index % len(_STYLES)]
                panel.plot(rates, violations, label=policy, **style)
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
        f"{experiment.hardware.model} on {experiment.hardware.gpu}, {experiment.slo_preset} SLOs"
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
