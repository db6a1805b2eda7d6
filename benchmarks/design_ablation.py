"""What each switch of `slidingserve` is worth: the design with one switch back at the
paper's setting, against the whole design, on the same seeds.

    python benchmarks/design_ablation.py [--workloads sharegpt,arxiv,mixed-v1,mixed-v2]
                                         [--slo-scales 1,0.5] [--seeds 3] [--requests 600]
                                         [--precision 0.02] [--jobs 2] [--ray ADDRESS] [--json FILE]

Rows: `slidingserve`, then `slidingserve` without each mechanism (the switch at the paper's
value), then `slidingserve-paper` and its published ablations, and the two baselines. Each
cell is the goodput (req/s, mean over seeds) and the per-seed ratio to `slidingserve` with
its 95% interval (`*`: the interval excludes 1). About 3 minutes per workload × scale cell
on two cores at the defaults (27 policies × 3 seeds). `--json` also writes every policy's
goodput per seed, by SLO scale and workload.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from typing import Any

from slidingserve.eval.experiment import ExperimentResult, GoodputExperiment, run_searches
from slidingserve.eval.goodput import SearchSettings
from slidingserve.eval.ratios import per_seed_ratios, ratio_interval
from slidingserve.policies.slidingserve import DESIGN, PAPER, flatten

PAPER_OPTIONS = flatten(PAPER)
DESIGN_OPTIONS = flatten(DESIGN)

WITHOUT: Mapping[str, Mapping[str, Any]] = {
    "no-triage": {"overload": "none"},
    "relegate": {"overload": "relegate"},
    "no-lost-last": {"lost_last": False},
    "no-tiles": {"token_quantum": PAPER_OPTIONS["token_quantum"]},
    "no-margin": {"time_margin": PAPER_OPTIONS["time_margin"]},
    "no-cap": {"iteration_cap": PAPER_OPTIONS["iteration_cap"]},
    "newest-victim": {
        "preempt_lost_first": PAPER_OPTIONS["preempt_lost_first"],
        "preempt_most_slack": PAPER_OPTIONS["preempt_most_slack"],
    },
    "lost-then-newest": {"preempt_most_slack": PAPER_OPTIONS["preempt_most_slack"]},
    "no-yield": {"yield_violated": PAPER_OPTIONS["yield_violated"]},
    "no-headroom": {"kv_headroom": PAPER_OPTIONS["kv_headroom"]},
    "no-tight-cap": {"tight_cache_cap": PAPER_OPTIONS["tight_cache_cap"]},
    "no-forecast": {"kv_forecast": PAPER_OPTIONS["kv_forecast"]},
    "paper-features": {"features": PAPER_OPTIONS["features"]},
    "paper-chunker": {"chunker": PAPER_OPTIONS["chunker"]},
    "window-2": {"window": 2},
    "with-constructor": {"batch_constructor": True},
    "mlps": {"sorter": "mlps"},
    "admission": {"admission": True},
    "release": {"release_decodes": 4},
    "whole-prefills": {"whole_prefills": True},
    "low-memory-cap": {"low_memory_cap": 384},
}
"""Each row's change to the design (flat options on `DESIGN`): a mechanism back at the
paper's setting, or a part the design leaves out put in."""

OTHERS = ("slidingserve-paper", "slidingserve-sc", "slidingserve-sc-mlps", "sarathi-edf", "qoserve")


def main() -> None:
    args = parse_args()
    policies = ("slidingserve", *(f"slidingserve#{label}" for label in WITHOUT), *OTHERS)
    options = {f"slidingserve#{label}": dict(change) for label, change in WITHOUT.items()}
    experiments = [
        GoodputExperiment(
            policies=policies,
            workloads=tuple(args.workloads.split(",")),
            seeds=tuple(range(args.seeds)),
            num_requests=args.requests,
            slo_scale=scale,
            policy_options=options,
            curve_points=0,
            search=SearchSettings(precision=args.precision),
        )
        for scale in (float(s) for s in args.slo_scales.split(","))
    ]
    started = time.perf_counter()
    results = run_searches(experiments, args.jobs, ray=args.ray)
    changed = {k: v for k, v in DESIGN_OPTIONS.items() if PAPER_OPTIONS.get(k) != v}
    print(
        f"design (where it is not the paper's): {', '.join(f'{k}={v}' for k, v in changed.items())}"
    )
    for result in results:
        print_table(result, args.precision)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(per_seed(results), out, indent=1)
    minutes = (time.perf_counter() - started) / 60
    print(
        f"\n{len(policies)} policies, {args.seeds} seeds × {args.requests} requests, "
        f"{minutes:.1f} min on {args.jobs} worker(s)"
    )


def print_table(result: ExperimentResult, precision: float) -> None:
    experiment = result.experiment
    print(f"\nSLO scale {experiment.slo_scale:g}: goodput req/s and ratio to slidingserve")
    workloads = experiment.workloads
    print(f"{'policy':30s}" + "".join(f"{w:>30s}" for w in workloads))
    rows = {(r.policy, r.workload): r for r in result.rows}
    for policy in experiment.policies:
        cells = []
        for workload in workloads:
            row, design = rows[(policy, workload)], rows[("slidingserve", workload)]
            ratios = per_seed_ratios(row.per_seed, design.per_seed)
            interval = ratio_interval(ratios, resolution=precision)
            cells.append(f"{row.goodput_mean:5.2f} {interval.format():>24s}")
        print(f"{policy:30s}" + "".join(f"{cell:>30s}" for cell in cells))


def per_seed(results: list[ExperimentResult]) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Goodput per seed (req/s) by SLO scale, workload and policy."""
    return {
        f"{result.experiment.slo_scale:g}": {
            workload: {r.policy: list(r.per_seed) for r in result.rows if r.workload == workload}
            for workload in result.experiment.workloads
        }
        for result in results
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="sharegpt,arxiv,mixed-v1,mixed-v2")
    parser.add_argument("--slo-scales", default="1,0.5")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--precision", type=float, default=0.02)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--ray", metavar="ADDRESS", help="run as Ray tasks (auto, HOST:PORT, local)"
    )
    parser.add_argument("--json", help="also write every goodput per seed to this file")
    return parser.parse_args()


if __name__ == "__main__":
    main()
