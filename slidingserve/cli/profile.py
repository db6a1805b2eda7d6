"""The `profile` command: time a real engine's steps (offline, or a served engine's with
--live), fit the batch-latency predictor to them and print its accuracy (the `vllm` extra)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slidingserve.cli import settings as cfg
from slidingserve.cli.flags import add_defaulted

if TYPE_CHECKING:
    from slidingserve.predictor.steps import EngineSteps


def add_parser(commands: Any) -> None:
    """Add `profile` to the `slidingserve` subcommands."""
    parser = commands.add_parser(
        "profile", help="time a real engine's steps, fit the predictor, print its accuracy"
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", type=Path, default=cfg.PROFILE_OUT)
    parser.add_argument("--seed", type=int, default=cfg.SEED)
    parser.add_argument(
        "--repeats", type=int, default=cfg.PROFILE_REPEATS, help="rounds of profiling traffic"
    )
    limits = cfg.ENGINE_LIMITS
    add_defaulted(
        parser, "--max-num-batched-tokens", limits.max_num_batched_tokens, "tokens per step"
    )
    add_defaulted(parser, "--max-num-seqs", limits.max_num_seqs, "requests per step")
    _add_live_flags(parser)
    parser.add_argument(
        "--steps-out",
        type=Path,
        help="also write every timed step and the engine's facts "
        f"(--live: default {cfg.PROFILE_STEPS_OUT})",
    )
    parser.set_defaults(handler=run)


def _add_live_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--live",
        action="store_true",
        help="time a served engine's whole step periods under bench traffic instead of "
        "offline model steps (what compare --simulate needs)",
    )
    parser.add_argument(
        "--rates",
        type=float,
        nargs="+",
        help="--live: loads of the profiling traffic, req/s (default "
        f"{' '.join(f'{rate:g}' for rate in cfg.PROFILE_LIVE_RATES)})",
    )
    parser.add_argument("--workload", default=cfg.WORKLOAD, help="--live: the traffic's workload")


def run(args: argparse.Namespace) -> int:
    """Time the engine's steps, save the fitted predictor with them, print its accuracy."""
    from slidingserve.engines.vllm.engine_timing import save_profile

    steps, hardware = _time_served(args) if args.live else _time_offline(args)
    fit = save_profile(args.out, steps, args.model, hardware, args.seed)  # with its batches
    print(f"{len(steps.batches)} engine steps timed; held-out accuracy of the fitted predictor:\n")
    print(fit.validation.format_table())
    print(
        f"\nwrote {args.out}; serve with: slidingserve serve --model {args.model} "
        f"--predictor {args.out}"
    )
    return 0


def _time_served(args: argparse.Namespace) -> tuple[EngineSteps, str]:
    """A served engine's step periods under bench traffic, written to --steps-out."""
    from slidingserve.live.compare import LiveSettings
    from slidingserve.live.server_timing import time_server

    steps_out = args.steps_out or cfg.PROFILE_STEPS_OUT
    settings = LiveSettings(
        args.model,
        args.workload,
        seed=args.seed,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        out_dir=steps_out.parent,
    )
    steps = time_server(settings, steps_out, args.rates or cfg.PROFILE_LIVE_RATES)
    print(f"wrote {steps_out}; predict a comparison: slidingserve compare --simulate FILE")
    return steps, "vllm-cpu-served"


def _time_offline(args: argparse.Namespace) -> tuple[EngineSteps, str]:
    """The offline engine's model steps (written to --steps-out when given)."""
    from slidingserve.engines.vllm.engine_timing import time_engine
    from slidingserve.predictor.steps import save_engine_steps

    steps = time_engine(
        args.model,
        seed=args.seed,
        repeats=args.repeats,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
    )
    if args.steps_out is not None:
        save_engine_steps(args.steps_out, steps)
        print(f"wrote {args.steps_out}")
    return steps, "vllm-cpu"
