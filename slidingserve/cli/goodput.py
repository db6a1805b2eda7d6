"""The `goodput` command: one experiment on --gpu/--model/--tp, or one per --hardware point
(each point's tables under a heading and its files in a subfolder), then a summary."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from slidingserve.cli import settings as cfg
from slidingserve.cli.flags import (
    add_cluster_flags,
    add_hardware_flag,
    add_ray_flag,
    add_search_flags,
    add_setup_flags,
    comma_list,
    refuse_both,
    workers_text,
)
from slidingserve.eval.experiment import (
    ExperimentResult,
    GoodputExperiment,
    run_experiment,
    task_count,
)
from slidingserve.eval.ratios import compared_families
from slidingserve.eval.report import (
    at_goodput_table,
    best_static_table,
    describe_setup,
    experiment_payload,
    goodput_rows,
    goodput_table,
    hardware_summary_table,
    latency_model_lines,
    per_replica_lines,
    ratio_table,
    workload_note,
)
from slidingserve.reporting import write_csv, write_json
from slidingserve.sim.hardware import HardwarePoint, hardware_folder, hardware_label

GOODPUT_DESCRIPTION = (
    "Searches each policy's goodput on each workload and seed, and prints it with its share "
    "of the capacity bounds, each policy's goodput ÷ the reference's on the same seed (mean "
    "and 95% interval) and the gaps between tokens at the goodput; writes goodput.json, "
    "goodput.csv and (with curve points) violation_vs_rate.png into --out-dir. With "
    "--hardware, once per point: each point's tables under `== GPU:MODEL:TP ==` and its "
    "files in a subfolder of --out-dir (e.g. a100_llama-3-8b_tp2), then one summary table "
    "of every point; a point that fails is reported, the others still run, and the exit "
    "status is then 2."
)
HARDWARE_EACH = "one run per point, its files in a subfolder of --out-dir, then a summary"
"""What `goodput` does per --hardware point (its help text)."""


def add_parser(commands: Any) -> None:
    """Add `goodput` to the `slidingserve` subcommands."""
    experiment = cfg.EXPERIMENT
    parser = commands.add_parser(
        "goodput",
        help="policies × workloads (× hardware points) → goodput tables + plot",
        description=GOODPUT_DESCRIPTION,
    )
    parser.add_argument(
        "--policies", type=comma_list, help=f"default {','.join(experiment.policies)}"
    )
    parser.add_argument(
        "--workloads", type=comma_list, help=f"default {','.join(experiment.workloads)}"
    )
    add_search_flags(parser, len(experiment.seeds), cfg.SEARCH)
    parser.add_argument(
        "--reference",
        help=f"goodput ratios are to this policy (default {experiment.reference}, "
        "or the first policy when it does not run)",
    )
    parser.add_argument(
        "--criteria",
        type=comma_list,
        help=f"who must meet SLOs: overall, worst-tier, tier:NAME (comma list; "
        f"{','.join(experiment.criteria)})",
    )
    parser.add_argument(
        "--curve-points",
        type=int,
        help=f"rates per violation curve, each run on every seed ({experiment.curve_points})",
    )
    add_hardware_flag(parser, HARDWARE_EACH)
    _add_output_flags(parser)
    add_setup_flags(parser)
    add_cluster_flags(parser)
    parser.set_defaults(handler=run)


def _add_output_flags(parser: argparse.ArgumentParser) -> None:
    """--jobs, --out-dir and --no-progress."""
    parser.add_argument("--jobs", type=int, help="worker processes (default: one per core)")
    add_ray_flag(parser)
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=cfg.GOODPUT_OUT_DIR,
        help="where the files go (default %(default)s)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Search goodput on --gpu/--model/--tp, or on each --hardware point in turn (exit
    status 2 when a point failed)."""
    refuse_both(args, "--hardware", "hardware", ["gpu", "model", "tp"])
    points = hardware_points(args.hardware or ())
    settings = cfg.override(cfg.settings_from(args), "goodput", **cfg.goodput_flags(args))
    experiment = cfg.experiment_from(settings)
    if points:
        if experiment.cluster is not None:
            raise ValueError(
                "--hardware runs one engine per point; a cluster names its replicas' "
                "hardware in --replicas (GPU:MODEL:TP,...)"
            )
        return _run_points(experiment, points, args)
    _report(_search(experiment, args), args.out_dir)
    return 0


def hardware_points(texts: Sequence[str]) -> list[HardwarePoint]:
    """The --hardware points, checked for their form and repeats before any of them runs
    (their names are checked as each runs: a bad one does not stop the others)."""
    points = [HardwarePoint.parse(text) for text in texts]
    if len({hardware_label(point) for point in points}) < len(points):  # X and X:0.9 alike
        labels = ", ".join(hardware_label(point) for point in points)
        raise ValueError(f"repeated hardware points: {labels}")
    return points


