"""The live curves a validation keeps as it goes, read back to finish a stopped run.

`validate` starts its `live-curves.jsonl`, as the live venue opens, with one line holding
the venue's capacity, SLO scale and grid and what its trials were (`trial_facts`:
workload, arrivals, requests, seeds, loads, engine limits; `keep_venue`), then appends each
policy's live curve as soon as it is measured (`keep_curve`), and last the capacity
measured again after the trials (`keep_closing_capacity`), which tells the engine's drift.
A run stopped before its twin (its budget overrun, the machine needed back) so loses no
live trial: `read_live_venue` makes the live venue from the file, checking that the
settings given are those its trials ran with (the twin runs the same requests only then),
and `validation.finish_validation` runs the twin of it and the report (`slidingserve
validate --live-curves FILE`). A last line cut short by a kill is left out.

Files kept by an earlier release (before 6 December 2026) hold the curves alone: their
capacity and SLO scale are given as the run printed them; the grid is read off the trials
(`_venue_given`), since the printed capacity is rounded and the trials keep the grid's
exact rates, and only the trials' seeds can be checked.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slidingserve.live.compare import LiveTrials
from slidingserve.live.validation_figures import PolicyCurve, Trial, VenueResult

if TYPE_CHECKING:
    from slidingserve.live.validation import ValidationSettings

VENUE_KEY = "venue"  # the key of the venue's line
CLOSING_KEY = "closing_capacity"  # the key of the closing capacity's line
GRID_TOLERANCE = 0.01  # relative: a trial's rate this near a load × the capacity is the grid's
COUNTS = ("seed", "requests", "violating", "cancelled")  # a Trial's whole-number fields


def trial_facts(settings: ValidationSettings) -> dict[str, Any]:
    """What a validation's trials are, beside their SLO scale: the twin of kept curves runs
    the same requests only with the same facts."""
    live = settings.live
    return {
        "workload": live.workload,
        "arrival": [live.arrival.process, live.arrival.burstiness],
        "requests": live.requests,
        "seeds": settings.seeds,
        "loads": list(settings.loads),
        "max_num_batched_tokens": live.max_num_batched_tokens,
        "max_num_seqs": live.max_num_seqs,
    }


def keep_venue(
    path: Path,
    capacity: float,
    slo_scale: float,
    grid: Sequence[float],
    *,
    trials: dict[str, Any],
) -> None:
    """Start `path` with the live venue's capacity (req/s), SLO scale, grid (req/s) and
    `trials` (`trial_facts`): a file an earlier run kept is replaced only now."""
    venue = {"capacity": capacity, "slo_scale": slo_scale, "grid": list(grid), "trials": trials}
    _write(path, {VENUE_KEY: venue}, "w")


def keep_curve(path: Path, curve: PolicyCurve) -> None:
    """Append a policy's live curve to `path` (a JSON line), as soon as it is measured."""
    _write(path, dataclasses.asdict(curve), "a")


def keep_closing_capacity(path: Path, capacity: float) -> None:
    """Append the capacity measured after the live trials (req/s) to `path`."""
    _write(path, {CLOSING_KEY: capacity}, "a")


def _write(path: Path, line: dict[str, Any], mode: str) -> None:
    """A JSON line (a latency with no sample is NaN, as JSON's readers take it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode, encoding="utf-8") as stream:
        stream.write(json.dumps(line) + "\n")


def read_live_venue(
    path: Path,
    settings: ValidationSettings,
    capacity: float | None = None,
    slo_scale: float | None = None,
) -> VenueResult:
    """The live venue kept in `path`, whose trials must be those `settings` describe.
    `capacity` and `slo_scale` (a file kept by an earlier release has no venue line) must
    then be given, and only then. ValueError naming the file, and the line, if it is
    malformed, holds no curve, or its trials differ from `settings`'."""
    venue: dict[str, Any] | None = None
    closing: float | None = None
    curves: dict[str, PolicyCurve] = {}
    for number, line in _lines(path):
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
        venue = _venue_given(path, curves, settings.loads, capacity, slo_scale)
    else:
        _check_venue(path, venue, settings, capacity, slo_scale)
    _check_seeds(path, curves, settings.seeds)
    grid = tuple(sorted(venue["grid"]))
    return VenueResult(
        LiveTrials.venue, venue["capacity"], venue["slo_scale"], grid, curves,
        closing_capacity=closing,
    )  # fmt: skip


def _lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of `path` with their line numbers."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot read the live curves {path}: {error.strerror}") from None
    raws = text.splitlines()
    lines = []
    for number, raw in enumerate(raws, start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as error:
            if number == len(raws) and not text.endswith("\n"):
                break  # the line being written when the run was killed
            raise ValueError(f"{path}, line {number}: not JSON ({error.msg})") from None
        if not isinstance(line, dict):
            raise ValueError(f"{path}, line {number}: not a JSON object")
        lines.append((number, line))
    return lines


def _venue(data: Any, where: str) -> dict[str, Any]:
    try:
        capacity, scale = _positive(data["capacity"]), _positive(data["slo_scale"])
        grid = [_positive(rate) for rate in data["grid"]]
        trials = data["trials"]
        if not isinstance(trials, dict):
            raise TypeError(f"trials {trials!r} is not an object")
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: not a venue line: {_detail(error)}") from None
    if not grid:
        raise ValueError(f"{where}: the venue's grid is empty")
    return {"capacity": capacity, "slo_scale": scale, "grid": grid, "trials": trials}


def _check_venue(
    path: Path,
    venue: dict[str, Any],
    settings: ValidationSettings,
    capacity: float | None,
    slo_scale: float | None,
) -> None:
    """Refuse settings that differ from the kept ones, and flags the venue line makes moot."""
    if capacity is not None:
        raise ValueError(f"{path} keeps its capacity: leave --capacity out")
    if slo_scale is not None and slo_scale != venue["slo_scale"]:
        raise ValueError(
            f"{path} ran at SLO scale {venue['slo_scale']:g}, not {slo_scale:g}: leave "
            "--slo-scale out or give the live run's"
        )
    expected = json.loads(json.dumps(trial_facts(settings)))  # as the file holds them
    kept = venue["trials"]
    differ = [name for name in expected if kept.get(name) != expected[name]]
    if differ:
        said = ", ".join(f"{name} {kept.get(name)!r} (given {expected[name]!r})" for name in differ)
        raise ValueError(f"{path}: the live trials ran with {said}: give the flags of the live run")


def _check_seeds(path: Path, curves: dict[str, PolicyCurve], seeds: Sequence[int]) -> None:
    kept = sorted({trial.seed for curve in curves.values() for trial in curve.trials})
    if kept != sorted(seeds):
        raise ValueError(
            f"{path}: the live trials ran seeds {kept}, not {list(seeds)}: give the live "
            "run's --seed and --seeds"
        )


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
        trials = tuple(_trial(trial) for trial in data["trials"])
        if not trials:
            raise ValueError("it has no trial")
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: not a policy's curve: {_detail(error)}") from None
    return PolicyCurve(policy, trials)


def _trial(data: Any) -> Trial:
    trial = Trial(**data)
    _positive(trial.rate)
    for name in COUNTS:
        value = getattr(trial, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"a trial's {name} {value!r} is not a count")
    for name in ("ttft_p50", "ttft_p99", "tpot_p50"):
        value = getattr(trial, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"a trial's {name} {value!r} is not a number")
    return trial


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
    for flag, value in (("--capacity", capacity), ("--slo-scale", slo_scale)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{flag} must be a positive number, got {value:g}")
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
