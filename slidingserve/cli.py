"""The `slidingserve` command: simulate, search goodput, fit the predictor, list names."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from slidingserve import __version__
from slidingserve.cli_bench import add_bench_command
from slidingserve.cli_commands import run_predictor, run_simulate
from slidingserve.cli_diagnose import add_diagnose_command
from slidingserve.cli_engine import add_engine_commands
from slidingserve.cli_flags import add_common_flags as _add_common
from slidingserve.cli_flags import add_hardware_flag, add_search_flags
from slidingserve.cli_flags import comma_list as _comma_list
from slidingserve.cli_flags import positive_float as _positive_float
from slidingserve.cli_goodput import GOODPUT_DESCRIPTION, HARDWARE_EACH, run_goodput
from slidingserve.cli_profiles import add_profile_commands
from slidingserve.cli_regimes import add_regimes_command
from slidingserve.cli_traces import add_trace_stats_command
from slidingserve.engines.vllm.runtime import VllmMissingError
from slidingserve.eval.experiment import GoodputExperiment
from slidingserve.eval.goodput import SearchSettings
from slidingserve.predictor import DEFAULT_FEATURES, FEATURE_SETS

# Help texts state the defaults of the configs themselves, so the two cannot drift.
EXPERIMENT = GoodputExperiment()
SEARCH = SearchSettings()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slidingserve",
        description="SLO-aware scheduling for LLM inference: simulate policies, search goodput.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    simulate = commands.add_parser("simulate", help="policy × workload × rate → metrics table")
    simulate.add_argument("--policy", type=_comma_list, default=("sarathi",), help="names, a,b")
    simulate.add_argument(
        "--workload", type=_comma_list, help="names (default sharegpt; with --trace: trace)"
    )
    simulate.add_argument(
        "--rate",
        type=_positive_float,
        nargs="+",
        help="req/s (default 1; a replayed trace: its recorded rate)",
    )
    simulate.add_argument("--seed", type=int, default=0)
    simulate.add_argument("--out", type=Path, help="write results to a .json or .csv file")
    _add_common(simulate)
    simulate.set_defaults(handler=run_simulate)

    goodput = commands.add_parser(
        "goodput",
        help="policies × workloads (× hardware points) → goodput tables + plot",
        description=GOODPUT_DESCRIPTION,
    )
    goodput.add_argument(
        "--policies", type=_comma_list, help=f"default {','.join(EXPERIMENT.policies)}"
    )
    goodput.add_argument(
        "--workloads", type=_comma_list, help=f"default {','.join(EXPERIMENT.workloads)}"
    )
    add_search_flags(goodput, len(EXPERIMENT.seeds), SEARCH)
    goodput.add_argument(
        "--reference",
        help=f"goodput ratios are to this policy (default {EXPERIMENT.reference}, "
        "or the first policy when it does not run)",
    )
    goodput.add_argument(
        "--criteria",
        type=_comma_list,
        help="who must meet SLOs: overall, worst-tier, tier:NAME (comma list; overall)",
    )
    goodput.add_argument(
        "--curve-points",
        type=int,
        help=f"rates per violation curve, each run on every seed ({EXPERIMENT.curve_points})",
    )
    add_hardware_flag(goodput, HARDWARE_EACH)
    goodput.add_argument("--jobs", type=int, help="worker processes (default: one per core)")
    goodput.add_argument(
        "--out-dir",
        type=Path,
        default=Path("results/goodput"),
        help="where the files go (default %(default)s)",
    )
    goodput.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_common(goodput)
    goodput.set_defaults(handler=run_goodput)

    predictor = commands.add_parser(
        "predictor", help="fit the batch-latency predictor to the simulated GPU, report accuracy"
    )
    predictor.add_argument("--samples", type=int, default=4000, help="profiled batches")
    predictor.add_argument("--seed", type=int, default=0)
    predictor.add_argument("--out", type=Path, help="save the fitted predictor as JSON")
    predictor.add_argument(
        "--features",
        choices=list(FEATURE_SETS),
        default=DEFAULT_FEATURES,
        help=f"paper: the paper's seven features; rich: more (default {DEFAULT_FEATURES})",
    )
    predictor.add_argument(
        "--steps",
        type=Path,
        help="fit to this engine-steps file (`profile --steps-out`), not the simulated GPU",
    )
    _add_common(predictor)
    predictor.set_defaults(handler=run_predictor)

    add_profile_commands(commands)
    add_engine_commands(commands)
    add_bench_command(commands)
    add_diagnose_command(commands)
    add_regimes_command(commands)
    add_trace_stats_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except (ValueError, TypeError, OSError, VllmMissingError) as error:
        print(f"slidingserve {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"slidingserve {args.command}: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
