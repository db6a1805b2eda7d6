"""The `diagnose` command: why the violating requests of one run missed their SLO, for one
or more policies on the same workload, rate and seed; a table, CSV, JSON and a timeline PNG."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from slidingserve.cli import settings as cfg
from slidingserve.cli.flags import add_setup_flags, comma_list, positive_float
from slidingserve.eval.diagnose import (
    MEANINGS,
    Diagnosis,
    describe,
    diagnose,
    diagnosis_payload,
    diagnosis_table,
)
from slidingserve.reporting import write_csv, write_json
from slidingserve.sim.runner import SimulationSpec


def add_parser(commands: Any) -> None:
    """Add `diagnose` to the `slidingserve` subcommands."""
    parser = commands.add_parser(
        "diagnose",
        help="where goodput goes: each violating request's cause, and a timeline",
        description=(
            "Simulates each policy on the same workload, rate and seed, attributes every "
            "request that violates its SLO (under --tbt-reading) to one cause, in this "
            "precedence: preempted, relegated, queueing, slow-prefill, decode-stall (see "
            "slidingserve/eval/diagnose.py), prints a table and writes causes.csv, "
            "causes.json and timeline.png (one column per policy) to --out-dir."
        ),
    )
    parser.add_argument(
        "--policies",
        type=comma_list,
        default=cfg.DIAGNOSE_POLICIES,
        help=f"names, a,b: one column each (default {','.join(cfg.DIAGNOSE_POLICIES)})",
    )
    parser.add_argument("--workload", help=f"default {cfg.WORKLOAD} (with --trace: the trace)")
    parser.add_argument(
        "--rate",
        type=positive_float,
        default=cfg.DIAGNOSE_RATE,
        help=f"req/s (default {cfg.DIAGNOSE_RATE}: on seed 0, ShareGPT, strict SLOs, just past the "
        "goodput of both default policies, which miss 3.2%% and 4.6%% of the requests there; "
        "choose another for another workload)",
    )
    parser.add_argument(
        "--seed", type=int, default=cfg.SEED, help="fixes requests, arrivals, noise"
    )
    parser.add_argument("--out-dir", type=Path, default=cfg.DIAGNOSE_OUT_DIR)
    add_setup_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Diagnose each policy's run; print the table and write the files."""
    if not args.policies:
        raise ValueError("--policies needs at least one policy name")
    settings = cfg.one_engine(cfg.settings_from(args), "diagnose")
    options = cfg.policy_options(settings, args.policies)
    given = (args.workload,) if args.workload else None
    workload = cfg.workload_names(settings, given)[0]
    specs = [
        SimulationSpec(
            policy,
            cfg.workload_config(settings, workload, cfg.RUN_REQUESTS),
            cfg.hardware_config(settings),
            cfg.engine_limits(settings),
            options.get(policy, {}),
            cfg.tbt_reading(settings),
        )
        for policy in args.policies
    ]
    diagnoses = [diagnose(spec, args.rate, args.seed) for spec in specs]
    print(f"Why requests miss their SLO: {describe(diagnoses)}")
    print("(each cause: violating requests and their share; medians: all / violating requests)")
    print(diagnosis_table(diagnoses))
    print("\nCauses, the first that holds:")
    width = max(len(cause.value) for cause in MEANINGS)
    for cause, meaning in MEANINGS.items():
        print(f"  {cause.value:<{width}}  {meaning}")
    for path in _write(diagnoses, args.out_dir):
        print(f"wrote {path}")
    return 0


def _write(diagnoses: list[Diagnosis], out: Path) -> list[Path]:
    from slidingserve.eval.plots import plot_diagnosis  # matplotlib: only here

    write_csv(out / "causes.csv", [diagnosis.row() for diagnosis in diagnoses])
    write_json(out / "causes.json", diagnosis_payload(diagnoses))
    plot = plot_diagnosis(diagnoses, out / "timeline.png")
    return [out / "causes.csv", out / "causes.json", plot]
