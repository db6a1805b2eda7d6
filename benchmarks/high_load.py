"""Violating requests past the goodput: every policy at 1.5× and 2× the best baseline's
goodput rate, on the same seeds.

    python benchmarks/high_load.py [--hardware a100:llama-3-8b:1]
                                   [--workloads sharegpt,arxiv,mixed-v1,mixed-v2]
                                   [--baselines sarathi-edf,qoserve] [--slo-scale 1]
                                   [--candidates slidingserve,slidingserve-paper]
                                   [--seeds 3] [--requests 600] [--factors 1.5,2]
                                   [--set LABEL.OPTION=VALUE ...] [--jobs 2] [--ray ADDRESS]
                                   [--with-admission]

For each workload and seed it searches the goodput of each baseline, takes the highest (the
best baseline on that seed), and runs every policy at each factor × that rate. Prints, per
workload and factor, each policy's violating fraction (mean over seeds), its per-seed ratio
to the best baseline's fraction at the same rate (the lower of the baselines' on each seed)
with a 95% interval (`*` where the interval excludes 1), and its preemptions (mean over
seeds); each candidate after the first also gets its per-seed difference from the first
candidate's violating fraction, with a 95% interval (`*` where it excludes 0).
`--baselines` may name labels set with `--set` (e.g. `scorpio#chunked` with `--set
scorpio#chunked.chunked_prefill=true`); so may `--candidates`, the policies measured
against them. `--with-admission` adds `slidingserve` with admission control on
(`slidingserve#admission`): what refusing the hopeless at once buys the others.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from slidingserve.cli.settings import with_assignments
from slidingserve.eval.experiment import GoodputExperiment, run_searches
from slidingserve.eval.pool import task_pool
from slidingserve.eval.ratios import difference_interval, ratio_interval
from slidingserve.sim.calibration import calibrate
from slidingserve.sim.hardware import parse_hardware
from slidingserve.sim.runner import SimulationResult, simulate

CANDIDATES = ("slidingserve", "slidingserve-paper")
ADMISSION = "slidingserve#admission"


def main() -> None:
    args = parse_args()
    workloads = tuple(args.workloads.split(","))
    baselines = tuple(args.baselines.split(","))
    seeds = tuple(range(args.seeds))
    factors = [float(f) for f in args.factors.split(",")]
    chosen = tuple(args.candidates.split(","))
    candidates = (*chosen, *((ADMISSION,) if args.with_admission else ()))
    policies = (*candidates, *baselines)
    options = policy_options(args.set, policies, args.with_admission)
    common: dict[str, Any] = {
        "workloads": workloads,
        "seeds": seeds,
        "num_requests": args.requests,
        "slo_scale": args.slo_scale,
        "hardware": parse_hardware(args.hardware),
    }
    searches = GoodputExperiment(
        policies=baselines,
        curve_points=0,
        policy_options={p: o for p, o in options.items() if p in baselines},
        **common,
    )
    (searched,) = run_searches([searches], args.jobs, ray=args.ray)
    best = {
        w: [max(r.per_seed[i] for r in searched.rows if r.workload == w) for i in range(len(seeds))]
        for w in workloads
    }
    runner = GoodputExperiment(policies=policies, policy_options=options, **common)
    calibration = calibrate(runner.hardware, runner.limits)
    runs = [(p, w, f, i) for w in workloads for f in factors for p in policies for i in seeds]
    with task_pool(args.jobs, args.ray) as pool:
        futures = [
            pool.submit(simulate, runner.spec(p, w, calibration), f * best[w][i], seeds[i])
            for p, w, f, i in runs
        ]
        results = {key: future.result() for key, future in zip(runs, futures, strict=True)}
    print(
        f"{args.hardware}, SLO scale {args.slo_scale:g}, {args.seeds} seeds × "
        f"{args.requests} requests; baselines {', '.join(baselines)}"
    )
    for w in workloads:
        rates = ", ".join(f"{rate:.2f}" for rate in best[w])
        print(f"\n{w}: best baseline goodput per seed {rates} req/s")
        for f in factors:
            report_factor(results, policies, baselines, w, f, seeds)


def report_factor(
    results: dict[tuple[str, str, float, int], SimulationResult],
    policies: tuple[str, ...],
    baselines: tuple[str, ...],
    workload: str,
    factor: float,
    seeds: tuple[int, ...],
) -> None:
    """One factor's lines: violating fraction, ratio to the best baseline, preemptions."""

    def late(policy: str, seed: int) -> float:
        return results[(policy, workload, factor, seed)].violations.overall

    floor = [min(late(b, i) for b in baselines) for i in range(len(seeds))]
    first = policies[0]
    print(
        f"  at {factor:g}×: violating fraction, ÷ the best baseline's, preemptions"
        f" (candidates: − {first}'s fraction)"
    )
    for p in policies:
        mine = [late(p, i) for i in range(len(seeds))]
        ratios = [m / b for m, b in zip(mine, floor, strict=True) if b > 0]
        preempted = [results[(p, workload, factor, i)].num_preemptions for i in range(len(seeds))]
        against = ""
        if p != first and p not in baselines:
            differences = [m - late(first, i) for i, m in enumerate(mine)]
            against = f"   {difference_interval(differences).format()}"
        print(
            f"    {p:24s} {statistics.fmean(mine):6.3f}   "
            f"{ratio_interval(ratios).format():24s} {statistics.fmean(preempted):8.1f}{against}"
        )


def policy_options(
    assignments: list[str], policies: tuple[str, ...], with_admission: bool
) -> dict[str, dict[str, Any]]:
    """`--set LABEL.OPTION=VALUE` per label, with the admission label's switch."""
    settings = with_assignments({"policies": {}}, assignments)
    options = {p: dict(o) for p, o in settings.get("policies", {}).items() if p in policies}
    if with_admission:
        options[ADMISSION] = {**options.get(ADMISSION, {}), "admission": True}
    return options


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hardware", default="a100:llama-3-8b:1", metavar="GPU:MODEL:TP[:MEMORY]")
    parser.add_argument("--workloads", default="sharegpt,arxiv,mixed-v1,mixed-v2")
    parser.add_argument("--baselines", default="sarathi-edf,qoserve")
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--slo-scale", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--factors", default="1.5,2")
    parser.add_argument("--set", action="append", default=[], metavar="LABEL.OPTION=VALUE")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--ray", metavar="ADDRESS", help="run as Ray tasks (auto, HOST:PORT, local)"
    )
    parser.add_argument("--with-admission", action="store_true")
    return parser.parse_args()


if __name__ == "__main__":
    main()
