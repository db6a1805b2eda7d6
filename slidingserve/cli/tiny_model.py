"""The `tiny-model` command: a small random Llama with a locally trained tokenizer, for demos
and tests (the `vllm` extra)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from slidingserve.cli import settings as cfg


def add_parser(commands: Any) -> None:
    """Add `tiny-model` to the `slidingserve` subcommands."""
    parser = commands.add_parser(
        "tiny-model", help="a small random Llama with a locally trained tokenizer, for demos"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=cfg.SEED)
    parser.add_argument(
        "--size",
        default=cfg.TINY_MODEL_SIZE,
        choices=["tiny", "small"],
        help="tiny: 2 layers × 256; small: 4 layers × 512, ~10× the compute (engine-bound)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Write the model folder; print its path as JSON."""
    from slidingserve.engines.vllm.tiny_model import make_tiny_llama

    path = make_tiny_llama(args.out, seed=args.seed, size=args.size)
    print(json.dumps({"model": str(path)}))
    return 0
