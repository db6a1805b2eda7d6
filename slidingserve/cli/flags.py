"""Command-line flags shared by the commands: those that build a workload (simulate, goodput,
diagnose, regimes, bench), the setup of a simulation (simulate, goodput, predictor, diagnose,
regimes) and the many-value flags that replace a one-value one (goodput, regimes). What they
become is `settings.py`'s: `settings_from`, `workload_flags`, `goodput_flags`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from slidingserve.cli.settings import EXPERIMENT, HARDWARE, LIMITS, RUN_REQUESTS
from slidingserve.eval.goodput import SearchSettings
from slidingserve.routing import ROUTERS
from slidingserve.sim.cluster import DEFAULT_ROUTER
from slidingserve.workloads import TRACE_BLOCK_SIZE
from slidingserve.workloads.prefixes import CONCURRENT_CONVERSATIONS


def positive_float(text: str) -> float:
    """An argparse type: a number > 0."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def comma_list(text: str) -> tuple[str, ...]:
    """An argparse type: `a,b` as ("a", "b"), blanks dropped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def add_setup_flags(parser: argparse.ArgumentParser) -> None:
    """The setup of a simulated run (hardware, engine, workload, policy options, --config)."""
    group = parser.add_argument_group("setup (override the --config file)")
    group.add_argument("--config", type=Path, help="TOML settings file (see README)")
    group.add_argument("--gpu", help=f"GPU of the simulated replica (default {HARDWARE.gpu})")
    group.add_argument(
        "--model",
        help="model served: a catalog name or a Hugging Face config.json "
        f"(default {HARDWARE.model})",
    )
    group.add_argument(
        "--profile-dir",
        help="GPU profiles in Vidur's layout (compute/<gpu>/<org>/<model>/mlp.csv, ...); "
        "their GPUs become --gpu names",
    )
    group.add_argument("--tp", type=int, help=f"tensor-parallel degree (default {HARDWARE.tp})")
    group.add_argument(
        "--noise", type=float, help=f"relative noise on iteration times ({HARDWARE.noise})"
    )
    group.add_argument(
        "--gpu-memory-utilization",
        type=float,
        help="share of each GPU's memory the engine may use, as vLLM's flag: the weights, "
        f"then the KV cache ({HARDWARE.gpu_memory_utilization})",
    )
    group.add_argument(
        "--max-num-batched-tokens",
        type=int,
        help=f"engine token budget ({LIMITS.max_num_batched_tokens})",
    )
    group.add_argument(
        "--max-num-seqs", type=int, help=f"engine batch-size cap ({LIMITS.max_num_seqs})"
    )
    group.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="switch off the prefix cache (on as in vLLM, where the workload says which "
        "requests share text: Mooncake's hash_ids, a system prompt, conversations)",
    )
    group.add_argument(
        "--requests",
        type=int,
        help="requests per simulated run "
        f"(simulate and diagnose {RUN_REQUESTS}, goodput {EXPERIMENT.num_requests})",
    )
    add_workload_flags(group)
    group.add_argument("--tbt-reading", help="TBT violations: cumulative or per-gap")
    group.add_argument(
        "--set",
        action="append",
        metavar="POLICY.OPTION=VALUE",
        help="a policy option, e.g. sarathi.chunk_size=256 (repeatable)",
    )


def add_workload_flags(group: Any) -> None:
    """The flags that describe a workload's arrivals, SLOs and tiers (argparse group/parser)."""
    group.add_argument(
        "--arrival", help="arrival process: poisson, gamma, or trace (replay the --trace files)"
    )
    group.add_argument("--burstiness", type=float, help="CV of gamma inter-arrival gaps")
    group.add_argument(
        "--overload",
        metavar="START:DURATION:FACTOR",
        help="transient overload: rate × FACTOR from START for DURATION seconds",
    )
    group.add_argument("--slo", help="SLO preset: strict or relaxed")
    group.add_argument("--slo-scale", type=float, help="multiply every SLO target")
    group.add_argument("--tiers", help="SLO tier preset (premium-standard, interactive-batch)")
    group.add_argument("--trace-dir", help="read request lengths from these trace CSVs")
    group.add_argument(
        "--trace",
        action="append",
        metavar="FILE[:CLASS[:WEIGHT]]",
        help="the workload is this trace file (CSV or JSON lines; repeatable for a mix, CLASS "
        "conversational or summarization, WEIGHT its share when resampled)",
    )
    group.add_argument(
        "--trace-columns",
        metavar="prompt=COL,output=COL,time=COL,time_unit=s|ms",
        help="the trace files' columns, where they are not named as Vidur's or Mooncake's",
    )
    group.add_argument(
        "--trace-spread",
        action="store_const",
        const=True,
        help="--arrival trace: space the requests that share a timestamp evenly up to the next "
        "one (a trace recorded at a coarse resolution, e.g. Mooncake's 3 s steps)",
    )
    group.add_argument(
        "--trace-start",
        type=int,
        help="--arrival trace: seed 0's window starts at this row (seed k: k × --requests on)",
    )
    group.add_argument(
        "--trace-block-size",
        type=int,
        help=f"--arrival trace: prompt tokens per hash id of a trace ({TRACE_BLOCK_SIZE})",
    )
    group.add_argument(
        "--system-prompt",
        metavar="TOKENS[:SHARE]",
        help="a shared system prompt of TOKENS tokens before the prompts of a SHARE (default 1) "
        "of the requests, chosen at random (not with --arrival trace)",
    )
    group.add_argument(
        "--conversations",
        metavar="TURNS[:CONCURRENT]",
        help="multi-turn conversations of TURNS turns, CONCURRENT (default "
        f"{CONCURRENT_CONVERSATIONS}) at once: a turn's prompt holds the previous turn's prompt "
        "and output (not with --arrival trace)",
    )


