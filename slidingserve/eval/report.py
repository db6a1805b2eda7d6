"""Tables and files from experiment results."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from slidingserve.eval.ratios import (
    RatioInterval,
    best_static_ratios,
    compared_families,
    goodput_ratios,
)
from slidingserve.reporting import format_table
from slidingserve.sim.hardware import hardware_label
from slidingserve.workloads import recorded_rate, sample_workload

if TYPE_CHECKING:
    from slidingserve.eval.experiment import ExperimentResult, GoodputExperiment, GoodputRow
    from slidingserve.sim.cluster import ClusterLayout
    from slidingserve.sim.hardware import HardwareConfig
    from slidingserve.sim.runner import SimulationResult
    from slidingserve.workloads import WorkloadConfig


def goodput_table(result: ExperimentResult, criterion: str | None = None) -> str:
    """Workloads down, policies across: mean ± std goodput (req/s) and its share of each
    bound computed (capacity / SLO-aware / memory-aware), under `criterion` (default: the
    experiment's first)."""

    def cell(row: GoodputRow) -> str:
        shares = [row.goodput_mean / rate for rate in result.bound_rates(row.workload)]
        return f"{goodput_text(row)} ({' / '.join(f'{share:.0%}' for share in shares)})"

    return _policy_grid(result, criterion, cell, bound=True)


def goodput_text(row: GoodputRow) -> str:
    """`3.21 ± 0.10`: mean ± std over seeds, req/s."""
    return f"{row.goodput_mean:.2f} ± {row.goodput_std:.2f}"


def at_goodput_table(result: ExperimentResult, criterion: str | None = None) -> str:
    """Workloads down, policies across: at each seed's goodput rate, the p99 gap between
    tokens (ms) and the share of requests with a gap over their TBT (per-gap reading), the
    prefix cache's hit rate where the run had one, and the preemptions per run (mean over
    the seeds) where there were any."""

    def cell(row: GoodputRow) -> str:
        at = row.at_goodput
        if math.isnan(at.tbt_p99):
            return "n/a"
        hits = "" if math.isnan(at.prefix_hit_rate) else f", {100 * at.prefix_hit_rate:.0f}% hits"
        preempted = f", {at.preemptions:.3g} preempted" if at.preemptions > 0 else ""
        return f"{1000 * at.tbt_p99:.0f} ms ({100 * at.per_gap_violation:.1f}%{hits}{preempted})"

    return _policy_grid(result, criterion, cell, bound=False)


def ratio_table(result: ExperimentResult, criterion: str | None = None) -> str:
    """Workloads down, the other policies across: mean per-seed goodput ratio to the
    reference policy with its 95% interval; `*` where the interval excludes 1."""
    experiment = result.experiment
    others = [p for p in experiment.policies if p != experiment.reference_policy]
    cells = _ratio_cells(result, criterion)
    rows = [[workload, *cells[workload]] for workload in experiment.workloads]
    return format_table(["workload", *others], rows)


def best_static_table(result: ExperimentResult, base: str, criterion: str | None = None) -> str:
    """Workloads down: the best label of `base`'s family there, then every other policy's
    per-seed goodput ratio to it with its 95% interval."""
    ratios = best_static_ratios(result, base, criterion)
    others = list(dict.fromkeys(r.policy for r in ratios))
    rows = []
    for workload in result.experiment.workloads:
        here = {r.policy: r for r in ratios if r.workload == workload}
        best = here[others[0]].reference
        rows.append([workload, best, *(here[p].interval.format() for p in others)])
    return format_table(["workload", f"{base}*", *others], rows)


def hardware_summary_table(
    results: Sequence[ExperimentResult], criterion: str | None = None
) -> str:
    """Hardware point × workload down; across, each policy's goodput (req/s, mean ± std),
    then each other policy's per-seed goodput ratio to the reference with its 95% interval
    (`*` where it excludes 1). The results differ only in their hardware."""
    experiment = results[0].experiment
    reference = experiment.reference_policy
    others = [p for p in experiment.policies if p != reference]
    header = ["hardware", "workload", *experiment.policies]
    header += [f"{policy} ÷ {reference}" for policy in others]
    rows = []
    for result in results:
        goodput = _policy_cells(result, criterion, goodput_text)
        ratios = _ratio_cells(result, criterion)
        point = hardware_label(result.experiment.hardware)
        rows += [[point, w, *goodput[w], *ratios[w]] for w in result.experiment.workloads]
    return format_table(header, rows)


def _ratio_cells(result: ExperimentResult, criterion: str | None) -> dict[str, list[str]]:
    """By workload: each policy's but the reference's goodput ratio, `1.04 [0.98, 1.10] *`."""
    experiment = result.experiment
    ratios = goodput_ratios(result, experiment.reference_policy, criterion)
    others = [p for p in experiment.policies if p != experiment.reference_policy]
    cells = {}
    for workload in experiment.workloads:
        by_policy = {r.policy: r.interval for r in ratios if r.workload == workload}
        cells[workload] = [by_policy[p].format() for p in others]
    return cells


def _policy_grid(
    result: ExperimentResult,
    criterion: str | None,
    cell: Callable[[GoodputRow], str],
    bound: bool,
) -> str:
    experiment = result.experiment
    bound_names = "bound" + (" / SLO-aware" if result.slo_bounds else "")
    bound_names += " / memory" if result.memory_bounds else ""
    header = ["workload", *([bound_names] if bound else []), *experiment.policies]
    cells = _policy_cells(result, criterion, cell)
    rows = [
        [workload, *([_bounds_cell(result, workload)] if bound else []), *cells[workload]]
        for workload in experiment.workloads
    ]
    return format_table(header, rows)


def _policy_cells(
    result: ExperimentResult, criterion: str | None, cell: Callable[[GoodputRow], str]
) -> dict[str, list[str]]:
    """By workload: `cell` of each policy's row, in the experiment's order of policies,
    under `criterion` (default: the experiment's first)."""
    experiment = result.experiment
    criterion = criterion or experiment.criteria[0]
    rows = {(r.policy, r.workload): r for r in result.rows if r.criterion == criterion}
    return {
        workload: [cell(rows[policy, workload]) for policy in experiment.policies]
        for workload in experiment.workloads
    }


def _bounds_cell(result: ExperimentResult, workload: str) -> str:
    """`3.20`, then ` / 2.60` with the SLO-aware bound and ` / 3.05 kv` with the
    memory-aware one (req/s; `kv` where the cache binds it, `compute` where it does not)."""
    text = f"{result.bounds[workload].rate:.2f}"
    slo_bound = result.slo_bounds.get(workload)
    if slo_bound is not None:
        text += f" / {slo_bound.rate:.2f}"
    memory = result.memory_bounds.get(workload)
    if memory is not None:
        text += f" / {memory.rate:.2f} {memory.binding}"
    return text


def describe_setup(result: ExperimentResult) -> str:
    e = result.experiment
    tiers = f", tiers {'/'.join(e.tiers.names)}" if e.tiers else ""
    hardware = f"{e.hardware.gpu} {e.hardware.model} TP{e.hardware.tp}"
    if e.cluster is not None:
        hardware = _replicas_text(e.cluster) + f" behind the {e.cluster.router} router"
    return (
        f"{hardware}, {e.slo_preset} SLOs "
        f"(scale {e.slo_scale:g}){tiers}, {e.arrival.process} arrivals, {e.num_requests} requests "
        f"per trial, seeds {list(e.seeds)}, ≤ {e.search.threshold:.0%} violating, "
        f"precision {e.search.precision:.0%}, TBT violations read {e.tbt_reading.value}"
    )


def workload_note(
    workload: WorkloadConfig, max_model_len: int, seed: int = 0, prefix_caching: bool = True
) -> str:
    """One line on where a workload's requests come from, how many were trimmed to the
    model's context (seed `seed`'s trial), and what they share with the prefix cache on or
    off (`prefix_caching`), when the workload says what they share."""
    sample = sample_workload(workload, 1.0, seed, max_model_len)
    if workload.traces:
        files = ", ".join(
            f"{trace.path} ({trace.workload_class}"
            + (f", weight {trace.weight:g})" if len(workload.traces) > 1 else ")")
            for trace in workload.traces
        )
        if workload.replays:
            start = workload.trace_start + seed * workload.num_requests
            spread = ", shared timestamps spread" if workload.trace_spread else ""
            how = (
                f"replayed: rows {start}–{start + workload.num_requests - 1} with their own "
                f"arrival times{spread} (recorded {recorded_rate(workload, seed):.2f} req/s), "
                "rescaled to each rate"
            )
        else:
            how = f"lengths resampled, {workload.arrival.process} arrivals"
        text = f"workload {workload.name}: {files}; {how}"
    else:
        text = f"workload {workload.name}: {workload.arrival.process} arrivals"
    trimmed = (
        f"{sample.trimmed} of {len(sample)} requests trimmed to the {max_model_len}-token context"
    )
    shared = workload.prefix_note()
    if shared:
        cache = "prefix cache on" if prefix_caching else "prefix cache off (--no-prefix-cache)"
        shared = f"; {shared}; {cache}"
    return f"{text}; {trimmed} (seed {seed}){shared}"


def latency_model_lines(hardware: HardwareConfig) -> str:
    """Where the simulated GPU's times come from (measured, derived, scaled), indented."""
    return "\n".join(f"  {line}" for line in hardware.provenance())


def simulation_table(results: Sequence[SimulationResult]) -> str:
    """One row per run. `viol%`, `ttft%` and `tbt%` use the run's TBT reading; `cum%` and
    `gap%` are the violating shares under each reading; TBT percentiles are of every gap."""
    header = ["policy", "workload", "rate", "viol%", "ttft%", "tbt%", "cum%", "gap%"]
    header += ["TTFT p50/p99 ms", "TBT p50/p99 ms", "TPOT p50 ms", "req/s", "tok/s"]
    cached = any(result.prefix_hit_rate is not None for result in results)
    header += ["prefix hits%"] if cached else []
    clustered = any(result.cluster is not None for result in results)
    header += ["router", "requests per replica", "refused"] if clustered else []
    rows = []
    for result in results:
        row = result.to_row()
        rows.append(
            [
                row["policy"],
                row["workload"],
                f"{row['rate']:.2f}",
                *(
                    _percent(row[key])
                    for key in (
                        "violation_rate",
                        "ttft_violation_rate",
                        "tbt_violation_rate",
                        "cumulative_violation_rate",
                        "per_gap_violation_rate",
                    )
                ),
                f"{row['ttft_p50_ms']:.0f} / {row['ttft_p99_ms']:.0f}",
                f"{row['tbt_p50_ms']:.1f} / {row['tbt_p99_ms']:.1f}",
                f"{row['tpot_p50_ms']:.1f}",
                f"{row['throughput_rps']:.2f}",
                f"{row['output_tps']:.0f}",
            ]
        )
        if cached:
            hits = result.prefix_hit_rate
            rows[-1].append("off" if hits is None else _percent(hits))
        if clustered:
            rows[-1] += _cluster_cells(result)
    return format_table(header, rows)


def cluster_note(cluster: ClusterLayout) -> str:
    """One line: the replicas (each distinct hardware point with its count) and the router;
    rates are the cluster's."""
    return (
        f"cluster: {_replicas_text(cluster)} behind the {cluster.router} router; rates and "
        "goodputs are the cluster's (docs/cluster.md)"
    )


def _replicas_text(cluster: ClusterLayout) -> str:
    counts = Counter(hardware_label(hardware) for hardware in cluster.replicas)
    return " + ".join(f"{n} × {label}" for label, n in counts.items())


def per_replica_lines(result: ExperimentResult, criterion: str) -> str:
    """On a cluster: each policy's goodput ÷ the replicas, per workload (empty otherwise)."""
    cluster = result.experiment.cluster
    if cluster is None:
        return ""
    lines = [f"goodput per replica (÷ {cluster.size}), req/s:"]
    for workload in result.experiment.workloads:
        rows = [r for r in result.rows if r.workload == workload and r.criterion == criterion]
        cells = ", ".join(f"{r.policy} {r.goodput_mean / cluster.size:.3f}" for r in rows)
        lines.append(f"  {workload}: {cells}")
    return "\n".join(lines)


def _cluster_cells(result: SimulationResult) -> list[str]:
    """Router, requests each replica was handed, requests the router refused."""
    if result.cluster is None:
        return ["-", "-", "-"]
    row = result.cluster.row()
    return [str(row["router"]), str(row["requests_per_replica"]), str(row["refused_by_router"])]


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}"


