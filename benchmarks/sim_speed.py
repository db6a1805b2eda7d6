"""Simulated requests per wall-second, for each policy.

    python benchmarks/sim_speed.py [--requests 2000] [--rate 1.0] [--workload arxiv]
                                   [--policy sarathi qoserve slidingserve]
                                   [--model llama-3-8b] [--repeats 3] [--no-fast-forward]
                                   [--at-goodput]

The issue's workload: 2,000 arXiv requests at 1 req/s, A100 + Llama-3-8B TP1, run by
`sarathi` (chunk 512), `qoserve` and `slidingserve`. The policies are built as the
simulator builds them (`sim.runner.policy_context`): when any of them plans with a
predictor or fits its own, the GPU is calibrated once (4,000 timed batches and the fit),
outside the timed region, and that time is printed on a line of its own. Then one row per
policy: iterations (of them fast-forwarded), simulated seconds, the best-of-N wall time of
the simulation alone (requests generated and policy built beforehand), the figure in
simulated requests per wall-second, and its ratio to Vidur's 152 req/s measured on this
machine for the same workload (Vidur ran sarathi). One process, one thread.

At load: the default run is light (1 req/s of arXiv leaves most iterations to the
fast-forwarded decode runs); near a policy's goodput the queues are long and nearly every
iteration asks the policy for a plan. Two ways to time that:

    python benchmarks/sim_speed.py --workload sharegpt --rate 2.4 --requests 600 --policy ...

(the planning policies: slidingserve slidingserve-paper qoserve scorpio, and sarathi-edf)
runs every policy at one rate, 2.4 req/s of ShareGPT (slightly above the best goodput of
docs/results.md §1.1, 2.31 req/s, so every policy is at or past its goodput);

    python benchmarks/sim_speed.py --workload sharegpt --requests 600 --at-goodput --policy ...

runs each policy at its own ShareGPT goodput on the A100 with Llama-3-8B, strict SLOs, as
docs/results.md §1.1 measured it (`GOODPUT_SHAREGPT`; SCORPIO's and `vllm-priority`'s by
the same protocol: `slidingserve goodput --seeds 5 --requests 1000 --workloads sharegpt
--curve-points 0 --policies sarathi-edf,scorpio,vllm-priority`, which gives Sarathi-EDF's
2.03 again), and a policy without a figure at `--rate`; the rate column marks a goodput
with "g". `--at-goodput` needs
`--workload sharegpt` and `--model llama-3-8b`, where those goodputs were measured.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import time
from typing import NamedTuple

from slidingserve.core.request import Request
from slidingserve.core.view import EngineLimits
from slidingserve.policies import PolicyContext, make_policy
from slidingserve.predictor.calibration import DEFAULT_SAMPLES
from slidingserve.sim.calibration import calibrate
from slidingserve.sim.engine import SimulationRun, Simulator, SimulatorOptions
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig
from slidingserve.sim.runner import (
    SimulationSpec,
    needs_calibration,
    policy_context,
    unrecorded_options,
)
from slidingserve.workloads import WorkloadConfig, generate_requests

VIDUR_REQUESTS_PER_SECOND = 152.0  # Vidur on this workload on this machine (issue 2)
DEFAULT_POLICIES = ("sarathi", "qoserve", "slidingserve")
GOODPUT_SHAREGPT: dict[str, float] = {
    "vllm": 1.39,
    "sarathi": 2.03,
    "sarathi-edf": 2.03,
    "qoserve": 2.08,
    "slidingserve-paper": 1.91,
    "slidingserve": 2.31,
    "scorpio": 1.16,
    "vllm-priority": 1.39,
}
"""Goodput, req/s, on ShareGPT, A100 + Llama-3-8B TP1, strict SLOs (docs/results.md §1.1;
SCORPIO and `vllm-priority` measured 2026-12-06 as the module docstring says)."""


class Speed(NamedTuple):
    """One policy's best run."""

    policy: str
    rate: float  # requests per second it ran at (--rate, or its goodput with --at-goodput)
    at_goodput: bool  # whether `rate` is the policy's goodput (GOODPUT_SHAREGPT)
    run: SimulationRun  # the last repeat (all repeats simulate the same thing)
    wall_seconds: float  # the fastest repeat's Simulator.run, s


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=1.0)
    parser.add_argument("--policy", nargs="+", default=list(DEFAULT_POLICIES))
    parser.add_argument("--workload", default="arxiv")
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-fast-forward", action="store_true")
    parser.add_argument(
        "--at-goodput",
        action="store_true",
        help="each policy at its ShareGPT goodput (GOODPUT_SHAREGPT), else at --rate",
    )
    args = parser.parse_args()
    if args.at_goodput and (args.workload, args.model) != ("sharegpt", "llama-3-8b"):
        parser.error("--at-goodput: the goodputs known are of --workload sharegpt on llama-3-8b")
    return args


