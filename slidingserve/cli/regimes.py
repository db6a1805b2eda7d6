"""The `regimes` command: a policy's goodput ÷ the best baseline's over workloads × SLO
scales × arrival processes (× hardware points); a table, a heatmap PNG, CSV and JSON."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from tqdm import tqdm

from slidingserve.cli import settings as cfg
from slidingserve.cli.flags import (
    add_hardware_flag,
    add_ray_flag,
    add_search_flags,
    add_setup_flags,
    comma_list,
    refuse_both,
    workers_text,
)
from slidingserve.eval.experiment import GoodputExperiment
from slidingserve.eval.regime_report import (
    describe_regimes,
    regime_payload,
    regime_rows,
    regime_table,
)
from slidingserve.eval.regimes import (
    RegimeMap,
    arrival_label,
    parse_arrival,
    run_regimes,
)
from slidingserve.reporting import write_csv, write_json
from slidingserve.sim.hardware import HardwareConfig, parse_hardware
from slidingserve.workloads import ArrivalConfig

REGIMES = cfg.REGIMES
WALL_TIME = "10 to 15 minutes on two cores"
"""The default map: 4 workloads × 5 SLO scales × 2 arrivals × 3 policies × 3 seeds of
600-request trials, 360 searches of about 3 CPU-seconds each (measured on one workload and
seed, 30 searches: 91 CPU-s, 70 s on two cores other work shared), so about 9 minutes on two
free cores and 14 on shared ones."""


def add_parser(commands: Any) -> None:
    """Add `regimes` to the `slidingserve` subcommands."""
    parser = commands.add_parser(
        "regimes",
        help="where goodput goes: a policy ÷ the best baseline over SLOs × burstiness",
        description=(
            "Searches the goodput of the candidate and every baseline in each cell (workload "
            "× arrival × SLO scale, per hardware point) on the same seeds, and maps the "
            "candidate's goodput ÷ the best baseline's on each seed (the baseline with the "
            "highest goodput on that seed: the strictest bar), mean and 95% interval; * "
            f"where it excludes 1. The default map takes {WALL_TIME}."
        ),
    )
    parser.add_argument("--candidate", help=f"the policy mapped (default {REGIMES.candidate})")
    parser.add_argument(
        "--baselines", type=comma_list, help=f"default {','.join(REGIMES.baselines)}"
    )
    parser.add_argument(
        "--workloads", type=comma_list, help=f"default {','.join(REGIMES.setup.workloads)}"
    )
    parser.add_argument(
        "--slo-scales",
        type=comma_list,
        help=f"default {','.join(f'{s:g}' for s in REGIMES.slo_scales)} (--slo-scale: one)",
    )
    parser.add_argument(
        "--arrivals",
        type=comma_list,
        help="poisson and gamma:CV, comma list (default "
        f"{','.join(REGIMES.arrival_labels)}; --arrival/--burstiness: one)",
    )
    add_hardware_flag(parser, "one map per point")
    add_search_flags(parser, len(REGIMES.setup.seeds), REGIMES.setup.search)
    parser.add_argument("--jobs", type=int, help="worker processes (default: one per core)")
    add_ray_flag(parser)
    parser.add_argument("--out-dir", type=Path, default=cfg.REGIMES_OUT_DIR)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_setup_flags(parser)
    parser.set_defaults(handler=run)


def regime_map_from(args: argparse.Namespace) -> RegimeMap:
    """The map of parsed `regimes` arguments over the --config file. A one-value flag
    (--slo-scale, --arrival/--burstiness, --gpu/--model/--tp) or file setting makes a
    one-value axis; its many-value flag replaces it, and giving both flags is an error."""
    refuse_both(args, "--slo-scales", "slo_scales", ["slo_scale"])
    refuse_both(args, "--arrivals", "arrivals", ["arrival", "burstiness"])
    refuse_both(args, "--hardware", "hardware", ["gpu", "model", "tp"])
    settings = cfg.one_engine(cfg.settings_from(args), "regimes")
    candidate = args.candidate or REGIMES.candidate
    baselines = args.baselines or REGIMES.baselines
    goodput = {**cfg.goodput_flags(args), "policies": (candidate, *baselines), "curve_points": 0}
    setup = cfg.experiment_from(cfg.override(settings, "goodput", **goodput))
    return RegimeMap(
        candidate=candidate,
        baselines=baselines,
        slo_scales=_slo_scales(args, settings, setup.slo_scale),
        arrivals=_arrivals(args, settings, setup),
        hardware=_hardware(args, setup.hardware),
        setup=setup,
    )


def _slo_scales(args: argparse.Namespace, settings: cfg.Settings, one: float) -> tuple[float, ...]:
    if not args.slo_scales:
        return (one,) if "slo_scale" in settings["workload"] else REGIMES.slo_scales
    try:
        return tuple(float(text) for text in args.slo_scales)
    except ValueError:
        raise ValueError(f"--slo-scales takes numbers, got {','.join(args.slo_scales)}") from None


def _arrivals(
    args: argparse.Namespace, settings: cfg.Settings, setup: GoodputExperiment
) -> tuple[ArrivalConfig, ...]:
    overload = setup.arrival.overload
    if args.arrivals:
        return tuple(parse_arrival(text, overload) for text in args.arrivals)
    if {"arrival", "burstiness"} & set(settings["workload"]):
        return (setup.arrival,)
    return tuple(dataclasses.replace(a, overload=overload) for a in REGIMES.arrivals)


def _hardware(args: argparse.Namespace, one: HardwareConfig) -> tuple[HardwareConfig, ...]:
    """--hardware points take their noise and memory share from `one`."""
    return tuple(parse_hardware(text, one) for text in args.hardware or ()) or (one,)


def run(args: argparse.Namespace) -> int:
    """Search every cell of the map; print its tables and write its files."""
    regimes = regime_map_from(args)
    setup = regimes.setup
    print(
        f"Mapping {regimes.candidate} against {', '.join(regimes.baselines)}: "
        f"{len(regimes.hardware)} hardware × {len(setup.workloads)} workloads × "
        f"{len(regimes.arrivals)} arrivals ({', '.join(map(arrival_label, regimes.arrivals))}) "
        f"× {len(regimes.slo_scales)} SLO scales × {len(setup.seeds)} seeds: "
        f"{regimes.search_count} goodput searches {workers_text(setup.worker_count, args.ray)}"
    )
    with tqdm(
        total=regimes.search_count, desc="searches", unit="search", disable=args.no_progress
    ) as bar:
        result = run_regimes(regimes, bar.update, args.ray)
    print(f"\n{describe_regimes(result)}")
    for point in regimes.hardware_labels:
        print(f"\n{point}")
        print(regime_table(result, point))
    out: Path = args.out_dir
    write_json(out / "regimes.json", regime_payload(result))
    write_csv(out / "regimes.csv", regime_rows(result))
    from slidingserve.eval.regime_plot import plot_regime_map  # matplotlib: only here

    png = plot_regime_map(result, out / "regimes.png")
    print(f"\nwrote {out / 'regimes.json'}, {out / 'regimes.csv'}, {png}")
    return 0
