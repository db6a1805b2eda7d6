"""Command-line flags shared by the commands that build a workload (simulate, goodput, bench)."""

from __future__ import annotations

import argparse
from typing import Any


def add_workload_flags(group: Any) -> None:
    """The flags that describe a workload's arrivals, SLOs and tiers (argparse group/parser)."""
    group.add_argument("--arrival", help="arrival process: poisson or gamma")
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


def workload_flags(args: argparse.Namespace) -> dict[str, Any]:
    """Those flags as [workload] settings (None where not given)."""
    return {
        "requests": args.requests,
        "arrival": args.arrival,
        "burstiness": args.burstiness,
        "overload": parse_overload(args.overload),
        "slo": args.slo,
        "slo_scale": args.slo_scale,
        "tiers": args.tiers,
        "trace_dir": args.trace_dir,
    }


def parse_overload(text: str | None) -> dict[str, float] | None:
    """`START:DURATION:FACTOR` as the [workload.overload] table."""
    if text is None:
        return None
    try:
        start, duration, factor = (float(part) for part in text.split(":"))
    except ValueError:
        raise ValueError(f"--overload expects START:DURATION:FACTOR, got {text!r}") from None
    return {"start": start, "duration": duration, "factor": factor}
