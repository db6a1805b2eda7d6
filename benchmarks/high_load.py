"""Violating requests past the goodput: every policy at 1.5× and 2× the best baseline's
goodput rate, on the same seeds.

    python benchmarks/high_load.py [--workloads sharegpt,arxiv,mixed-v1,mixed-v2]
                                   [--slo-scale 1] [--seeds 3] [--requests 600]
                                   [--factors 1.5,2] [--jobs 2] [--with-admission]

For each workload and seed it searches the goodput of each baseline, takes the highest (the
best baseline on that seed), and runs every policy at each factor × that rate. Prints, per
workload and factor, each policy's violating fraction (mean over seeds) and its per-seed
ratio to the best baseline's fraction at the same rate (the lower of the baselines' on each
seed) with a 95% interval; `*` where the interval excludes 1. `--with-admission` adds
`slidingserve` with admission control on (`slidingserve#admission`): what refusing the
hopeless at once buys the others.
"""

from __future__ import annotations

import argparse
import statistics
from concurrent.futures import ProcessPoolExecutor

from slidingserve.eval.experiment import GoodputExperiment, run_searches
from slidingserve.eval.ratios import ratio_interval
from slidingserve.sim.calibration import calibrate
from slidingserve.sim.runner import simulate

BASELINES = ("sarathi-edf", "qoserve")
CANDIDATES = ("slidingserve", "slidingserve-paper")
ADMISSION = "slidingserve#admission"


def main() -> None:
    args = parse_args()
    workloads = tuple(args.workloads.split(","))
    seeds = tuple(range(args.seeds))
    factors = [float(f) for f in args.factors.split(",")]
    experiment = GoodputExperiment(
        policies=BASELINES,
        workloads=workloads,
        seeds=seeds,
        num_requests=args.requests,
        slo_scale=args.slo_scale,
        curve_points=0,
    )
    (searched,) = run_searches([experiment], args.jobs)
    best = {
        w: [max(r.per_seed[i] for r in searched.rows if r.workload == w) for i in range(len(seeds))]
        for w in workloads
    }
    calibration = calibrate(experiment.hardware, experiment.limits)
    candidates = (*CANDIDATES, *((ADMISSION,) if args.with_admission else ()))
    policies = (*candidates, *BASELINES)
    runner = GoodputExperiment(
        policies=policies,
        workloads=workloads,
        seeds=seeds,
        num_requests=args.requests,
        slo_scale=args.slo_scale,
        policy_options={ADMISSION: {"admission": True}} if args.with_admission else {},
    )
    runs = [(p, w, f, i) for w in workloads for f in factors for p in policies for i in seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [
            pool.submit(simulate, runner.spec(p, w, calibration), f * best[w][i], seeds[i])
            for p, w, f, i in runs
        ]
        results = zip(runs, futures, strict=True)
        late = {key: future.result().violations.overall for key, future in results}
    print(f"SLO scale {args.slo_scale:g}, {args.seeds} seeds × {args.requests} requests")
    for w in workloads:
        rates = ", ".join(f"{rate:.2f}" for rate in best[w])
        print(f"\n{w}: best baseline goodput per seed {rates} req/s")
        for f in factors:
            floor = [min(late[(b, w, f, i)] for b in BASELINES) for i in range(len(seeds))]
            print(f"  at {f:g}×: violating fraction, and ÷ the best baseline's")
            for p in policies:
                mine = [late[(p, w, f, i)] for i in range(len(seeds))]
                ratios = [m / b for m, b in zip(mine, floor, strict=True) if b > 0]
                interval = ratio_interval(ratios)
                print(f"    {p:24s} {statistics.fmean(mine):6.3f}   {interval.format()}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="sharegpt,arxiv,mixed-v1,mixed-v2")
    parser.add_argument("--slo-scale", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--factors", default="1.5,2")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--with-admission", action="store_true")
    return parser.parse_args()


if __name__ == "__main__":
    main()
