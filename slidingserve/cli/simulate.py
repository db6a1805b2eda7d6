"""The `simulate` command: policy × workload × rate → a table of metrics."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from slidingserve.cli import settings as cfg
from slidingserve.cli.flags import add_cluster_flags, add_setup_flags, comma_list, positive_float
from slidingserve.eval.report import (
    cluster_note,
    latency_model_lines,
    simulation_table,
    tier_table,
    workload_note,
)
from slidingserve.reporting import write_csv, write_json
from slidingserve.sim.runner import SimulationResult, SimulationSpec, simulate
from slidingserve.workloads import WorkloadConfig


def add_parser(commands: Any) -> None:
    """Add `simulate` to the `slidingserve` subcommands."""
    parser = commands.add_parser("simulate", help="policy × workload × rate → metrics table")
    parser.add_argument(
        "--policy", type=comma_list, default=cfg.SIMULATE_POLICIES, help="names, a,b"
    )
    parser.add_argument(
        "--workload", type=comma_list, help=f"names (default {cfg.WORKLOAD}; with --trace: trace)"
    )
    parser.add_argument(
        "--rate",
        type=positive_float,
        nargs="+",
        help=f"req/s (default {cfg.RATE:g}; a replayed trace: its recorded rate)",
    )
    parser.add_argument("--seed", type=int, default=cfg.SEED)
    parser.add_argument("--out", type=Path, help="write results to a .json or .csv file")
    add_setup_flags(parser)
    add_cluster_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Simulate every policy on every workload at every rate; print the tables."""
    if args.out and args.out.suffix not in (".json", ".csv"):
        raise ValueError(f"--out must end in .json or .csv, got {args.out}")
    settings = cfg.settings_from(args)
    options = cfg.policy_options(settings, args.policy)
    hardware = cfg.hardware_config(settings)
    workloads = [
        cfg.workload_config(settings, name, cfg.RUN_REQUESTS)
        for name in cfg.workload_names(settings, args.workload)
    ]
    results = [
        simulate(spec, rate, args.seed)
        for spec in _specs(settings, options, args.policy, workloads)
        for rate in cfg.default_rates(args.rate, spec.workload, args.seed)
    ]
    cluster = cfg.cluster_layout(settings)
    for replica in dict.fromkeys(cluster.replicas if cluster else (hardware,)):
        setup = f"{replica.gpu} {replica.model} TP{replica.tp}"
        print(f"{setup}, latency model:\n{latency_model_lines(replica)}\n")
    if cluster:
        print(f"{cluster_note(cluster)}\n")
    for workload in workloads:
        limits = cfg.engine_limits(settings)
        model_len = hardware.model_spec().max_model_len
        print(workload_note(workload, model_len, args.seed, limits.prefix_caching))
    _print_tables(results)
    if args.out:
        _write_results(args.out, [result.to_row() for result in results])
    return 0


def _specs(
    settings: cfg.Settings,
    options: dict[str, dict[str, Any]],
    policies: tuple[str, ...],
    workloads: list[WorkloadConfig],
) -> list[SimulationSpec]:
    """One spec per workload and policy, policies varying fastest (on a cluster when
    [cluster] names one)."""
    cluster = cfg.cluster_layout(settings)
    hardware = cluster.replicas[0] if cluster else cfg.hardware_config(settings)
    return [
        SimulationSpec(
            policy,
            workload,
            hardware,
            cfg.engine_limits(settings),
            options.get(policy, {}),
            cfg.tbt_reading(settings),
            cluster=cluster,
        )
        for workload in workloads
        for policy in policies
    ]


def _print_tables(results: list[SimulationResult]) -> None:
    print(simulation_table(results))
    tiered = [result for result in results if result.tiers]
    if tiered:
        print("\nBy SLO tier:")
        print(tier_table(tiered))


def _write_results(path: Path, rows: list[dict[str, Any]]) -> None:
    if path.suffix == ".csv":
        write_csv(path, rows)
    else:
        write_json(path, rows)
    print(f"wrote {path}")