def add_search_flags(parser: Any, seeds: int, search: SearchSettings) -> None:
    """`--seeds`, `--threshold` and `--precision`, with the defaults of the caller's config."""
    parser.add_argument("--seeds", type=int, help=f"number of seeds (default {seeds})")
    parser.add_argument(
        "--threshold", type=float, help=f"violating fraction allowed ({search.threshold})"
    )
    parser.add_argument("--precision", type=float, help=f"relative precision ({search.precision})")


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """--replicas and --router: many replicas behind a router (docs/cluster.md)."""
    group = parser.add_argument_group("cluster (override the --config file's [cluster])")
    group.add_argument(
        "--replicas",
        metavar="N|GPU:MODEL:TP,...",
        help="simulate a cluster: N replicas of --gpu/--model/--tp, or one replica per "
        "hardware point (the same model on each); rates are the cluster's",
    )
    group.add_argument(
        "--router",
        help=f"which replica serves each request: {', '.join(ROUTERS)} (default {DEFAULT_ROUTER})",
    )


def add_ray_flag(parser: argparse.ArgumentParser) -> None:
    """--ray: the simulations as tasks on a Ray cluster (docs/cluster.md §5)."""
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the simulations as Ray tasks: auto (the cluster this machine joined), "
        "HOST:PORT or ray://HOST:PORT, or local (a private instance for this run); the same "
        "results as local processes; needs the cluster extra (setup.sh --cluster)",
    )


def workers_text(workers: int, ray: str | None) -> str:
    """Where the simulations run, for a command's first line."""
    return f"as tasks on Ray ({ray})" if ray else f"on {workers} worker(s)"


def add_hardware_flag(parser: Any, each: str) -> None:
    """`--hardware GPU:MODEL:TP[:MEMORY]`, repeatable; `each` says what the command does per
    point."""
    parser.add_argument(
        "--hardware",
        action="append",
        metavar="GPU:MODEL:TP[:MEMORY]",
        help=f"a hardware point, e.g. a100:llama-3-8b:2, or a40:llama-2-7b:1:0.6 with 60%% of "
        f"GPU memory for the engine (repeatable: {each}; default: --gpu/--model/--tp)",
    )


def refuse_both(args: argparse.Namespace, flag: str, many: str, ones: list[str]) -> None:
    """ValueError when the many-value `flag` (argument `many`) and any of the one-value
    flags `ones` (argument names) are both given."""
    given = [f"--{name.replace('_', '-')}" for name in ones if getattr(args, name) is not None]
    if getattr(args, many) and given:
        raise ValueError(f"give {flag} or {'/'.join(given)}, not both")


def add_defaulted(parser: Any, flag: str, default: float, what: str) -> None:
    """`flag`, of `default`'s type, with a help text that states the default."""
    parser.add_argument(
        flag, type=type(default), default=default, help=f"{what} (default {default})"
    )