def point_folders(points: Sequence[HardwarePoint]) -> list[str]:
    """Each point's subfolder of --out-dir; when points share a name (two config.json files
    in folders of the same name), the later ones get -2, -3, ..."""
    folders: list[str] = []
    for point in points:
        name, count = hardware_folder(point), 1
        while name in folders:
            count += 1
            name = f"{hardware_folder(point)}-{count}"
        folders.append(name)
    return folders


def _run_points(
    base: GoodputExperiment, points: Sequence[HardwarePoint], args: argparse.Namespace
) -> int:
    """The experiment once per point, then the summary; 2 when a point failed."""
    results: list[ExperimentResult] = []
    failed: list[str] = []
    for index, (point, folder) in enumerate(zip(points, point_folders(points), strict=True)):
        label = hardware_label(point)
        if index:
            print()
        print(f"== {label} ==")
        # A point's own setup may fail (an unknown name, a TP degree the model cannot run
        # at, a missing model config file): say so, and run the others.
        try:
            experiment = dataclasses.replace(base, hardware=point.config(base.hardware))
            result = _search(experiment, args)
        except (ValueError, OSError) as error:
            print(f"slidingserve goodput: error: {label}: {error}", file=sys.stderr)
            failed.append(label)
            continue
        _report(result, args.out_dir / folder)
        results.append(result)
    if results:
        _print_summary(results)
    if failed:
        print(
            f"slidingserve goodput: error: {len(failed)} of {len(points)} hardware points "
            f"failed: {', '.join(failed)}",
            file=sys.stderr,
        )
        return 2
    return 0


def _search(experiment: GoodputExperiment, args: argparse.Namespace) -> ExperimentResult:
    print(
        f"Searching goodput: {len(experiment.policies)} policies × "
        f"{len(experiment.workloads)} workloads × {len(experiment.seeds)} seeds "
        f"{workers_text(experiment.worker_count, args.ray)}"
    )
    with tqdm(
        total=task_count(experiment), desc="simulations", unit="task", disable=args.no_progress
    ) as bar:
        return run_experiment(experiment, bar.update, args.ray)


def _report(result: ExperimentResult, out: Path) -> None:
    """Print the tables of one experiment and write its files into `out`."""
    experiment = result.experiment
    print(
        f"\nGoodput, req/s (mean ± std over seeds; share of the capacity bound / of the "
        f"SLO-aware bound / of the memory-aware bound)\n"
        f"{describe_setup(result)}\n"
        f"latency model:\n{latency_model_lines(experiment.hardware)}"
    )
    max_model_len = experiment.hardware.model_spec().max_model_len
    for name in experiment.workloads:
        print(
            workload_note(
                experiment.workload_config(name),
                max_model_len,
                experiment.seeds[0],
                experiment.limits.prefix_caching,
            )
        )
    for criterion in experiment.criteria:
        print(f"\nrequests that must meet their SLO: {criterion}")
        print(goodput_table(result, criterion))
        if experiment.cluster is not None:
            print(per_replica_lines(result, criterion))
        print(f"\nGoodput ÷ {experiment.reference_policy}'s on the same seed: {_ratios(result)}")
        print(ratio_table(result, criterion))
        for base in compared_families(experiment.policies):
            print(
                f"\nGoodput ÷ that of {base}'s best setting on each workload ({base}*, the "
                f"label with the highest mean goodput there) on the same seed: {_ratios(result)}"
            )
            print(best_static_table(result, base, criterion))
        print(
            "\nAt each policy's goodput (mean over seeds): p99 gap between tokens and the "
            "share of requests with a gap over their TBT (the per-gap reading), with the "
            "prefix cache's hit rate where it is on and the preemptions per run where there "
            "were any"
        )
        print(at_goodput_table(result, criterion))
    above = [r for r in result.rows if r.goodput_mean > min(result.bound_rates(r.workload))]
    if above:
        print(
            "\nnote: a goodput above a bound means the trial ended before its backlog "
            "outgrew the TTFT slack (the bounds hold in steady state); use more --requests "
            "for a longer trial"
        )
    write_json(out / "goodput.json", experiment_payload(result))
    write_csv(out / "goodput.csv", goodput_rows(result))
    written = [out / "goodput.json", out / "goodput.csv"]
    if result.curve:
        from slidingserve.eval.plots import plot_violation_curves  # matplotlib: only here

        written.append(plot_violation_curves(result, out / "violation_vs_rate.png"))
    print("\nwrote " + ", ".join(str(path) for path in written))


def _print_summary(results: Sequence[ExperimentResult]) -> None:
    """Every point that ran, side by side (they share everything but the hardware)."""
    experiment = results[0].experiment
    print(
        f"\n== summary ==\nGoodput, req/s (mean ± std over seeds), then goodput ÷ "
        f"{experiment.reference_policy}'s on the same seed: {_ratios(results[0])}"
    )
    for criterion in experiment.criteria:
        print(f"\nrequests that must meet their SLO: {criterion}")
        print(hardware_summary_table(results, criterion))


def _ratios(result: ExperimentResult) -> str:
    """How the ratio tables read."""
    seeds = len(result.experiment.seeds)
    return f"mean [95% t-interval over {seeds} seeds]; * where the interval excludes 1"