def policy_rate(policy: str, args: argparse.Namespace) -> tuple[float, bool]:
    """The rate `policy` runs at, req/s, and whether it is its goodput."""
    if args.at_goodput and policy in GOODPUT_SHAREGPT:
        return GOODPUT_SHAREGPT[policy], True
    return args.rate, False


def timed_calibration(
    specs: list[SimulationSpec],
) -> tuple[list[SimulationSpec], float | None]:
    """`specs` sharing one calibration if any policy needs it (as an experiment shares it),
    and the seconds the calibration took (None without one)."""
    if not any(needs_calibration(spec.policy) for spec in specs):
        return specs, None
    started = time.perf_counter()
    calibration = calibrate(specs[0].hardware, specs[0].limits)
    seconds = time.perf_counter() - started
    return [dataclasses.replace(spec, calibration=calibration) for spec in specs], seconds


def time_policy(
    spec: SimulationSpec,
    context: PolicyContext,
    requests: list[Request],
    repeats: int,
    fast_forward: bool,
    rate: tuple[float, bool],
) -> Speed:
    """The best of `repeats` wall times of the simulation alone, fresh state each time;
    `rate` is the rate `requests` arrive at and whether it is the policy's goodput."""
    best, run = float("inf"), None
    for _ in range(repeats):
        fresh = copy.deepcopy(requests)
        latency = GroundTruthLatency(spec.hardware, 0)
        policy = make_policy(spec.policy, context, unrecorded_options(spec))
        options = SimulatorOptions(limits=spec.limits, fast_forward=fast_forward)
        blocks = latency.kv_capacity_blocks(spec.limits.block_size)
        simulator = Simulator(policy, latency, blocks, options)
        started = time.perf_counter()
        run = simulator.run(fresh)
        best = min(best, time.perf_counter() - started)
    assert run is not None  # repeats >= 1
    return Speed(spec.policy, *rate, run, best)


def print_header(
    args: argparse.Namespace, hardware: HardwareConfig, calibration_s: float | None
) -> None:
    rate = "each policy's goodput (g) or " if args.at_goodput else ""
    print(
        f"{args.requests} {args.workload} requests at {rate}{args.rate} req/s, "
        f"{hardware.gpu} {hardware.model} TP{hardware.tp}, fast-forward "
        f"{'off' if args.no_fast_forward else 'on'}"
    )
    if calibration_s is not None:
        print(
            f"calibration ({DEFAULT_SAMPLES} timed batches + fit, shared, not timed below): "
            f"{calibration_s:.3f} s"
        )
    print(
        f"{'policy':<20}{'rate':>7}{'iterations':>11}{'fast-fwd':>10}{'simulated s':>12}"
        f"{f'wall s (best of {args.repeats})':>22}{'req/wall-s':>12}{'vs Vidur':>10}"
    )


def print_row(speed: Speed, requests: int) -> None:
    run = speed.run
    per_second = requests / speed.wall_seconds
    rate = f"{speed.rate:.2f}{'g' if speed.at_goodput else ' '}"
    print(
        f"{speed.policy:<20}{rate:>7}{run.num_iterations + run.num_fast_forwarded:>11}"
        f"{run.num_fast_forwarded:>10}{run.end_time:>12.0f}{speed.wall_seconds:>22.3f}"
        f"{per_second:>12.0f}{per_second / VIDUR_REQUESTS_PER_SECOND:>9.1f}x"
    )


def main() -> None:
    args = parse_args()
    hardware = HardwareConfig(model=args.model)
    limits = EngineLimits()
    workload = WorkloadConfig(args.workload, args.requests)
    specs = [SimulationSpec(name, workload, hardware, limits) for name in args.policy]
    specs, calibration_s = timed_calibration(specs)
    print_header(args, hardware, calibration_s)
    for spec in specs:
        rate = policy_rate(spec.policy, args)
        requests = generate_requests(workload, rate[0], 0, spec.max_model_len)
        speed = time_policy(
            spec, policy_context(spec), requests, args.repeats, not args.no_fast_forward, rate
        )
        print_row(speed, args.requests)
    print(f"vs Vidur: the ratio to Vidur's {VIDUR_REQUESTS_PER_SECOND:.0f} req/s (sarathi)")


if __name__ == "__main__":
    main()
