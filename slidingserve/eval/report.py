"""Tables and files from experiment results."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slidingserve.eval.experiment import ExperimentResult
    from slidingserve.sim.runner import SimulationResult


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table, first column left-aligned, the others right-aligned."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [str(cells[0]).ljust(widths[0])]
        parts += [str(cell).rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(parts)

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def goodput_table(result: ExperimentResult, criterion: str | None = None) -> str:
    """Workloads down, policies across: mean ± std goodput (req/s) and its share of the bound,
    under `criterion` (default: the experiment's first)."""
    experiment = result.experiment
    criterion = criterion or experiment.criteria[0]
    header = ["workload", "bound", *experiment.policies]
    rows = []
    for workload in experiment.workloads:
        cells = [workload, f"{result.bounds[workload].rate:.2f}"]
        for policy in experiment.policies:
            row = next(
                r
                for r in result.rows
                if r.policy == policy and r.workload == workload and r.criterion == criterion
            )
            cells.append(
                f"{row.goodput_mean:.2f} ± {row.goodput_std:.2f} ({row.fraction_of_bound:.0%})"
            )
        rows.append(cells)
    return format_table(header, rows)


def describe_setup(result: ExperimentResult) -> str:
    e = result.experiment
    tiers = f", tiers {'/'.join(e.tiers.names)}" if e.tiers else ""
    return (
        f"{e.hardware.gpu} {e.hardware.model} TP{e.hardware.tp}, {e.slo_preset} SLOs "
        f"(scale {e.slo_scale:g}){tiers}, {e.arrival.process} arrivals, {e.num_requests} requests "
        f"per trial, seeds {list(e.seeds)}, ≤ {e.search.threshold:.0%} violating, "
        f"precision {e.search.precision:.0%}, TBT violations read {e.tbt_reading.value}"
    )


def simulation_table(results: Sequence[SimulationResult]) -> str:
    header = ["policy", "workload", "rate", "viol%", "ttft%", "tbt%"]
    header += ["TTFT p50/p99 ms", "TBT p50/p99 ms", "TPOT p50 ms", "req/s", "tok/s"]
    rows = []
    for result in results:
        row = result.to_row()
        rows.append(
            [
                row["policy"],
                row["workload"],
                f"{row['rate']:.2f}",
                f"{100 * row['violation_rate']:.1f}",
                f"{100 * row['ttft_violation_rate']:.1f}",
                f"{100 * row['tbt_violation_rate']:.1f}",
                f"{row['ttft_p50_ms']:.0f} / {row['ttft_p99_ms']:.0f}",
                f"{row['tbt_p50_ms']:.1f} / {row['tbt_p99_ms']:.1f}",
                f"{row['tpot_p50_ms']:.1f}",
                f"{row['throughput_rps']:.2f}",
                f"{row['output_tps']:.0f}",
            ]
        )
    return format_table(header, rows)


def tier_table(results: Sequence[SimulationResult]) -> str:
    """One row per run and tier: violations and TTFT/TBT percentiles of that tier."""
    header = ["policy", "workload", "rate", "tier", "requests", "viol%", "ttft%", "tbt%"]
    header += ["TTFT p50/p99 ms", "TBT p99 ms"]
    rows = []
    for result in results:
        for tier, m in result.tiers.items():
            rows.append(
                [
                    result.policy,
                    result.workload,
                    f"{result.rate:.2f}",
                    tier,
                    str(m.num_requests),
                    f"{100 * m.violation_rate:.1f}",
                    f"{100 * m.ttft_violation_rate:.1f}",
                    f"{100 * m.tbt_violation_rate:.1f}",
                    f"{m.ttft.p50 * 1000:.0f} / {m.ttft.p99 * 1000:.0f}",
                    f"{m.tbt.p99 * 1000:.1f}",
                ]
            )
    return format_table(header, rows)


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def write_json(path: Path, payload: Any) -> None:
    """Write `payload` as strict JSON: NaN (an undefined percentile) becomes null."""
    path.parent.mkdir(parents=True, exist_ok=True)
    plain = json.loads(json.dumps(payload, default=_jsonable))
    path.write_text(json.dumps(_nan_to_none(plain), indent=2, allow_nan=False) + "\n")


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _nan_to_none(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_nan_to_none(item) for item in value]
    return value


def experiment_payload(result: ExperimentResult) -> dict[str, Any]:
    return {
        "setup": describe_setup(result),
        "experiment": dataclasses.asdict(result.experiment),
        "capacity_bounds": {k: dataclasses.asdict(v) for k, v in result.bounds.items()},
        "goodput": [
            {**dataclasses.asdict(row), "fraction_of_bound": row.fraction_of_bound}
            for row in result.rows
        ],
        "violation_curve": [dataclasses.asdict(point) for point in result.curve],
    }


def goodput_rows(result: ExperimentResult) -> list[dict[str, Any]]:
    return [
        {
            "policy": row.policy,
            "workload": row.workload,
            "criterion": row.criterion,
            "goodput_mean": row.goodput_mean,
            "goodput_std": row.goodput_std,
            "interpolated_mean": row.interpolated_mean,
            "per_seed": " ".join(f"{v:.4f}" for v in row.per_seed),
            "capacity_bound": row.capacity_bound,
            "fraction_of_bound": row.fraction_of_bound,
            "trials": row.trials,
        }
        for row in result.rows
    ]


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "value"):  # enums
        return value.value
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
