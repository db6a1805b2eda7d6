"""The regime map as text, CSV rows, JSON and the grid its heatmap draws."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import Any, NamedTuple

from slidingserve.eval.regimes import BEST_BASELINE, RegimeCell, RegimeResult
from slidingserve.reporting import format_table


class HeatmapGrid(NamedTuple):
    """One hardware point's map as its heatmap draws it: rows are workload × arrival, columns
    SLO scales; `ratio[r][c]` is the cell's mean ratio (NaN when undefined)."""

    title: str  # the hardware point
    rows: list[str]  # `workload arrival`
    columns: list[str]  # `×scale`
    ratio: list[list[float]]  # mean of the per-seed ratios to the best baseline
    labels: list[list[str]]  # `mean [low, high] *`, as the text table writes it
    significant: list[list[bool]]  # the interval excludes 1


def heatmap_grid(result: RegimeResult, hardware: str) -> HeatmapGrid:
    """The grid of one hardware point (a `GPU:MODEL:TP` label of the map)."""
    regimes = result.regimes
    keys = [(w, a) for w in regimes.setup.workloads for a in regimes.arrival_labels]
    cells = [
        [result.cell(hardware, workload, arrival, scale) for scale in regimes.slo_scales]
        for workload, arrival in keys
    ]
    return HeatmapGrid(
        title=hardware,
        rows=[f"{workload} {arrival}" for workload, arrival in keys],
        columns=[f"×{scale:g}" for scale in regimes.slo_scales],
        ratio=[[c.ratio.mean for c in row] for row in cells],
        labels=[[c.ratio.format() for c in row] for row in cells],
        significant=[[c.ratio.significant for c in row] for row in cells],
    )


def regime_table(result: RegimeResult, hardware: str) -> str:
    """Workload × arrival down, SLO scales across: `1.04 [0.98, 1.10] *`; then, where the
    memory-aware bound was computed, the candidate's goodput as a share of it."""
    grid = heatmap_grid(result, hardware)
    rows = [[name, *labels] for name, labels in zip(grid.rows, grid.labels, strict=True)]
    table = format_table(["workload arrival", *grid.columns], rows)
    bounds = bound_table(result, hardware)
    return table if not bounds else f"{table}\n\n{bounds}"


def bound_table(result: RegimeResult, hardware: str) -> str:
    """Workload down: the capacity and memory-aware bounds (req/s) and what binds the latter;
    across, per arrival × SLO scale, the candidate's mean goodput ÷ the memory-aware bound.
    Empty when no cell of `hardware` has the bound."""
    regimes = result.regimes
    cells = [c for c in result.cells if c.hardware == hardware]
    if not cells or all(math.isnan(c.memory_bound) for c in cells):
        return ""
    settings = [(a, s) for a in regimes.arrival_labels for s in regimes.slo_scales]
    header = ["workload", "capacity", "memory (binds)"]
    header += [f"{arrival} ×{scale:g}" for arrival, scale in settings]
    rows = []
    for workload in regimes.setup.workloads:
        here = [result.cell(hardware, workload, a, s) for a, s in settings]
        first = here[0]
        rows.append(
            [
                workload,
                f"{first.capacity_bound:.2f}",
                f"{first.memory_bound:.2f} ({first.memory_binding})",
                *(f"{_memory_share(cell):.0%}" for cell in here),
            ]
        )
    title = (
        f"{regimes.candidate}'s goodput (mean over seeds) ÷ the memory-aware bound "
        "(req/s; kv: the KV cache lowers it below the capacity bound)"
    )
    return f"{title}\n{format_table(header, rows)}"


def _memory_share(cell: RegimeCell) -> float:
    return statistics.fmean(cell.goodput[cell.candidate]) / cell.memory_bound


def describe_regimes(result: RegimeResult) -> str:
    regimes = result.regimes
    e = regimes.setup
    tiers = f", tiers {'/'.join(e.tiers.names)}" if e.tiers else ""
    return (
        f"{regimes.candidate}'s goodput ÷ the best of {', '.join(regimes.baselines)} on the "
        f"same seed: mean [95% t-interval over {len(e.seeds)} seeds], * where it excludes 1\n"
        f"{BEST_BASELINE}\n"
        f"{e.slo_preset} SLOs × scale{tiers}, {e.num_requests} requests per trial, seeds "
        f"{list(e.seeds)}, ≤ {e.search.threshold:.0%} violating ({regimes.criterion}), "
        f"precision {e.search.precision:.0%}, TBT violations read {e.tbt_reading.value}"
    )


def regime_rows(result: RegimeResult) -> list[dict[str, Any]]:
    """One CSV row per cell; per-seed values joined by spaces, in seed order."""
    policies = result.regimes.policies
    return [
        {
            "hardware": cell.hardware,
            "workload": cell.workload,
            "arrival": cell.arrival,
            "slo_scale": cell.slo_scale,
            "seeds": " ".join(str(seed) for seed in cell.seeds),
            **{f"goodput_{p}": _joined(cell.goodput[p]) for p in policies},
            **{f"goodput_mean_{p}": statistics.fmean(cell.goodput[p]) for p in policies},
            "best_baseline": " ".join(cell.best_baseline),
            "best_baseline_goodput": _joined(cell.best_baseline_goodput),
            "ratio_per_seed": _joined(cell.ratio.per_seed),
            "ratio_mean": cell.ratio.mean,
            "ratio_low": cell.ratio.low,
            "ratio_high": cell.ratio.high,
            "significant": cell.ratio.significant,
            "capacity_bound": cell.capacity_bound,
            "memory_aware_bound": cell.memory_bound,
            "memory_bound_binding": cell.memory_binding,
            "candidate_share_of_memory_bound": _memory_share(cell),
        }
        for cell in result.cells
    ]


def regime_payload(result: RegimeResult) -> dict[str, Any]:
    regimes = result.regimes
    return {
        "setup": describe_regimes(result),
        "best_baseline": BEST_BASELINE,
        "map": {
            "candidate": regimes.candidate,
            "baselines": list(regimes.baselines),
            "slo_scales": list(regimes.slo_scales),
            "arrivals": regimes.arrival_labels,
            "hardware": regimes.hardware_labels,
            "setup": dataclasses.asdict(regimes.setup),
        },
        "cells": [_cell_payload(cell) for cell in result.cells],
    }


def _cell_payload(cell: RegimeCell) -> dict[str, Any]:
    return {
        **dataclasses.asdict(cell),
        "best_baseline_goodput": list(cell.best_baseline_goodput),
        "significant": cell.ratio.significant,
    }


def _joined(values: Sequence[float]) -> str:
    return " ".join(f"{v:.4f}" for v in values)
