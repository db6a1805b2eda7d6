"""Simulated requests per wall-second.

    python benchmarks/sim_speed.py [--requests 2000] [--rate 1.0] [--policy sarathi]
                                   [--model llama-3-8b] [--repeats 3] [--no-fast-forward]

The issue's workload: `sarathi` with chunk 512 on 2,000 arXiv requests at 1 req/s, A100 +
Llama-3-8B TP1. Prints the best-of-N wall time of the simulation alone (requests
generated beforehand), the figure in requests per second, and the ratio to Vidur's
152 req/s measured on this machine for the same workload. One process, one thread.
"""

from __future__ import annotations

import argparse
import copy
import time

from slidingserve.core.view import EngineLimits
from slidingserve.policies import PolicyContext, make_policy
from slidingserve.sim.engine import Simulator, SimulatorOptions
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig, load_model
from slidingserve.sim.workloads import WorkloadConfig, generate_requests

VIDUR_REQUESTS_PER_SECOND = 152.0  # Vidur on this workload on this machine (issue 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=1.0)
    parser.add_argument("--policy", default="sarathi")
    parser.add_argument("--workload", default="arxiv")
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-fast-forward", action="store_true")
    args = parser.parse_args()

    hardware = HardwareConfig(model=args.model)
    limits = EngineLimits()
    workload = WorkloadConfig(args.workload, args.requests)
    requests = generate_requests(workload, args.rate, 0, load_model(args.model).max_model_len)
    best = float("inf")
    for _ in range(args.repeats):
        fresh = copy.deepcopy(requests)
        latency = GroundTruthLatency(hardware, 0)
        policy = make_policy(args.policy, PolicyContext(limits))
        options = SimulatorOptions(limits=limits, fast_forward=not args.no_fast_forward)
        simulator = Simulator(policy, latency, latency.kv_capacity_blocks(16), options)
        started = time.perf_counter()
        run = simulator.run(fresh)
        best = min(best, time.perf_counter() - started)
    speed = args.requests / best
    print(
        f"{args.policy} on {args.requests} {args.workload} requests at {args.rate} req/s, "
        f"{hardware.gpu} {hardware.model} TP{hardware.tp}, fast-forward "
        f"{'off' if args.no_fast_forward else 'on'}"
    )
    print(
        f"iterations: {run.num_iterations + run.num_fast_forwarded} "
        f"({run.num_fast_forwarded} fast-forwarded), simulated {run.end_time:.0f} s"
    )
    print(f"wall time (best of {args.repeats}): {best:.3f} s")
    print(f"simulated requests per wall-second: {speed:.0f}")
    ratio = speed / VIDUR_REQUESTS_PER_SECOND
    print(f"vs Vidur's {VIDUR_REQUESTS_PER_SECOND:.0f} req/s: {ratio:.1f}x")


if __name__ == "__main__":
    main()
