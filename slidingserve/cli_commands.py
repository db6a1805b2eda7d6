"""What each `slidingserve` subcommand does, given its parsed arguments."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from slidingserve import config as cfg
from slidingserve.cli_flags import workload_flags
from slidingserve.core.checks import is_integer
from slidingserve.eval.experiment import GoodputExperiment
from slidingserve.eval.report import (
    latency_model_lines,
    simulation_table,
    tier_table,
    workload_note,
)
from slidingserve.predictor import PredictorMetadata, save_predictor
from slidingserve.predictor.calibration import fit_batches
from slidingserve.predictor.steps import load_engine_steps
from slidingserve.reporting import write_csv, write_json
from slidingserve.sim.profiling import hardware_label, profile_batches
from slidingserve.sim.runner import SimulationSpec, simulate
from slidingserve.workloads import WorkloadConfig, recorded_rate


def _rates(given: list[float] | None, workload: WorkloadConfig, seed: int) -> list[float]:
    """The rates to simulate: those given, else a replayed trace's recorded rate, else 1."""
    if given:
        return given
    return [recorded_rate(workload, seed)] if workload.replays else [1.0]


def settings_from(args: argparse.Namespace) -> cfg.Settings:
    """The --config file with the flags on top."""
    settings = cfg.load_settings(args.config)
    cfg.override(
        settings,
        "hardware",
        gpu=args.gpu,
        model=args.model,
        tp=args.tp,
        noise=args.noise,
        profile_dir=args.profile_dir,
    )
    cfg.override(
        settings,
        "engine",
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
    )
    cfg.override(settings, "workload", tbt_reading=args.tbt_reading, **workload_flags(args))
    cfg.parse_assignments(args.set, settings)
    return settings


def run_simulate(args: argparse.Namespace) -> int:
    if args.out and args.out.suffix not in (".json", ".csv"):
        raise ValueError(f"--out must end in .json or .csv, got {args.out}")
    settings = settings_from(args)
    options = cfg.policy_options(settings, args.policy)
    hardware = cfg.hardware_config(settings)
    workloads = [
        cfg.workload_config(settings, name, 1000)
        for name in cfg.workload_names(settings, args.workload, ("sharegpt",))
    ]
    specs = [
        SimulationSpec(
            policy,
            workload,
            hardware,
            cfg.engine_limits(settings),
            options.get(policy, {}),
            cfg.tbt_reading(settings),
        )
        for workload in workloads
        for policy in args.policy
    ]
    results = [
        simulate(spec, rate, args.seed)
        for spec in specs
        for rate in _rates(args.rate, spec.workload, args.seed)
    ]
    setup = f"{hardware.gpu} {hardware.model} TP{hardware.tp}"
    print(f"{setup}, latency model:\n{latency_model_lines(hardware)}\n")
    for workload in workloads:
        print(workload_note(workload, hardware.model_spec().max_model_len, args.seed))
    print(simulation_table(results))
    tiered = [result for result in results if result.tiers]
    if tiered:
        print("\nBy SLO tier:")
        print(tier_table(tiered))
    if args.out:
        _write_results(args.out, [result.to_row() for result in results])
    return 0


def _write_results(path: Path, rows: list[dict[str, Any]]) -> None:
    if path.suffix == ".csv":
        write_csv(path, rows)
    else:
        write_json(path, rows)
    print(f"wrote {path}")


def experiment_from(args: argparse.Namespace, settings: cfg.Settings) -> GoodputExperiment:
    cfg.override(
        settings,
        "goodput",
        policies=args.policies,
        workloads=args.workloads,
        seeds=args.seeds,
        threshold=args.threshold,
        precision=args.precision,
        curve_points=args.curve_points,
        jobs=args.jobs,
        criteria=args.criteria,
        reference=args.reference,
    )
    table = settings["goodput"]
    defaults = GoodputExperiment()
    policies = tuple(table.get("policies", defaults.policies))
    seeds = table.get("seeds", len(defaults.seeds))
    reference = table.get("reference", defaults.reference)
    if "reference" in table and reference not in policies:
        raise ValueError(f"reference policy {reference!r} is not among {', '.join(policies)}")
    workload = settings["workload"]
    return GoodputExperiment(
        policies=policies,
        workloads=cfg.workload_names(settings, table.get("workloads"), defaults.workloads),
        seeds=tuple(seeds) if isinstance(seeds, list) else tuple(range(_count(seeds, "seeds"))),
        num_requests=workload.get("requests", defaults.num_requests),
        arrival=cfg.arrival_config(settings),
        slo_preset=workload.get("slo", defaults.slo_preset),
        slo_scale=workload.get("slo_scale", defaults.slo_scale),
        trace_dir=workload.get("trace_dir"),
        traces=cfg.trace_sources(settings),
        trace_start=workload.get("trace_start", defaults.trace_start),
        trace_spread=workload.get("trace_spread", defaults.trace_spread),
        tbt_reading=cfg.tbt_reading(settings),
        tiers=cfg.tier_mix(settings),
        criteria=tuple(table.get("criteria", defaults.criteria)),
        hardware=cfg.hardware_config(settings),
        limits=cfg.engine_limits(settings),
        policy_options=cfg.policy_options(settings, policies),
        search=cfg.search_settings(settings),
        curve_points=table.get("curve_points", defaults.curve_points),
        jobs=table.get("jobs", defaults.jobs),
        reference=reference,
    )


def _count(value: Any, name: str) -> int:
    if not is_integer(value) or value < 1:
        raise ValueError(f"{name} must be a positive count or a list, got {value!r}")
    return value


def run_predictor(args: argparse.Namespace) -> int:
    """Fit the predictor of `--features` to the simulated GPU, or to `--steps`, and print
    its held-out accuracy; `--out` saves it."""
    if args.steps is not None:
        steps = load_engine_steps(args.steps)
        result = fit_batches(list(steps.batches), args.seed, features=args.features)
        model, hardware, source = steps.engine, "engine-steps", f"steps of {steps.engine}"
    else:
        settings = settings_from(args)
        config = cfg.hardware_config(settings)
        limits = cfg.engine_limits(settings)
        batches = profile_batches(config, limits, args.samples, args.seed)
        result = fit_batches(batches, args.seed, features=args.features)
        model, hardware = config.model, hardware_label(config)
        source = f"batches of the simulated {config.model} on {config.gpu} TP{config.tp}"
    print(
        f"Predictor ({args.features} features) fitted on {result.num_samples} {source}; "
        "held-out accuracy:\n"
    )
    print(result.validation.format_table())
    if args.out:
        metadata = PredictorMetadata.from_fit(result, model, hardware)
        save_predictor(args.out, result.predictor, metadata)
        print(f"\nwrote {args.out}")
    return 0
