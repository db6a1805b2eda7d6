"""The commands that run a real vLLM engine (the `vllm` extra): serve, profile, tiny-model."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from slidingserve import config as cfg
from slidingserve.core.slo_args import DEFAULT_SLO
from slidingserve.engines.vllm.runtime import CPU_ENGINE_LIMITS


def add_engine_commands(commands: Any) -> None:
    """Add `serve`, `profile` and `tiny-model` to the `slidingserve` subcommands."""
    serve = commands.add_parser(
        "serve",
        help="vLLM's OpenAI-compatible server scheduled by a SlidingServe policy",
        description="Arguments after `--` go to vLLM's server unchanged.",
    )
    serve.add_argument("--model", required=True, help="model folder (Hugging Face format)")
    serve.add_argument("--policy", default="slidingserve")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    add_defaulted(serve, "--ttft-ms", DEFAULT_SLO.ttft_ms, "TTFT SLO of requests without one, ms")
    add_defaulted(serve, "--tbt-ms", DEFAULT_SLO.tbt_ms, "TBT SLO of requests without one, ms")
    serve.add_argument("--predictor", help="predictor JSON from `slidingserve profile`")
    serve.add_argument("--no-online-learning", action="store_true")
    serve.add_argument("--set", action="append", metavar="POLICY.OPTION=VALUE")
    serve.add_argument("vllm_args", nargs=argparse.REMAINDER, help="-- then vLLM flags")
    serve.set_defaults(handler=run_serve)

    profile = commands.add_parser(
        "profile", help="time a real engine's steps, fit the predictor, print its accuracy"
    )
    profile.add_argument("--model", required=True)
    profile.add_argument("--out", type=Path, default=Path("predictor.json"))
    profile.add_argument("--seed", type=int, default=0)
    profile.add_argument("--repeats", type=int, default=3, help="rounds of profiling traffic")
    limits = CPU_ENGINE_LIMITS
    add_defaulted(
        profile, "--max-num-batched-tokens", limits.max_num_batched_tokens, "tokens per step"
    )
    add_defaulted(profile, "--max-num-seqs", limits.max_num_seqs, "requests per step")
    profile.add_argument(
        "--live",
        action="store_true",
        help="time a served engine's whole step periods under bench traffic instead of "
        "offline model steps (what compare --simulate needs)",
    )
    profile.add_argument(
        "--rates",
        type=float,
        nargs="+",
        help="--live: loads of the profiling traffic, req/s (default 2 8 16 32)",
    )
    profile.add_argument("--workload", default="sharegpt", help="--live: the traffic's workload")
    profile.add_argument(
        "--steps-out",
        type=Path,
        help="also write every timed step and the engine's facts (--live: default steps.json)",
    )
    profile.set_defaults(handler=run_profile)

    compare = commands.add_parser(
        "compare",
        help="policies side by side on live vLLM servers (ours and vLLM's fcfs/priority)",
    )
    source = compare.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="model folder: start a live server per policy")
    source.add_argument(
        "--simulate",
        type=Path,
        metavar="STEPS",
        help="predict instead: simulate the engine of `profile --live --steps-out STEPS`",
    )
    compare.add_argument(
        "--policies",
        default="slidingserve,sarathi-edf,vllm:fcfs,vllm:priority",
        help="project policies and vllm:fcfs, vllm:priority (comma list)",
    )
    compare.add_argument("--rates", type=float, nargs="+", default=[8.0], help="fixed loads")
    compare.add_argument("--search", action="store_true", help="also search each goodput")
    compare.add_argument(
        "--repeats", type=int, default=3, help="runs per rate, fixed or searched (median)"
    )
    compare.add_argument("--workload", help="default sharegpt; with --trace: the trace")
    compare.add_argument(
        "--trace",
        action="append",
        metavar="FILE[:CLASS[:WEIGHT]]",
        help="the workload is this trace file (repeatable; see simulate --help)",
    )
    compare.add_argument("--trace-columns", help="prompt=COL,output=COL,time=COL,time_unit=s|ms")
    compare.add_argument("--arrival", help="poisson (default), or trace: replay the --trace files")
    compare.add_argument("--requests", type=int, default=200, help="requests per run")
    compare.add_argument("--seed", type=int, default=0)
    compare.add_argument("--slo-scale", type=float, help="default: calibrated on this machine")
    compare.add_argument("--out-dir", type=Path, default=Path("results/live"))
    compare.add_argument(
        "--against",
        type=Path,
        metavar="COMPARE_JSON",
        help="with --simulate: predict that live comparison (its policies, rates, workload, "
        "requests, seed, repeats, SLO scale) and print both side by side",
    )
    compare.set_defaults(handler=run_compare)

    tiny = commands.add_parser(
        "tiny-model", help="a small random Llama with a locally trained tokenizer, for demos"
    )
    tiny.add_argument("--out", type=Path, required=True)
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument(
        "--size",
        default="tiny",
        choices=["tiny", "small"],
        help="tiny: 2 layers × 256; small: 4 layers × 512, ~10× the compute (engine-bound)",
    )
    tiny.set_defaults(handler=run_tiny_model)


def add_defaulted(parser: Any, flag: str, default: float, what: str) -> None:
    """`flag`, of `default`'s type, with a help text that states the default."""
    parser.add_argument(
        flag, type=type(default), default=default, help=f"{what} (default {default})"
    )


