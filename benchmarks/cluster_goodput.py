"""Cluster goodput: every router × policy on clusters of several sizes, on the same seeds.

    python benchmarks/cluster_goodput.py [--sizes 2,4,8] [--routers all]
                                         [--policies sarathi-edf,slidingserve]
                                         [--workload sharegpt] [--arrival gamma]
                                         [--burstiness 2] [--seeds 3]
                                         [--requests-per-replica 600]
                                         [--replicas a100:llama-3-8b:1,a40:llama-3-8b:2]
                                         [--conversations TURNS]
                                         [--jobs 2] [--ray ADDRESS] [--json FILE]

For each cluster size N it searches the cluster's goodput (requests per second for the
cluster, at most 1% violating, strict SLOs) of every policy in the replicas behind every
router, with N × `--requests-per-replica` requests per trial so that every replica sees a
trial as long as a single engine's. One engine alone (N = 1, no router) runs on the same
seeds for scale. `--replicas` replaces the sizes with one mixed cluster, one replica per
hardware point (the same model on each). `--conversations TURNS` makes the requests
multi-turn conversations (each turn repeats the conversation so far: the prefix cache and a
router that reads it matter), 16 under way at once per replica. All searches share one
process pool (or Ray, `--ray`).

Prints, per size: the cluster goodput (mean ± std over seeds) and the goodput per replica
of each router × policy; the SLO-aware router ÷ each other router (least-requests first)
on each seed with a 95% interval (`*` where it excludes 1); and per replica ÷ one engine
alone on the same seed (the scaling). The wall time at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from slidingserve.eval.experiment import ExperimentResult, GoodputExperiment, run_searches
from slidingserve.eval.goodput import SearchSettings
from slidingserve.eval.ratios import per_seed_ratios, ratio_interval
from slidingserve.routing import ROUTERS
from slidingserve.sim.cluster import ClusterLayout
from slidingserve.sim.hardware import HardwareConfig, parse_hardware
from slidingserve.workloads import ArrivalConfig
from slidingserve.workloads.prefixes import CONCURRENT_CONVERSATIONS, Conversations

REFERENCE_ROUTER = "least-requests"
CANDIDATE_ROUTER = "slo-aware"


def main() -> None:
    args = parse_args()
    arrival = ArrivalConfig(args.arrival, args.burstiness if args.arrival == "gamma" else 1.0)
    layouts = cluster_layouts(args)
    single = experiment(args, arrival, None, args.requests_per_replica)
    experiments = [single] + [
        experiment(args, arrival, layout, args.requests_per_replica * layout.size)
        for layout in layouts
    ]
    started = time.perf_counter()
    results = run_searches(experiments, args.jobs, ray=args.ray)
    minutes = (time.perf_counter() - started) / 60
    alone = results[0]
    turns = f", conversations of {args.conversations} turns" if args.conversations else ""
    print(f"{args.workload}{turns}, {describe(arrival)}, strict SLOs, seeds 0..{args.seeds - 1}")
    print_single(alone)
    by_size: dict[str, list[ExperimentResult]] = {}
    for result in results[1:]:
        cluster = result.experiment.cluster
        assert cluster is not None  # every experiment after the first runs a cluster
        by_size.setdefault(size_label(cluster), []).append(result)
    for label, group in by_size.items():
        print_size(label, group, alone, args.precision)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(per_seed(results), out, indent=1)
    print(f"\n{len(experiments)} experiments, {minutes:.1f} min on {args.jobs} worker(s)")


def cluster_layouts(args: argparse.Namespace) -> list[ClusterLayout]:
    """One layout per size and router (or per router on the mixed `--replicas`)."""
    routers = list(ROUTERS) if args.routers == "all" else args.routers.split(",")
    if args.replicas:
        points = tuple(parse_hardware(text) for text in args.replicas.split(","))
        return [ClusterLayout(points, router) for router in routers]
    sizes = [int(size) for size in args.sizes.split(",")]
    return [ClusterLayout((HardwareConfig(),) * n, r) for n in sizes for r in routers]


def experiment(
    args: argparse.Namespace, arrival: ArrivalConfig, cluster: ClusterLayout | None, requests: int
) -> GoodputExperiment:
    size = cluster.size if cluster else 1
    conversations = None
    if args.conversations:
        conversations = Conversations(args.conversations, CONCURRENT_CONVERSATIONS * size)
    return GoodputExperiment(
        policies=tuple(args.policies.split(",")),
        workloads=(args.workload,),
        seeds=tuple(range(args.seeds)),
        num_requests=requests,
        arrival=arrival,
        hardware=cluster.replicas[0] if cluster else HardwareConfig(),
        curve_points=0,
        search=SearchSettings(precision=args.precision),
        cluster=cluster,
        conversations=conversations,
    )


def describe(arrival: ArrivalConfig) -> str:
    if arrival.process == "gamma":
        return f"gamma arrivals (CV {arrival.burstiness:g})"
    return "Poisson arrivals"


def size_label(cluster: ClusterLayout) -> str:
    labels = dict.fromkeys(f"{h.gpu}:{h.model}:{h.tp}" for h in cluster.replicas)
    if len(labels) == 1:
        return f"{cluster.size} × {next(iter(labels))}"
    return " + ".join(f"{h.gpu}:{h.model}:{h.tp}" for h in cluster.replicas)


def print_single(alone: ExperimentResult) -> None:
    print(f"\none engine alone ({alone.experiment.num_requests} requests a trial):")
    for row in alone.rows:
        print(f"  {row.policy:<16} {row.goodput_mean:6.2f} ± {row.goodput_std:.2f} req/s")


def print_size(
    label: str, group: list[ExperimentResult], alone: ExperimentResult, precision: float
) -> None:
    """Goodputs, router ratios and scaling of one cluster size."""
    size = group[0].experiment.cluster.size if group[0].experiment.cluster else 1
    requests = group[0].experiment.num_requests
    print(f"\n{label} ({requests} requests a trial): cluster goodput req/s, per replica")
    rows = {
        (r.experiment.cluster.router if r.experiment.cluster else "", row.policy): row
        for r in group
        for row in r.rows
    }
    policies = group[0].experiment.policies
    print(f"  {'router':<16}" + "".join(f"{p:>30}" for p in policies))
    for result in group:
        router = result.experiment.cluster.router if result.experiment.cluster else ""
        cells = [
            f"{rows[router, p].goodput_mean:6.2f} ± {rows[router, p].goodput_std:4.2f}"
            f" ({rows[router, p].goodput_mean / size:5.2f})"
            for p in policies
        ]
        print(f"  {router:<16}" + "".join(f"{cell:>30}" for cell in cells))
    singles = {row.policy: row for row in alone.rows}
    routers = [r.experiment.cluster.router for r in group if r.experiment.cluster]
    for policy in policies:
        if (CANDIDATE_ROUTER, policy) in rows:
            others = [router for router in routers if router != CANDIDATE_ROUTER]
            cells = [
                f"÷ {other} "
                + ratio_interval(
                    per_seed_ratios(
                        rows[CANDIDATE_ROUTER, policy].per_seed, rows[other, policy].per_seed
                    ),
                    resolution=precision,
                ).format()
                for other in sorted(others, key=lambda name: name != REFERENCE_ROUTER)
            ]
            print(f"  {policy}: {CANDIDATE_ROUTER} " + "; ".join(cells))
        for result in group:
            router = result.experiment.cluster.router if result.experiment.cluster else ""
            per_replica = [g / size for g in rows[router, policy].per_seed]
            scaling = ratio_interval(
                per_seed_ratios(per_replica, singles[policy].per_seed), resolution=precision
            )
            print(f"    per replica ÷ one engine alone, {router}: {scaling.format()}")


def per_seed(results: list[ExperimentResult]) -> list[dict[str, object]]:
    """Every search's per-seed goodputs (req/s, the cluster's) with its setup."""
    return [
        {
            "replicas": [f"{h.gpu}:{h.model}:{h.tp}" for h in (r.experiment.replica_hardware)],
            "router": r.experiment.cluster.router if r.experiment.cluster else None,
            "requests": r.experiment.num_requests,
            "policy": row.policy,
            "goodput_per_seed": list(row.per_seed),
            "goodput_mean": statistics.fmean(row.per_seed),
        }
        for r in results
        for row in r.rows
    ]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="2,4,8", help="replicas per cluster, comma list")
    parser.add_argument("--routers", default="all", help="comma list, or all")
    parser.add_argument("--policies", default="sarathi-edf,slidingserve")
    parser.add_argument("--workload", default="sharegpt")
    parser.add_argument("--arrival", choices=("poisson", "gamma"), default="gamma")
    parser.add_argument("--burstiness", type=float, default=2.0, help="gamma's CV")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests-per-replica", type=int, default=600)
    parser.add_argument("--replicas", help="one mixed cluster: GPU:MODEL:TP,... (not --sizes)")
    parser.add_argument("--conversations", type=int, metavar="TURNS", help="multi-turn")
    parser.add_argument("--precision", type=float, default=0.02)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--ray", metavar="ADDRESS", help="run as Ray tasks (auto, HOST:PORT, local)"
    )
    parser.add_argument("--json", help="write every search's per-seed goodputs here")
    return parser.parse_args()


if __name__ == "__main__":
    main()
