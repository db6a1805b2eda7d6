"""The `bench` command: an SLO load generator for any OpenAI-compatible streaming server."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slidingserve.cli import settings as cfg
from slidingserve.cli.flags import add_workload_flags

if TYPE_CHECKING:
    from slidingserve.bench import BenchConfig

INTERRUPTED = 130  # exit status after Ctrl-C, as a shell reports it


def _positive(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


DESCRIPTION = (
    "Sends the simulator's workload (lengths scaled to the model's context) to URL's "
    "/v1/completions as streamed requests with their SLO in vllm_xargs, and reports "
    "TTFT/TPOT/ITL/e2e, SLO violations and goodput. Ctrl-C stops it and still writes "
    "what was measured."
)


def add_parser(commands: Any) -> None:
    """Add `bench` to the `slidingserve` subcommands."""
    bench = commands.add_parser(
        "bench",
        help="replay a workload against an OpenAI-compatible server: latencies, SLO violations",
        description=DESCRIPTION,
    )
    bench.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    bench.add_argument("--model", help="served model name (default: the first of /v1/models)")
    bench.add_argument(
        "--workload",
        help=f"{cfg.WORKLOAD} (default), arxiv, mixed-v1, ...; with --trace: the trace",
    )
    bench.add_argument(
        "--rate",
        type=_positive,
        help=f"requests/s (default {cfg.RATE:g}; a replayed trace: as recorded)",
    )
    bench.add_argument("--seed", type=int, default=cfg.SEED)
    bench.add_argument("--requests", type=int, help=f"requests to send ({cfg.BENCH_REQUESTS})")
    _add_request_flags(bench)
    _add_workload_flags(bench)
    bench.add_argument("--out", type=Path, default=cfg.BENCH_OUT)
    bench.add_argument("--no-plot", action="store_true", help="no PNG beside the JSON")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.set_defaults(handler=run)


def _add_request_flags(parser: argparse.ArgumentParser) -> None:
    """How long to send, how long a request may take, and what each request carries."""
    parser.add_argument(
        "--duration",
        type=_positive,
        default=cfg.BENCH_DURATION,
        help=f"stop sending after S seconds ({cfg.BENCH_DURATION:g})",
    )
    parser.add_argument(
        "--timeout",
        type=_positive,
        default=cfg.BENCH_TIMEOUT,
        help=f"seconds per request ({cfg.BENCH_TIMEOUT:g})",
    )
    parser.add_argument("--max-model-len", type=int, help="context (default: from /v1/models)")
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=cfg.BENCH_VOCAB_SIZE,
        help=f"prompt ids < this ({cfg.BENCH_VOCAB_SIZE})",
    )
    parser.add_argument(
        "--no-xargs", action="store_true", help="send neither vllm_xargs nor return_token_ids"
    )
    parser.add_argument(
        "--priority-from-slo",
        action="store_true",
        help="send vLLM's priority = TTFT deadline in ms (server: --scheduling-policy priority)",
    )


def _add_workload_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("workload (override the --config file's [workload])")
    group.add_argument("--config", type=Path, help="TOML settings file (see README)")
    add_workload_flags(group)


def bench_config(args: argparse.Namespace) -> BenchConfig:
    """The `BenchConfig` of parsed `bench` arguments (ValueError for bad settings)."""
    from slidingserve.bench import BenchConfig

    settings = cfg.override(cfg.load_settings(args.config), "workload", **cfg.workload_flags(args))
    given = (args.workload,) if args.workload else None
    name = cfg.workload_names(settings, given)[0]
    workload = cfg.workload_config(settings, name, cfg.BENCH_REQUESTS)
    given_rate = [args.rate] if args.rate else None
    (rate,) = cfg.default_rates(given_rate, workload, args.seed)
    return BenchConfig(
        url=args.url,
        workload=workload,
        rate=rate,
        model=args.model,
        seed=args.seed,
        vocab_size=args.vocab_size,
        max_model_len=args.max_model_len,
        max_duration=args.duration,
        request_timeout=args.timeout,
        xargs=not args.no_xargs,
        priority_from_slo=args.priority_from_slo,
        progress=not args.no_progress,
    )


def run(args: argparse.Namespace) -> int:
    """Run, print the summary, write the JSON (and PNG); 130 when stopped by Ctrl-C."""
    from slidingserve.bench import format_summary, plot_bench, run_bench, write_bench_json

    result = run_bench(bench_config(args))
    written = [write_bench_json(result, args.out)]
    if not args.no_plot:
        written.append(plot_bench(result, args.out.with_suffix(".png")))
    print(format_summary(result))
    print("\nwrote " + ", ".join(str(path) for path in written))
    return INTERRUPTED if result.summary.interrupted else 0
