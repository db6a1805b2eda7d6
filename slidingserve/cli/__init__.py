"""The `slidingserve` command: simulate, search goodput, fit the predictor, list names, and
run, time and compare real engines. One module per command (or close family), each with its
`add_parser` and its `run`; shared flags in `flags.py`; settings files, defaults and the
construction of every config in `settings.py`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from slidingserve import __version__
from slidingserve.cli import (
    bench,
    catalog,
    compare,
    diagnose,
    goodput,
    predictor,
    profile,
    regimes,
    serve,
    simulate,
    tiny_model,
    trace_stats,
    validate,
)
from slidingserve.engines.vllm.runtime import VllmMissingError

COMMANDS = (
    simulate,
    goodput,
    predictor,
    catalog,
    serve,
    profile,
    compare,
    tiny_model,
    bench,
    diagnose,
    regimes,
    trace_stats,
    validate,
)
"""The modules of the subcommands, in the order `--help` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand; each sets `handler`, its `run`."""
    parser = argparse.ArgumentParser(
        prog="slidingserve",
        description="SLO-aware scheduling for LLM inference: simulate policies, search goodput.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command of `argv` (default: the process's arguments); its exit status, 2 for
    a bad setting, 130 when interrupted."""
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
