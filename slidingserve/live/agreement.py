"""A measured live comparison beside the simulator's prediction of it.

`compare --simulate STEPS --against compare.json` reads the live run's JSON, predicts the
same comparison (its policies, rates, workload, request count, seed, repeats and SLO scale)
and prints both, cell by cell, with each policy's goodput rank in either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slidingserve.live.compare import LiveComparison
from slidingserve.reporting import format_table
from slidingserve.workloads import ArrivalConfig
from slidingserve.workloads.prefixes import SystemPrompt


@dataclass(frozen=True)
class MeasuredComparison:
    """What `compare` wrote: enough of it to repeat the comparison in simulation."""

    workload: str
    requests: int
    seed: int
    repeats: int
    slo_scale: float
    policies: list[str]  # in the order they ran
    rates: list[float]  # the fixed rates
    searched: bool
    rows: dict[tuple[str, float], dict[str, Any]]  # (policy, rate) -> row
    goodput: dict[str, float]  # policy -> searched goodput
    system_prompt: SystemPrompt | None = None  # the shared system prompt, if it had one
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)  # how its requests arrived


def load_measured(path: str | Path) -> MeasuredComparison:
    """Read a `compare.json`; ValueError naming the problem if it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        settings = data["settings"]
        rows = {(row["policy"], float(row["rate"])): row for row in data["rows"]}
        return MeasuredComparison(
            workload=str(settings["workload"]),
            requests=int(settings["requests"]),
            seed=int(settings["seed"]),
            repeats=int(settings.get("repeats", 1)),
            slo_scale=float(data["slo_scale"]),
            policies=list(dict.fromkeys(policy for policy, _ in rows)),
            rates=sorted({rate for _, rate in rows}),
            searched=bool(data["goodput"]),
            rows=rows,
            goodput={policy: float(g["goodput"]) for policy, g in data["goodput"].items()},
            system_prompt=_system_prompt(settings.get("system_prompt")),
            arrival=_arrival(settings.get("arrival")),
        )
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    except (KeyError, TypeError, ValueError) as error:
        detail = f"missing field {error}" if isinstance(error, KeyError) else str(error)
        raise ValueError(f"{path}: not a compare.json: {detail}") from None


def _system_prompt(saved: Any) -> SystemPrompt | None:
    """The system prompt as `compare` wrote it (a table of tokens and share), or None."""
    if saved is None:
        return None
    return SystemPrompt(int(saved["tokens"]), float(saved["share"]))


def _arrival(saved: Any) -> ArrivalConfig:
    """The arrival process as `compare` wrote it (Poisson when the file predates it); a
    file with an overload window is refused rather than predicted without it."""
    if saved is None:
        return ArrivalConfig()
    if saved.get("overload") is not None:
        raise ValueError("arrivals with an overload window are not predicted by --against")
    return ArrivalConfig(str(saved["process"]), float(saved["burstiness"]))  # type: ignore[arg-type]


def ranks(goodput: dict[str, float]) -> dict[str, int]:
    """1 for the highest goodput; equal goodputs share the better rank."""
    return {policy: 1 + sum(other > value for other in goodput.values())
            for policy, value in goodput.items()}  # fmt: skip


def agreement_table(measured: MeasuredComparison, predicted: LiveComparison) -> str:
    """Violation rates and goodputs, live beside simulated; searched goodputs and ranks."""
    header = ["policy", "rate", "viol% live", "viol% sim", "goodput live", "goodput sim"]
    searched = measured.searched and bool(predicted.goodput)
    if searched:
        header += ["searched live", "searched sim", "rank live", "rank sim"]
    live_ranks = ranks(measured.goodput)
    sim_ranks = ranks({policy: g.goodput for policy, g in predicted.goodput.items()})
    lines = []
    for row in predicted.rows:
        live = measured.rows.get((row.policy, row.rate))
        cells = [
            row.policy,
            f"{row.rate:.2f}",
            f"{100 * live['violation_rate']:.1f}" if live else "-",
            f"{100 * row.violation_rate:.1f}",
            f"{live['goodput']:.2f}" if live else "-",
            f"{row.goodput:.2f}",
        ]
        if searched:
            estimate = predicted.goodput.get(row.policy)
            cells += [
                f"{measured.goodput[row.policy]:.2f}" if row.policy in measured.goodput else "-",
                f"{estimate.goodput:.2f}" if estimate else "-",
                str(live_ranks.get(row.policy, "-")),
                str(sim_ranks.get(row.policy, "-")),
            ]
        lines.append(cells)
    return format_table(header, lines)