def tier_table(results: Sequence[SimulationResult]) -> str:
    """One row per run and tier: violations and TTFT/TBT percentiles of that tier."""
    header = ["policy", "workload", "rate", "tier", "requests", "viol%", "ttft%", "tbt%"]
    header += ["gap%", "TTFT p50/p99 ms", "TBT p99 ms"]
    rows = []
    for result in results:
        for tier, m in result.tiers.items():
            violations = result.tier_violations(tier)
            rows.append(
                [
                    result.policy,
                    result.workload,
                    f"{result.rate:.2f}",
                    tier,
                    str(m.requests),
                    f"{100 * violations.overall:.1f}",
                    f"{100 * violations.ttft:.1f}",
                    f"{100 * violations.tbt:.1f}",
                    f"{100 * m.per_gap.overall:.1f}",
                    f"{m.ttft.p50 * 1000:.0f} / {m.ttft.p99 * 1000:.0f}",
                    f"{m.itl.p99 * 1000:.1f}",
                ]
            )
    return format_table(header, rows)


def _experiment_fields(experiment: GoodputExperiment) -> dict[str, Any]:
    """The experiment's fields; `cluster` only where one ran (with its size)."""
    fields = dataclasses.asdict(experiment)
    if experiment.cluster is None:
        del fields["cluster"]
    else:
        fields["cluster"]["size"] = experiment.cluster.size
    return fields


