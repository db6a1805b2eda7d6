"""Live TTFT and TPOT at one rate beside the simulated twin's, policy by policy.

    python benchmarks/latency_check.py --model small-llama --workload mixed-v1 \\
        --arrival gamma --burstiness 2 --slo-scale 0.833 [--rate 3.5 | --load 0.45] \\
        [--seeds 3] [--requests 200] [--noise-draws 4] [--steps FILE] \\
        [--policies slidingserve,qoserve,vllm:fcfs,vllm:priority] [--out-dir DIR]

Needs the `vllm` extra. `validate` compares goodputs, which need every policy's curve (an
hour or more here); this compares the latencies at one rate near the goodputs in about
twenty minutes, all taken at one moment of a shared machine whose speed drifts by 10–20%
within an hour (docs/results.md §9). In order:

1. the engine is profiled as `validate` profiles it (`live.server_timing.time_server`),
   unless `--steps` gives a profile;
2. vLLM's `fcfs` server starts and, warmed up, measures the capacity (every request at
   once) and, without `--slo-scale`, calibrates the SLO scale, as `validate` does; the rate
   is `--rate`, else `--load` × that capacity;
3. every policy's server starts beside it, each warmed by a discarded burst, and the
   trials run interleaved: at each seed every policy in turn, the order rotated by seed
   (all servers up at once, as `validate` runs them on a CPU build; a GPU server takes
   most of its GPU's memory, so there this check needs servers that fit side by side);
4. the simulated twin runs the same requests at the same rate from the profile, with
   `--noise-draws` draws of the engine's noise (`live.simulated.SimulatedTrials`).

It prints, per policy, the median over seeds (and draws) of TTFT p50, TTFT p99 and TPOT
p50, live and simulated, with the twin's error, and the mean violating share of each,
and writes every trial's figures to `--out-dir`/latency-check.json (the live ones as soon
as they are measured).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any, NamedTuple

from slidingserve.cli.compare import add_live_workload_flags, live_settings
from slidingserve.live.compare import LiveSettings, LiveTrials, calibrate
from slidingserve.live.server_timing import time_server
from slidingserve.live.simulated import SimulatedTrials, simulated_policy
from slidingserve.live.validation import (
    PROFILE_RATES,
    REFERENCE_POLICY,
    ValidationSettings,
    measure_capacity,
    warm_up,
)
from slidingserve.metrics import RunMetrics
from slidingserve.predictor.steps import EngineSteps, load_engine_steps

POLICIES = "slidingserve,qoserve,vllm:fcfs,vllm:priority"
FIGURES = (("TTFT p50", "ttft", "p50"), ("TTFT p99", "ttft", "p99"), ("TPOT p50", "tpot", "p50"))


class Row(NamedTuple):
    """One trial's figures, seconds and a share."""

    policy: str
    seed: int
    ttft_p50: float
    ttft_p99: float
    tpot_p50: float
    violating: float

    @classmethod
    def of(cls, policy: str, seed: int, metrics: RunMetrics) -> Row:
        ttft, tpot = metrics.ttft, metrics.tpot
        violating = metrics.cumulative.overall
        return cls(policy, seed, ttft.p50, ttft.p99, tpot.p50, violating)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model folder to serve")
    parser.add_argument("--policies", default=POLICIES, help="comma list")
    parser.add_argument("--rate", type=float, help="req/s (default: --load × the capacity)")
    parser.add_argument("--load", type=float, default=0.45, help="share of the capacity")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--noise-draws", type=int, default=4)
    parser.add_argument("--steps", type=Path, help="a profile (default: profile now)")
    parser.add_argument("--out-dir", type=Path, default=Path("results/latency-check"))
    add_live_workload_flags(parser)
    args = parser.parse_args()
    args.repeats = args.seeds
    if args.seeds < 1 or args.noise_draws < 1:
        parser.error("--seeds and --noise-draws must be at least 1")
    if (args.rate is not None and not args.rate > 0) or not 0 < args.load <= 2:
        parser.error("--rate must be positive and --load in (0, 2]")
    return args