def run_serve(args: argparse.Namespace) -> int:
    from slidingserve.engines.vllm.server import run_server

    settings: cfg.Settings = {section: {} for section in cfg.SECTIONS}
    cfg.parse_assignments(args.set, settings)
    others = sorted(set(settings["policies"]) - {args.policy})
    if others:
        raise ValueError(
            f"--set gives options of {', '.join(others)}, but the server runs {args.policy} "
            "(--policy)"
        )
    extra = [a for a in args.vllm_args if a != "--"]
    run_server(
        args.model,
        args.policy,
        host=args.host,
        port=args.port,
        ttft_ms=args.ttft_ms,
        tbt_ms=args.tbt_ms,
        predictor=args.predictor,
        policy_options=settings["policies"].get(args.policy, {}),
        online_learning=not args.no_online_learning,
        extra_vllm_args=extra,
    )


def run_profile(args: argparse.Namespace) -> int:
    from slidingserve.engines.vllm.profiling import save_profile
    from slidingserve.predictor.steps import save_engine_steps

    if args.live:
        from slidingserve.live.compare import LiveSettings
        from slidingserve.live.profiling import PROFILE_RATES, profile_server

        steps_out = args.steps_out or Path("steps.json")
        settings = LiveSettings(
            args.model,
            args.workload,
            seed=args.seed,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_num_seqs=args.max_num_seqs,
            out_dir=steps_out.parent,
        )
        steps = profile_server(settings, steps_out, args.rates or PROFILE_RATES)
        hardware = "vllm-cpu-served"
        print(f"wrote {steps_out}; predict a comparison: slidingserve compare --simulate FILE")
    else:
        from slidingserve.engines.vllm.profiling import profile_engine

        steps = profile_engine(
            args.model,
            seed=args.seed,
            repeats=args.repeats,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_num_seqs=args.max_num_seqs,
        )
        hardware = "vllm-cpu"
        if args.steps_out is not None:
            save_engine_steps(args.steps_out, steps)
            print(f"wrote {args.steps_out}")
    fit = save_profile(args.out, steps, args.model, hardware, args.seed)  # with its batches
    print(f"{len(steps.batches)} engine steps timed; held-out accuracy of the fitted predictor:\n")
    print(fit.validation.format_table())
    print(
        f"\nwrote {args.out}; serve with: slidingserve serve --model {args.model} "
        f"--predictor {args.out}"
    )
    return 0


def run_compare(args: argparse.Namespace) -> int:
    from slidingserve.live.compare import LiveSettings, compare, table
    from slidingserve.reporting import write_json

    if args.against is not None and args.simulate is None:
        raise ValueError("--against needs --simulate: it compares a prediction with a live run")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    workload: cfg.Settings = {section: {} for section in cfg.SECTIONS}
    cfg.override(
        workload,
        "workload",
        traces=args.trace,
        trace_columns=args.trace_columns,
        arrival=args.arrival,
    )
    given = (args.workload,) if args.workload else None
    settings = LiveSettings(
        args.model or "",
        cfg.workload_names(workload, given, ("sharegpt",))[0],
        args.requests,
        args.seed,
        args.slo_scale,
        repeats=args.repeats,
        out_dir=args.out_dir,
        traces=cfg.trace_sources(workload),
        arrival=cfg.arrival_config(workload),
    )
    rates, search, measured = args.rates, args.search, None
    if args.against is not None:
        from slidingserve.live.agreement import load_measured

        measured = load_measured(args.against)
        settings = dataclasses.replace(
            settings,
            workload=measured.workload,
            requests=measured.requests,
            seed=measured.seed,
            repeats=measured.repeats,
            slo_scale=measured.slo_scale if args.slo_scale is None else args.slo_scale,
        )
        policies, rates, search = measured.policies, measured.rates, measured.searched
    if args.simulate is not None:
        from slidingserve.live.simulated import simulate_comparison
        from slidingserve.predictor.steps import load_engine_steps

        steps = load_engine_steps(args.simulate)
        result = simulate_comparison(steps, settings, policies, rates, search=search)
        where, name = f"simulated {steps.engine}", "compare-simulated.json"
    else:
        result = compare(settings, policies, rates, search=search)
        where, name = f"live {args.model}", "compare.json"
    print(
        f"\n{where}: {settings.workload}, {settings.requests} requests a run, seed "
        f"{settings.seed}, SLO scale {result.slo_scale:.3f} (strict preset), violations by "
        f"cumulative deadlines\n"
    )
    print(table(result))
    if measured is not None:
        from slidingserve.live.agreement import agreement_table

        print(f"\nmeasured ({args.against}) beside simulated:\n")
        print(agreement_table(measured, result))
    write_json(args.out_dir / name, result)
    print(f"\nwrote {args.out_dir / name}")
    return 0


def run_tiny_model(args: argparse.Namespace) -> int:
    from slidingserve.engines.vllm.tiny_model import make_tiny_llama

    path = make_tiny_llama(args.out, seed=args.seed, size=args.size)
    print(json.dumps({"model": str(path)}))
    return 0
