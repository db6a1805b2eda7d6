"""The `predictor` command: fit the batch-latency predictor to the simulated GPU (or to a
real engine's timed steps) and print its held-out accuracy."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from slidingserve.cli import settings as cfg
from slidingserve.cli.flags import add_setup_flags
from slidingserve.predictor import FEATURE_SETS, FitResult, PredictorMetadata, save_predictor
from slidingserve.predictor.calibration import fit_batches
from slidingserve.predictor.steps import load_engine_steps
from slidingserve.sim.calibration import time_batches
from slidingserve.sim.hardware import hardware_label


def add_parser(commands: Any) -> None:
    """Add `predictor` to the `slidingserve` subcommands."""
    parser = commands.add_parser(
        "predictor", help="fit the batch-latency predictor to the simulated GPU, report accuracy"
    )
    parser.add_argument(
        "--samples", type=int, default=cfg.PREDICTOR_SAMPLES, help="profiled batches"
    )
    parser.add_argument("--seed", type=int, default=cfg.SEED)
    parser.add_argument("--out", type=Path, help="save the fitted predictor as JSON")
    parser.add_argument(
        "--features",
        choices=list(FEATURE_SETS),
        default=cfg.PREDICTOR_FEATURES,
        help=f"paper: the paper's seven features; rich: more (default {cfg.PREDICTOR_FEATURES})",
    )
    parser.add_argument(
        "--steps",
        type=Path,
        help="fit to this engine-steps file (`profile --steps-out`), not the simulated GPU",
    )
    add_setup_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Fit the predictor of `--features` to the simulated GPU, or to `--steps`, and print
    its held-out accuracy; `--out` saves it."""
    if args.steps is not None:
        steps = load_engine_steps(args.steps)
        result = fit_batches(list(steps.batches), args.seed, features=args.features)
        model, hardware, source = steps.engine, "engine-steps", f"steps of {steps.engine}"
    else:
        settings = cfg.one_engine(cfg.settings_from(args), "predictor")
        config = cfg.hardware_config(settings)
        batches = time_batches(config, cfg.engine_limits(settings), args.samples, args.seed)
        result = fit_batches(batches, args.seed, features=args.features)
        model, hardware = config.model, hardware_label(config)
        source = f"batches of the simulated {config.model} on {config.gpu} TP{config.tp}"
    print(
        f"Predictor ({args.features} features) fitted on {result.num_samples} {source}; "
        "held-out accuracy:\n"
    )
    print(result.validation.format_table())
    if args.out:
        _save(args.out, result, model, hardware)
    return 0


def _save(path: Path, result: FitResult, model: str, hardware: str) -> None:
    save_predictor(path, result.predictor, PredictorMetadata.from_fit(result, model, hardware))
    print(f"\nwrote {path}")