def live_rows(
    settings: LiveSettings, policies: list[str], rate: float | None, load: float
) -> tuple[list[Row], float, float]:
    """Every trial of the policies on servers up side by side; the rate and SLO scale."""
    trials = LiveTrials(settings)
    for policy in {REFERENCE_POLICY, *policies}:
        trials.check(policy)
    validation = ValidationSettings(settings)  # its warm-up, capacity and probe seeds
    probes = dataclasses.replace(settings, seed=validation.probe_seed)
    rows: list[Row] = []
    with contextlib.ExitStack() as servers:
        servers.enter_context(trials.serving(REFERENCE_POLICY))
        warm_up(trials, validation)
        capacity = measure_capacity(trials, validation)
        scale = settings.slo_scale or calibrate(trials, probes)
        rate = load * capacity if rate is None else rate
        print(f"capacity {capacity:.2f} req/s; rate {rate:.2f} req/s; SLO scale {scale:.3f}")
        for policy in policies:
            if policy != REFERENCE_POLICY:
                servers.enter_context(trials.serving(policy))
                warm_up(trials, validation)
        for turn in range(settings.repeats):
            seed = settings.seed + turn
            for policy in policies[turn % len(policies) :] + policies[: turn % len(policies)]:
                rows.append(Row.of(policy, seed, trials.run(policy, rate, seed, scale)))
                print(f"live {policy} seed {seed}: {rows[-1]}", flush=True)
    return rows, rate, scale


def twin_rows(
    steps: EngineSteps, settings: LiveSettings, policies: list[str], rate: float, draws: int
) -> list[Row]:
    """The same trials on the simulated engine, each with `draws` noise draws."""
    base, scale = SimulatedTrials(steps, settings), settings.slo_scale
    if scale is None:
        raise ValueError("the twin runs at the live run's SLO scale: set it in `settings`")
    return [
        Row.of(policy, seed, base.with_noise_draw(draw).run(policy, rate, seed, scale))
        for policy in policies
        for seed in range(settings.seed, settings.seed + settings.repeats)
        for draw in range(draws)
    ]


def table(live: list[Row], simulated: list[Row], policies: list[str]) -> str:
    """Per policy: medians live and simulated, in ms, the errors, the violating shares."""
    header = f"{'policy':<16}" + "".join(f"{name + ' live / sim':>24}" for name, *_ in FIGURES)
    lines = [header + f"{'violating live / sim':>24}"]
    for policy in policies:
        line = f"{policy:<16}"
        for _, metric, quantile in FIGURES:
            field = f"{metric}_{quantile}"
            measured = _median(live, policy, field)
            predicted = _median(simulated, policy, field)
            error = f"{100 * (predicted / measured - 1):+.0f}%" if measured > 0 else "n/a"
            line += f"{1000 * measured:>10.0f} / {1000 * predicted:<5.0f}{error:>7}"
        shares = [_mean(rows, policy, "violating") for rows in (live, simulated)]
        lines.append(line + f"{100 * shares[0]:>15.1f}% / {100 * shares[1]:.1f}%")
    return "\n".join(lines)


def _median(rows: list[Row], policy: str, field: str) -> float:
    values: list[float] = [getattr(row, field) for row in rows if row.policy == policy]
    return statistics.median(values)


def _mean(rows: list[Row], policy: str, field: str) -> float:
    return statistics.fmean(getattr(row, field) for row in rows if row.policy == policy)


def main() -> None:
    args = parse_args()
    settings = live_settings(args)
    policies = list(dict.fromkeys(p.strip() for p in args.policies.split(",") if p.strip()))
    for policy in policies:  # a bad name fails before any server starts
        simulated_policy(policy)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.steps is not None:
        steps = load_engine_steps(args.steps)
    else:
        steps = time_server(settings, args.out_dir / "steps.json", PROFILE_RATES, print)
    live, rate, scale = live_rows(settings, policies, args.rate, args.load)
    saved: dict[str, Any] = {"rate": rate, "slo_scale": scale, "engine": steps.engine}
    saved |= {"workload": settings.workload, "requests": settings.requests}
    saved |= {"seeds": list(range(settings.seed, settings.seed + settings.repeats))}
    saved["live"] = [row._asdict() for row in live]
    out = args.out_dir / "latency-check.json"
    out.write_text(json.dumps(saved, indent=1) + "\n")  # the live rows, before the twin
    settings = dataclasses.replace(settings, slo_scale=scale)
    simulated = twin_rows(steps, settings, policies, rate, args.noise_draws)
    print(f"\nat {rate:.2f} req/s, SLO scale {scale:.3f}, medians over seeds (and the twin's")
    print(f"{args.noise_draws} noise draws), ms; {steps.engine}\n")
    print(table(live, simulated, policies))
    saved["simulated"] = [row._asdict() for row in simulated]
    out.write_text(json.dumps(saved, indent=1) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