def experiment_payload(result: ExperimentResult) -> dict[str, Any]:
    return {
        "setup": describe_setup(result),
        "latency_model": list(result.experiment.hardware.provenance()),
        "experiment": _experiment_fields(result.experiment),
        "capacity_bounds": {k: dataclasses.asdict(v) for k, v in result.bounds.items()},
        "slo_aware_bounds": {k: dataclasses.asdict(v) for k, v in result.slo_bounds.items()},
        "memory_aware_bounds": {
            k: {**dataclasses.asdict(v), "binding": v.binding}
            for k, v in result.memory_bounds.items()
        },
        "goodput": [
            {
                **dataclasses.asdict(row),
                "fraction_of_bound": row.fraction_of_bound,
                **_memory_bound_fields(result, row),
            }
            for row in result.rows
        ],
        "goodput_ratios": [
            {**dataclasses.asdict(row), "significant": row.interval.significant}
            for criterion in result.experiment.criteria
            for row in goodput_ratios(result, result.experiment.reference_policy, criterion)
        ],
        "best_static_ratios": [
            {**dataclasses.asdict(row), "significant": row.interval.significant}
            for criterion in result.experiment.criteria
            for base in compared_families(result.experiment.policies)
            for row in best_static_ratios(result, base, criterion)
        ],
        "violation_curve": [dataclasses.asdict(point) for point in result.curve],
    }


