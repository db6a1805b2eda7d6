"""Plots of experiment results (PNG, matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from slidingserve.eval.diagnose import PREEMPTION_COLUMNS, Cause
from slidingserve.sim.engine import DECODE_RUN

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

    from slidingserve.eval.diagnose import Diagnosis
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


def save_figure(figure: Any, path: Path, dpi: int, tight: bool = True) -> Path:
    """Lay `figure` out, write it to `path` (folders made as needed) and free it."""
    if tight:
        figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi, bbox_inches="tight" if not tight else None)
    plt.close(figure)
    return path


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
    return save_figure(figure, path, dpi=120)


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


_CAUSE_COLORS = {
    Cause.REFUSED: "tab:gray",
    Cause.PREEMPTED: "tab:purple",
    Cause.RELEGATED: "tab:brown",
    Cause.QUEUEING: "tab:red",
    Cause.SLOW_PREFILL: "tab:orange",
    Cause.DECODE_STALL: "tab:blue",
}
_DECISION_BINS = 120  # time bins of the decisions panel
_MOST_PATHS = 9  # decision paths shown by name; the rarer ones are "other"
_PANELS = (
    "queued requests",
    "tokens per iteration",
    "ms (symlog)",
    "KV blocks in use (%)",
    "planned iterations by path",
)


def plot_diagnosis(diagnoses: Sequence[Diagnosis], path: Path) -> Path:
    """A timeline of each run over simulated time, one column per policy, every row on the
    same axes in every column: queue depth (waiting + prefilling) with the violating
    requests' arrivals marked by cause; prefill and decode tokens per iteration; iteration
    time against the tightest decode slack at its start; the KV cache's occupancy with
    every preemption marked; the policy's decisions by path."""
    columns = len(diagnoses)
    figure, axes = plt.subplots(
        len(_PANELS), columns, figsize=(7 * columns, 15), sharex=True, sharey="row",
        squeeze=False,
    )  # fmt: skip
    paths = _decision_paths(diagnoses)
    span = max(log.start + log.duration for d in diagnoses for log in d.iterations)
    for column, diagnosis in zip(axes.T, diagnoses, strict=True):
        logs = _Iterations.of(diagnosis)
        _plot_queue(column[0], diagnosis, logs)
        _plot_tokens(column[1], logs)
        _plot_slack(column[2], logs)
        _plot_kv(column[3], diagnosis, logs)
        _plot_decisions(column[4], logs, paths, span)
        result = diagnosis.result
        column[0].set_title(
            f"{diagnosis.policy}: {len(diagnosis.violations)} of {result.metrics.requests} "
            f"violating ({result.violations.overall:.1%})"
        )
        column[-1].set_xlabel("simulated time (s)")
    for panel, label in zip(axes[:, 0], _PANELS, strict=True):
        panel.set_ylabel(label)
    axes[-1, -1].legend(fontsize="x-small", loc="lower right", ncol=2, framealpha=0.9)
    first = diagnoses[0].result
    figure.suptitle(
        f"{first.workload} at {first.rate:g} req/s, seed {first.seed}, TBT read "
        f"{first.tbt_reading.value}"
    )
    return save_figure(figure, path, dpi=110)


class _Iterations(NamedTuple):
    """A run's iteration logs as arrays."""

    start: npt.NDArray[np.float64]  # seconds
    duration: npt.NDArray[np.float64]  # seconds
    decodes: npt.NDArray[np.int64]
    prefill: npt.NDArray[np.int64]  # prefill tokens
    queued: npt.NDArray[np.int64]  # waiting + prefilling
    slack: npt.NDArray[np.float64]  # seconds, tightest decode slack (NaN without decodes)
    path: npt.NDArray[np.str_]
    kv: npt.NDArray[np.float64]  # share of the KV blocks in use while it ran
    kv_prefilling: npt.NDArray[np.float64]  # share held by started, unfinished prefills

    @classmethod
    def of(cls, diagnosis: Diagnosis) -> _Iterations:
        logs = diagnosis.iterations
        return cls(
            np.array([log.start for log in logs], dtype=np.float64),
            np.array([log.duration for log in logs], dtype=np.float64),
            np.array([log.num_decodes for log in logs], dtype=np.int64),
            np.array([log.num_tokens - log.num_decodes for log in logs], dtype=np.int64),
            np.array([log.queued for log in logs], dtype=np.int64),
            np.array(
                [np.nan if log.decode_slack is None else log.decode_slack for log in logs],
                dtype=np.float64,
            ),
            np.array([log.path for log in logs], dtype=np.str_),
            np.array(
                [log.kv_used / log.kv_total if log.kv_total else np.nan for log in logs],
                dtype=np.float64,
            ),
            np.array(
                [log.kv_prefilling / log.kv_total if log.kv_total else np.nan for log in logs],
                dtype=np.float64,
            ),
        )


