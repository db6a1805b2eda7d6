"""The `compare` command: policies side by side on live vLLM servers (ours and vLLM's own),
or predicted by simulating a timed engine (--simulate), optionally beside a live run."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from slidingserve.cli import settings as cfg

if TYPE_CHECKING:
    from slidingserve.live.agreement import MeasuredComparison
    from slidingserve.live.compare import LiveComparison, LiveSettings


def add_parser(commands: Any) -> None:
    """Add `compare` to the `slidingserve` subcommands."""
    parser = commands.add_parser(
        "compare",
        help="policies side by side on live vLLM servers (ours and vLLM's fcfs/priority)",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="model folder: start a live server per policy")
    source.add_argument(
        "--simulate",
        type=Path,
        metavar="STEPS",
        help="predict instead: simulate the engine of `profile --live --steps-out STEPS`",
    )
    parser.add_argument(
        "--policies",
        default=cfg.COMPARE_POLICIES,
        help="project policies and vllm:fcfs, vllm:priority (comma list)",
    )
    parser.add_argument(
        "--rates", type=float, nargs="+", default=list(cfg.COMPARE_RATES), help="fixed loads"
    )
    parser.add_argument("--search", action="store_true", help="also search each goodput")
    parser.add_argument(
        "--repeats",
        type=int,
        default=cfg.COMPARE_REPEATS,
        help="runs per rate, fixed or searched (median)",
    )
    add_live_workload_flags(parser)
    parser.add_argument("--out-dir", type=Path, default=cfg.COMPARE_OUT_DIR)
    parser.add_argument(
        "--against",
        type=Path,
        metavar="COMPARE_JSON",
        help="with --simulate: predict that live comparison (its policies, rates, workload, "
        "requests, seed, repeats, SLO scale) and print both side by side",
    )
    parser.set_defaults(handler=run)


def add_live_workload_flags(parser: argparse.ArgumentParser) -> None:
    """The comparison's workload, requests, seed and SLO scale."""
    parser.add_argument("--workload", help=f"default {cfg.WORKLOAD}; with --trace: the trace")
    parser.add_argument(
        "--trace",
        action="append",
        metavar="FILE[:CLASS[:WEIGHT]]",
        help="the workload is this trace file (repeatable; see simulate --help)",
    )
    parser.add_argument("--trace-columns", help="prompt=COL,output=COL,time=COL,time_unit=s|ms")
    parser.add_argument(
        "--arrival",
        help=f"{cfg.ARRIVAL.process} (default), gamma (with --burstiness), or trace: replay "
        "the --trace files",
    )
    parser.add_argument("--burstiness", type=float, help="CV of gamma inter-arrival gaps")
    parser.add_argument(
        "--requests", type=int, default=cfg.COMPARE_REQUESTS, help="requests per run"
    )
    parser.add_argument("--seed", type=int, default=cfg.SEED)
    parser.add_argument("--slo-scale", type=float, help="default: calibrated on this machine")
    parser.add_argument(
        "--system-prompt",
        metavar="TOKENS[:SHARE]",
        help="a SHARE of requests start with one TOKENS-token system prompt (usage, section 6)",
    )


class _Plan(NamedTuple):
    """What to compare: from the flags, or from the live comparison of --against."""

    settings: LiveSettings
    policies: Sequence[str]
    rates: Sequence[float]  # req/s, the fixed loads
    search: bool  # also search each policy's goodput
    measured: MeasuredComparison | None  # --against: the live comparison predicted


def run(args: argparse.Namespace) -> int:
    """Run (or simulate) the comparison; print its table and write its JSON."""
    from slidingserve.live.compare import table
    from slidingserve.reporting import write_json

    if args.against is not None and args.simulate is None:
        raise ValueError("--against needs --simulate: it compares a prediction with a live run")
    plan = _plan(args)
    result, where, name = _compare(args, plan)
    settings = plan.settings
    print(
        f"\n{where}: {settings.workload}, {settings.requests} requests a run, seed "
        f"{settings.seed}, SLO scale {result.slo_scale:.3f} (strict preset), violations by "
        f"cumulative deadlines\n"
    )
    print(table(result))
    if plan.measured is not None:
        from slidingserve.live.agreement import agreement_table

        print(f"\nmeasured ({args.against}) beside simulated:\n")
        print(agreement_table(plan.measured, result))
    write_json(args.out_dir / name, result)
    print(f"\nwrote {args.out_dir / name}")
    return 0


def _plan(args: argparse.Namespace) -> _Plan:
    """The flags' comparison, or with --against that live comparison's (its SLO scale
    unless --slo-scale is given)."""
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    settings = live_settings(args)
    if args.against is None:
        return _Plan(settings, policies, args.rates, args.search, None)
    from slidingserve.live.agreement import load_measured

    measured = load_measured(args.against)
    settings = dataclasses.replace(
        settings,
        workload=measured.workload,
        requests=measured.requests,
        seed=measured.seed,
        repeats=measured.repeats,
        slo_scale=measured.slo_scale if args.slo_scale is None else args.slo_scale,
        system_prompt=measured.system_prompt,
        arrival=measured.arrival,
    )
    return _Plan(settings, measured.policies, measured.rates, measured.searched, measured)


def live_settings(args: argparse.Namespace) -> LiveSettings:
    from slidingserve.live.compare import LiveSettings

    workload = cfg.override(
        cfg.empty_settings(),
        "workload",
        traces=args.trace,
        trace_columns=args.trace_columns,
        arrival=args.arrival,
        burstiness=args.burstiness,
        system_prompt=args.system_prompt,
    )
    given = (args.workload,) if args.workload else None
    return LiveSettings(
        args.model or "",
        cfg.workload_names(workload, given)[0],
        args.requests,
        args.seed,
        args.slo_scale,
        repeats=args.repeats,
        out_dir=args.out_dir,
        traces=cfg.trace_sources(workload),
        arrival=cfg.arrival_config(workload),
        system_prompt=cfg.prefix_options(workload).get("system_prompt"),
    )


def _compare(args: argparse.Namespace, plan: _Plan) -> tuple[LiveComparison, str, str]:
    """The comparison, where it ran and the file it goes to."""
    if args.simulate is not None:
        from slidingserve.live.simulated import simulate_comparison
        from slidingserve.predictor.steps import load_engine_steps

        steps = load_engine_steps(args.simulate)
        result = simulate_comparison(
            steps, plan.settings, plan.policies, plan.rates, search=plan.search
        )
        return result, f"simulated {steps.engine}", "compare-simulated.json"
    from slidingserve.live.compare import compare

    result = compare(plan.settings, plan.policies, plan.rates, search=plan.search)
    return result, f"live {args.model}", "compare.json"
