"""The `serve` command: vLLM's OpenAI-compatible server, scheduled by a SlidingServe policy
(the `vllm` extra)."""

from __future__ import annotations

import argparse
from typing import Any

from slidingserve.cli import settings as cfg
from slidingserve.cli.flags import add_defaulted
from slidingserve.engines.vllm.overload import REFUSAL_STATUSES


def add_parser(commands: Any) -> None:
    """Add `serve` to the `slidingserve` subcommands."""
    parser = commands.add_parser(
        "serve",
        help="vLLM's OpenAI-compatible server scheduled by a SlidingServe policy",
        description="Arguments after `--` go to vLLM's server unchanged.",
    )
    parser.add_argument("--model", required=True, help="model folder (Hugging Face format)")
    parser.add_argument("--policy", default=cfg.SERVE_POLICY)
    parser.add_argument("--host", default=cfg.SERVE_HOST)
    parser.add_argument("--port", type=int, default=cfg.SERVE_PORT)
    add_defaulted(parser, "--ttft-ms", cfg.SLO.ttft_ms, "TTFT SLO of requests without one, ms")
    add_defaulted(parser, "--tbt-ms", cfg.SLO.tbt_ms, "TBT SLO of requests without one, ms")
    add_defaulted(
        parser,
        "--slo-margin-ms",
        cfg.SLO.margin_ms,
        "plan every request's deadlines this much earlier, ms: the time from the engine to "
        "its clients (streaming, network), which the engine does not see",
    )
    parser.add_argument("--predictor", help="predictor JSON from `slidingserve profile`")
    parser.add_argument("--no-online-learning", action="store_true")
    parser.add_argument("--set", action="append", metavar="POLICY.OPTION=VALUE")
    parser.add_argument(
        "--refusal-status",
        type=int,
        choices=REFUSAL_STATUSES,
        default=REFUSAL_STATUSES[0],
        help="HTTP status of a request refused by admission control (default 503, as vLLM's "
        "queue caps)",
    )
    parser.add_argument(
        "--admission-guard-ms",
        type=float,
        default=0.0,
        help="with admission control on, the API server refuses a request whose first token "
        "it predicts within this many ms of its deadline, so that the engine, whose "
        "refusals come a step or more later, seldom refuses one itself (default 0)",
    )
    parser.add_argument("vllm_args", nargs=argparse.REMAINDER, help="-- then vLLM flags")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Start the server; it runs until stopped."""
    from slidingserve.engines.vllm.server import run_server

    settings = cfg.with_assignments(cfg.empty_settings(), args.set)
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
        slo_margin_ms=args.slo_margin_ms,
        predictor=args.predictor,
        policy_options=settings["policies"].get(args.policy, {}),
        online_learning=not args.no_online_learning,
        refusal_status=args.refusal_status,
        admission_guard_ms=args.admission_guard_ms,
        extra_vllm_args=extra,
    )