def goodput_rows(result: ExperimentResult) -> list[dict[str, Any]]:
    reference = result.experiment.reference_policy
    ratios = {
        (ratio.policy, ratio.workload, ratio.criterion): ratio.interval
        for criterion in result.experiment.criteria
        for ratio in goodput_ratios(result, reference, criterion)
    }
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
            **_slo_bound_fields(result, row),
            **_memory_bound_fields(result, row),
            "trials": row.trials,
            "tbt_p99_ms_at_goodput": 1000 * row.at_goodput.tbt_p99,
            "cumulative_violation_at_goodput": row.at_goodput.cumulative_violation,
            "per_gap_violation_at_goodput": row.at_goodput.per_gap_violation,
            "prefix_hit_rate_at_goodput": row.at_goodput.prefix_hit_rate,
            "preemptions_at_goodput": row.at_goodput.preemptions,
            **_ratio_fields(reference, ratios.get((row.policy, row.workload, row.criterion))),
        }
        for row in result.rows
    ]


def _slo_bound_fields(result: ExperimentResult, row: GoodputRow) -> dict[str, Any]:
    """The row's SLO-aware bound (req/s) and its share of it; empty when not computed."""
    slo_bound = result.slo_bounds.get(row.workload)
    if slo_bound is None:
        return {"slo_aware_bound": "", "fraction_of_slo_aware_bound": ""}
    return {
        "slo_aware_bound": slo_bound.rate,
        "fraction_of_slo_aware_bound": row.goodput_mean / slo_bound.rate,
    }


def _memory_bound_fields(result: ExperimentResult, row: GoodputRow) -> dict[str, Any]:
    """The row's memory-aware bound (req/s), its share of it and what binds it; empty when
    not computed."""
    memory = result.memory_bounds.get(row.workload)
    if memory is None:
        return dict.fromkeys(
            ("memory_aware_bound", "fraction_of_memory_bound", "memory_bound_binding"), ""
        )
    return {
        "memory_aware_bound": memory.rate,
        "fraction_of_memory_bound": row.goodput_mean / memory.rate,
        "memory_bound_binding": memory.binding,
    }


def _ratio_fields(reference: str, interval: RatioInterval | None) -> dict[str, Any]:
    """A row's goodput ratio to the reference policy, for the CSV (empty for the reference)."""
    if interval is None:
        return dict.fromkeys(RATIO_FIELDS, "")
    values = (reference, interval.mean, interval.low, interval.high, interval.significant)
    return dict(zip(RATIO_FIELDS, values, strict=True))


RATIO_FIELDS = ("ratio_reference", "ratio_mean", "ratio_low", "ratio_high", "ratio_significant")
