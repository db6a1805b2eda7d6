"""The live curves a validation keeps as it goes, read back to finish a stopped run.

`validate` appends to its `live-curves.jsonl`, as the live venue opens, one line with the
venue's capacity, SLO scale and grid (`keep_venue`), then each policy's live curve as soon
as it is measured (`keep_curve`), and last the capacity measured again after the trials
(`keep_closing_capacity`), which tells the engine's drift. A run stopped before its twin
(its budget overrun, the machine needed back) so loses no live trial: `read_live_venue`
makes the live venue from the file, and `validation.finish_validation` runs the twin of it
and the report (`slidingserve validate --live-curves FILE`).

Files kept by an earlier release (before 6 December 2026) hold the curves alone: their
capacity and SLO scale are given as the run printed them; the grid is read off the trials
(`_venue_given`), since the printed capacity is rounded and the trials keep the grid's
exact rates.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slidingserve.live.compare import LiveTrials
from slidingserve.live.validation_figures import PolicyCurve, Trial, VenueResult

VENUE_KEY = "venue"  # the key of the venue's line
CLOSING_KEY = "closing_capacity"  # the key of the closing capacity's line
GRID_TOLERANCE = 0.01  # relative: a trial's rate this near a load × the capacity is the grid's


def keep_venue(path: Path, capacity: float, slo_scale: float, grid: Sequence[float]) -> None:
    """Append the live venue's capacity (req/s), SLO scale and grid (req/s) to `path`."""
    venue = {"capacity": capacity, "slo_scale": slo_scale, "grid": list(grid)}
    _append(path, {VENUE_KEY: venue})


def keep_curve(path: Path, curve: PolicyCurve) -> None:
    """Append a policy's live curve to `path` (a JSON line), as soon as it is measured."""
    _append(path, dataclasses.asdict(curve))


def keep_closing_capacity(path: Path, capacity: float) -> None:
    """Append the capacity measured after the live trials (req/s) to `path`."""
    _append(path, {CLOSING_KEY: capacity})


def _append(path: Path, line: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as stream:
        stream.write(json.dumps(line, allow_nan=False) + "\n")


def read_live_venue(
    path: Path,
    loads: Sequence[float],
    capacity: float | None = None,
    slo_scale: float | None = None,
) -> VenueResult:
    """The live venue kept in `path`. `capacity` and `slo_scale` stand in for a missing
    venue line (a file kept before it existed) and must then be given; `loads` (fractions
    of the capacity) then find the grid among the trials' rates. ValueError naming the
    file, and the line, if it is malformed or holds no curve."""
    venue: dict[str, Any] | None = None
    closing: float | None = None
    curves: dict[str, PolicyCurve] = {}
    for number, line in enumerate(_lines(path), start=1):
        where = f"{path}, line {number}"
        if VENUE_KEY in line:
            venue = _venue(line[VENUE_KEY], where)
        elif CLOSING_KEY in line:
            closing = _closing(line[CLOSING_KEY], where)
        else:
            curve = _curve(line, where)
            curves[curve.policy] = curve  # a policy kept twice: its latest curve
    if not curves:
        raise ValueError(f"{path}: no live curve in it")
    if venue is None:
        venue = _venue_given(path, curves, loads, capacity, slo_scale)
    grid = tuple(sorted(venue["grid"]))
    return VenueResult(
        LiveTrials.venue, venue["capacity"], venue["slo_scale"], grid, curves,
        closing_capacity=closing,
    )  # fmt: skip


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot read the live curves {path}: {error.strerror}") from None
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {number}: not JSON ({error.msg})") from None
        if not isinstance(line, dict):
            raise ValueError(f"{path}, line {number}: not a JSON object")
        lines.append(line)
    return lines


def _venue(data: Any, where: str) -> dict[str, Any]:
    try:
        capacity, scale = _positive(data["capacity"]), _positive(data["slo_scale"])
        grid = [_positive(rate) for rate in data["grid"]]
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: not a venue line: {_detail(error)}") from None
    if not grid:
        raise ValueError(f"{where}: the venue's grid is empty")
    return {"capacity": capacity, "slo_scale": scale, "grid": grid}


def _closing(data: Any, where: str) -> float:
    try:
        return _positive(data)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: not a closing capacity: {error}") from None


def _curve(data: dict[str, Any], where: str) -> PolicyCurve:
    try:
        policy = data["policy"]
        if not isinstance(policy, str) or not policy:
            raise ValueError(f"policy {policy!r} is not a name")
        trials = tuple(Trial(**trial) for trial in data["trials"])
        for trial in trials:
            _positive(trial.rate)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: not a policy's curve: {_detail(error)}") from None
    return PolicyCurve(policy, trials)


def _venue_given(
    path: Path,
    curves: dict[str, PolicyCurve],
    loads: Sequence[float],
    capacity: float | None,
    slo_scale: float | None,
) -> dict[str, Any]:
    """The venue of a file without a venue line, from the capacity and scale given. Every
    curve starts at the grid's top rate, so the trial nearest the top load × `capacity`
    gives the exact capacity; a grid rate some trial ran is that trial's rate, one that none
    ran is its load × the exact capacity."""
    if capacity is None or slo_scale is None:
        raise ValueError(
            f"{path} has no venue line (kept by an earlier release): give the live run's "
            "capacity and SLO scale as it printed them (--capacity, --slo-scale)"
        )
    rates = {trial.rate for curve in curves.values() for trial in curve.trials}
    top_load = max(loads)
    top = _nearest(rates, top_load * capacity)
    if top is None:
        raise ValueError(
            f"{path}: no trial ran near {top_load:g} × the capacity {capacity:g} req/s: "
            "are the capacity and --loads those of the live run?"
        )
    exact = top / top_load
    grid = [_nearest(rates, load * exact) or load * exact for load in loads]
    return {"capacity": exact, "slo_scale": slo_scale, "grid": grid}


def _nearest(rates: set[float], rate: float) -> float | None:
    """The rate of `rates` nearest `rate`, if within `GRID_TOLERANCE` of it."""
    near = [r for r in rates if abs(r / rate - 1) <= GRID_TOLERANCE]
    return min(near, key=lambda r: abs(r - rate)) if near else None


def _positive(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{value!r} is not a number")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{value!r} is not a positive number")
    return float(value)


def _detail(error: Exception) -> str:
    return f"missing field {error}" if isinstance(error, KeyError) else str(error)
