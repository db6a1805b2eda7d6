"""The `validate` command: is the simulator right about this engine? Profile a served
engine, find every policy's live goodput at rates set by its measured capacity, run the
simulated twin of the same trials, print both side by side and draw them (docs/live.md §6)."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slidingserve.cli.compare import add_live_workload_flags, live_settings

if TYPE_CHECKING:
    from slidingserve.live.validation import Validation, ValidationSettings
    from slidingserve.predictor.steps import EngineSteps

VALIDATE_POLICIES = "slidingserve,slidingserve-paper,sarathi-edf,qoserve,vllm:fcfs,vllm:priority"
VALIDATE_OUT_DIR = Path("results/validate")


def add_parser(commands: Any) -> None:
    """Add `validate` to the `slidingserve` subcommands."""
    from slidingserve.live.validation import DEFAULT_LOADS, DEFAULT_NOISE_DRAWS

    parser = commands.add_parser(
        "validate",
        help="live goodput of every policy on a served engine beside the simulator's",
    )
    parser.add_argument("--model", required=True, help="model folder to serve")
    parser.add_argument(
        "--steps",
        type=Path,
        help="the engine's step periods from an earlier `profile --live` (default: profile now)",
    )
    parser.add_argument("--policies", default=VALIDATE_POLICIES, help="comma list")
    add_live_workload_flags(parser)
    parser.add_argument("--seeds", type=int, default=3, help="trials per rate, one per seed")
    parser.add_argument(
        "--loads",
        type=float,
        nargs="+",
        default=list(DEFAULT_LOADS),
        help="rates as fractions of the measured capacity",
    )
    parser.add_argument(
        "--budget", type=float, default=60.0, help="minutes the live trials may take at most"
    )
    parser.add_argument(
        "--interleave",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="every policy's server up at once, their trials interleaved so that the "
        "machine's drift moves them alike (default: on with vLLM's CPU build; off on a GPU, "
        "where each server takes most of its memory)",
    )
    parser.add_argument(
        "--noise-draws",
        type=int,
        default=DEFAULT_NOISE_DRAWS,
        help="the twin runs every trial with this many draws of the engine's noise and "
        "reports their mean and range (1: the trials' seeds alone)",
    )
    parser.add_argument(
        "--live-curves",
        type=Path,
        help="finish a run stopped before its twin: the live curves it kept (its "
        "live-curves.jsonl), with the live run's flags; no server starts, the twin runs "
        "their trials from --steps (the live run's profile) and the report compares them, "
        "policies as kept",
    )
    parser.add_argument(
        "--capacity",
        type=float,
        help="with --live-curves kept by an earlier release (no venue line): the live "
        "capacity, req/s, as the run printed it (with --slo-scale)",
    )
    parser.add_argument("--out-dir", type=Path, default=VALIDATE_OUT_DIR)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Validate; print the tables, write validation.json and validation.png."""
    from slidingserve.engines.vllm.runtime import is_cpu_build
    from slidingserve.live.kept_curves import (
        keep_closing_capacity,
        keep_curve,
        keep_venue,
        trial_facts,
    )
    from slidingserve.live.validation import ValidationSettings, validate
    from slidingserve.live.validation_report import plot, report, summary
    from slidingserve.predictor.steps import load_engine_steps
    from slidingserve.reporting import write_json

    args.repeats = args.seeds
    live = live_settings(args)
    interleave = is_cpu_build() if args.interleave is None else args.interleave
    settings = ValidationSettings(
        live,
        tuple(args.loads),
        budget_s=60 * args.budget,
        interleave=interleave,
        noise_draws=args.noise_draws,
    )
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    steps = load_engine_steps(args.steps) if args.steps is not None else None
    if args.capacity is not None and args.live_curves is None:
        raise ValueError("--capacity goes with --live-curves (a live run measures its own)")
    if args.live_curves is not None:
        result, kept = _finish(args, settings, steps), args.live_curves
    else:
        kept = args.out_dir / "live-curves.jsonl"  # replaced once the live venue opens
        result = validate(
            settings,
            policies,
            steps,
            args.steps or args.out_dir / "steps.json",
            measured=functools.partial(keep_curve, kept),
            opened=functools.partial(keep_venue, kept, trials=trial_facts(settings)),
            closed=functools.partial(keep_closing_capacity, kept),
        )
    print()
    print(report(result))
    payload = {**result.to_dict(), "summary": summary(result)}
    write_json(args.out_dir / "validation.json", payload)
    picture = plot(result, args.out_dir / "validation.png")
    print(f"\nwrote {args.out_dir / 'validation.json'} and {picture} ({kept}: the live curves)")
    return 0


def _finish(
    args: argparse.Namespace, settings: ValidationSettings, steps: EngineSteps | None
) -> Validation:
    """The validation of the live curves an earlier run kept (`--live-curves`)."""
    from slidingserve.live.kept_curves import read_live_venue
    from slidingserve.live.validation import finish_validation

    if steps is None:
        raise ValueError("--live-curves needs --steps: the profile of the live run")
    live = read_live_venue(args.live_curves, settings, args.capacity, args.slo_scale)
    print(f"the live curves of {', '.join(live.curves)} from {args.live_curves}")
    return finish_validation(settings, list(live.curves), steps, args.steps, live)