def _plot_queue(panel: Any, diagnosis: Diagnosis, logs: _Iterations) -> None:
    """Queue depth; each violating request marked at its arrival, coloured by cause."""
    panel.step(logs.start, logs.queued, where="post", color="grey", linewidth=0.7)
    for cause in Cause:
        arrivals = np.array([v.arrival for v in diagnosis.violations if v.cause is cause])
        index = np.clip(np.searchsorted(logs.start, arrivals, side="right") - 1, 0, None)
        depth = logs.queued[index] if arrivals.size else arrivals
        panel.scatter(
            arrivals, depth, s=18, marker="v", color=_CAUSE_COLORS[cause], zorder=3,
            label=f"{cause.value} ({arrivals.size})",
        )  # fmt: skip
    panel.legend(fontsize="small", title="violating, at arrival", title_fontsize="small")
    panel.grid(alpha=0.3)


def _plot_tokens(panel: Any, logs: _Iterations) -> None:
    """Prefill tokens of each iteration that had some (dots), decodes per iteration (line)."""
    some = logs.prefill > 0
    panel.scatter(logs.start[some], logs.prefill[some], s=1, alpha=0.5, label="prefill tokens")
    panel.plot(
        logs.start, np.where(logs.decodes > 0, logs.decodes, np.nan), linewidth=0.6,
        color="tab:orange", label="decode tokens",
    )  # fmt: skip
    panel.set_yscale("log")
    panel.legend(fontsize="small", loc="lower right", markerscale=6)
    panel.grid(alpha=0.3)


def _plot_slack(panel: Any, logs: _Iterations) -> None:
    """Iteration time and the tightest decode slack at its start, milliseconds; iterations
    that overran a positive slack (a decode deadline broke in them) marked."""
    start, duration, slack = logs.start, 1000 * logs.duration, 1000 * logs.slack
    panel.plot(start, slack, linewidth=0.4, color="tab:green", label="tightest decode slack")
    panel.plot(start, duration, linewidth=0.4, color="black", label="iteration time")
    over = (slack > 0) & (duration > slack)  # NaN (no decodes) compares False
    panel.scatter(
        start[over], duration[over], s=6, color="tab:red", zorder=3,
        label=f"overran a positive slack ({int(over.sum())})",
    )  # fmt: skip
    panel.set_yscale("symlog", linthresh=10.0)
    panel.legend(fontsize="small", loc="lower right")
    panel.grid(alpha=0.3)


def _plot_kv(panel: Any, diagnosis: Diagnosis, logs: _Iterations) -> None:
    """Share of the KV blocks in use while each iteration ran, and the share held by
    prefills started and not finished; a tick at the top for every preemption, with the
    requests preempted 0/1/2/3+ times in the legend."""
    panel.step(logs.start, 100 * logs.kv, where="post", linewidth=0.6, color="tab:purple",
               label="in use")  # fmt: skip
    panel.step(logs.start, 100 * logs.kv_prefilling, where="post", linewidth=0.6,
               color="tab:orange", label="of them, started prefills")  # fmt: skip
    counts = diagnosis.row()
    spread = "/".join(str(counts[key]) for key in PREEMPTION_COLUMNS)
    times = diagnosis.preemption_times
    panel.scatter(
        times, np.full(times.size, 102.0), s=8, marker="|", color="tab:red", zorder=3,
        label=f"preemptions ({times.size}); requests preempted 0/1/2/3+: {spread}",
    )  # fmt: skip
    panel.set_ylim(0, 105)
    panel.legend(fontsize="small", loc="center right")
    panel.grid(alpha=0.3)


def _plot_decisions(panel: Any, logs: _Iterations, paths: list[str], span: float) -> None:
    """Per time bin, the share of the planned iterations (fast-forwarded decode runs left
    out) by decision path; blank where the policy planned none."""
    edges = np.linspace(0.0, span, _DECISION_BINS + 1)
    named = set(paths)
    grouped = np.array([p if p in named else "other" for p in logs.path])
    counts = [np.histogram(logs.start[grouped == p], edges)[0] for p in paths]
    total = np.maximum(np.sum(counts, axis=0), 1)
    panel.stackplot(
        edges[:-1], [c / total for c in counts], step="post", labels=paths,
        colors=[f"C{index % 10}" for index in range(len(paths))],  # the default cycle
    )  # fmt: skip
    panel.set_ylim(0, 1)


def _decision_paths(diagnoses: Sequence[Diagnosis]) -> list[str]:
    """The policies' decision paths over every run (not the simulator's decode runs), the
    most used first ("other" for the rest), so that a path has one colour in every column."""
    used = Counter(
        log.path for d in diagnoses for log in d.iterations if log.path != DECODE_RUN
    ).most_common()
    paths = [path for path, _ in used[:_MOST_PATHS]]
    return [*paths, "other"] if len(used) > _MOST_PATHS else paths
