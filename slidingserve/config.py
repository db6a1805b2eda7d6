"""Settings from a TOML file and command-line flags, turned into the frozen configs.

Precedence: built-in defaults < the file given with --config < flags. The file's tables:

    [hardware]   gpu, model, tp, noise, gpu_memory_utilization
    [engine]     max_num_batched_tokens, max_num_seqs, block_size
    [workload]   requests, arrival ("poisson" | "gamma" | "trace"), burstiness, slo
                 ("strict" | "relaxed"), slo_scale, trace_dir, tbt_reading ("cumulative" |
                 "per-gap"), trace_start, trace_spread
    [[workload.traces]]  path, class, weight, columns (a table: prompt, output, time,
                 time_unit); or `traces = ["a.csv:conversational:3", ...]`
    [workload.overload]  start, duration (seconds), factor
    [goodput]    policies, reference, workloads, seeds, criteria, threshold, precision,
                 curve_points, jobs
    [policies.NAME]      that policy's options, e.g. [policies.sarathi] chunk_size = 256
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slidingserve.core.view import EngineLimits
from slidingserve.eval.goodput import SearchSettings
from slidingserve.metrics import TbtReading
from slidingserve.policies import get_policy_class
from slidingserve.sim.hardware import HardwareConfig
from slidingserve.workloads import (
    CONVERSATIONAL,
    TRACE_WORKLOAD,
    ArrivalConfig,
    OverloadWindow,
    Tier,
    TierMix,
    TraceColumns,
    TraceSource,
    WorkloadConfig,
    get_tier_mix,
)

Settings = dict[str, dict[str, Any]]
SECTIONS = ("hardware", "engine", "workload", "goodput", "policies")


def load_settings(path: Path | None) -> Settings:
    """The tables of a TOML settings file (empty without a file); unknown tables are errors."""
    if path is None:
        return {section: {} for section in SECTIONS}
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"config file {path} is not valid TOML: {error}") from None
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        known = ", ".join(SECTIONS)
        raise ValueError(
            f"config file {path}: unknown table(s) {', '.join(unknown)}; known: {known}"
        )
    return {section: dict(data.get(section, {})) for section in SECTIONS}


def override(settings: Settings, section: str, **flags: Any) -> None:
    """Put the flags that were given (not None) over the file's settings."""
    settings[section].update({key: value for key, value in flags.items() if value is not None})


def _take(table: Mapping[str, Any], section: str, known: tuple[str, ...]) -> dict[str, Any]:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ValueError(
            f"[{section}]: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}"
        )
    return dict(table)


def hardware_config(settings: Settings) -> HardwareConfig:
    keys = ("gpu", "model", "tp", "noise", "gpu_memory_utilization", "profile_dir")
    return HardwareConfig(**_take(settings["hardware"], "hardware", keys))


def engine_limits(settings: Settings) -> EngineLimits:
    keys = ("max_num_batched_tokens", "max_num_seqs", "block_size")
    return EngineLimits(**_take(settings["engine"], "engine", keys))


WORKLOAD_KEYS = (
    "requests",
    "tiers",
    "tier_assignment",
    "arrival",
    "burstiness",
    "overload",
    "slo",
    "slo_scale",
    "trace_dir",
    "tbt_reading",
    "traces",
    "trace_start",
    "trace_columns",
    "trace_spread",
)
TRACE_KEYS = ("path", "class", "weight", "columns")
COLUMN_KEYS = ("prompt", "output", "time", "time_unit")


def trace_sources(settings: Settings) -> tuple[TraceSource, ...]:
    """The [[workload.traces]]: tables, or `FILE[:CLASS[:WEIGHT]]` strings (as --trace);
    `trace_columns` (`prompt=..,output=..`) applies to those without their own columns."""
    table = _take(settings["workload"], "workload", WORKLOAD_KEYS)
    traces = table.get("traces") or []
    if not isinstance(traces, list):
        raise ValueError(f"[workload] traces must be a list, got {traces!r}")
    shared = table.get("trace_columns")
    columns = TraceColumns.parse(shared) if isinstance(shared, str) else None
    if shared is not None and not isinstance(shared, str):
        raise ValueError(f"[workload] trace_columns must be a string, got {shared!r}")
    sources = []
    for entry in traces:
        if isinstance(entry, str):
            sources.append(TraceSource.parse(entry, columns))
        elif isinstance(entry, dict):
            fields = _take(entry, "workload.traces", TRACE_KEYS)
            if "path" not in fields:
                raise ValueError("[[workload.traces]] needs a path")
            own = fields.get("columns")
            if own is not None and not isinstance(own, dict):
                raise ValueError(f"[[workload.traces]] columns must be a table, got {own!r}")
            sources.append(
                TraceSource(
                    str(fields["path"]),
                    fields.get("class", CONVERSATIONAL),
                    float(fields.get("weight", 1.0)),
                    TraceColumns(**_take(own, "workload.traces.columns", COLUMN_KEYS))
                    if own
                    else columns,
                )
            )
        else:
            raise ValueError(f"[workload] traces: a string or a table each, got {entry!r}")
    return tuple(sources)


def arrival_config(settings: Settings) -> ArrivalConfig:
    table = _take(settings["workload"], "workload", WORKLOAD_KEYS)
    overload = table.get("overload")
    window = None
    if overload is not None:
        if not isinstance(overload, dict):
            raise ValueError(f"[workload] overload must be a table, got {overload!r}")
        keys = ("start", "duration", "factor")
        window = OverloadWindow(**_take(overload, "workload.overload", keys))
    return ArrivalConfig(table.get("arrival", "poisson"), table.get("burstiness", 1.0), window)


def tier_mix(settings: Settings) -> TierMix | None:
    """SLO tiers: a preset name, or a list of tier tables (name, weight, ttft_factor,
    tbt_factor, protected, ttft, tbt), dealt by `tier_assignment` ("random" or "fixed")."""
    table = _take(settings["workload"], "workload", WORKLOAD_KEYS)
    tiers = table.get("tiers")
    if tiers is None:
        return None
    if isinstance(tiers, str):
        return get_tier_mix(tiers)
    if not isinstance(tiers, list) or not all(isinstance(t, dict) for t in tiers):
        raise ValueError(f"[workload] tiers must be a preset name or a list of tables: {tiers!r}")
    keys = ("name", "weight", "ttft_factor", "tbt_factor", "protected", "ttft", "tbt")
    return TierMix(
        tuple(Tier(**_take(t, "workload.tiers", keys)) for t in tiers),
        table.get("tier_assignment", "random"),
    )


def tbt_reading(settings: Settings) -> TbtReading:
    value = settings["workload"].get("tbt_reading", TbtReading.CUMULATIVE.value)
    try:
        return TbtReading(value)
    except ValueError:
        known = ", ".join(reading.value for reading in TbtReading)
        raise ValueError(f"unknown tbt_reading {value!r}; known: {known}") from None


GOODPUT_KEYS = (
    "policies",
    "reference",
    "criteria",
    "workloads",
    "seeds",
    "threshold",
    "precision",
    "curve_points",
    "jobs",
)


def search_settings(settings: Settings) -> SearchSettings:
    table = _take(settings["goodput"], "goodput", GOODPUT_KEYS)
    defaults = SearchSettings()
    return SearchSettings(
        threshold=table.get("threshold", defaults.threshold),
        precision=table.get("precision", defaults.precision),
    )


def policy_options(settings: Settings, policies: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Options per policy, for the policies in the run; a table for a policy that does not
    exist is an error (a typo would otherwise be ignored), one for another policy is not."""
    tables = settings["policies"]
    for name, table in tables.items():
        get_policy_class(name)
        if not isinstance(table, dict):
            raise ValueError(f"[policies.{name}] must be a table of options, got {table!r}")
    return {name: dict(tables[name]) for name in policies if name in tables}


def workload_config(settings: Settings, name: str, default_requests: int) -> WorkloadConfig:
    """The workload `name` as the [workload] table describes it."""
    table = _take(settings["workload"], "workload", WORKLOAD_KEYS)
    trace_dir = table.get("trace_dir")
    return WorkloadConfig(
        name,
        table.get("requests", default_requests),
        arrival_config(settings),
        table.get("slo", "strict"),
        table.get("slo_scale", 1.0),
        Path(trace_dir) if trace_dir else None,
        tiers=tier_mix(settings),
        traces=trace_sources(settings),
        trace_start=table.get("trace_start", 0),
        trace_spread=table.get("trace_spread", False),
    )


def workload_names(
    settings: Settings, given: tuple[str, ...] | None, default: tuple[str, ...]
) -> tuple[str, ...]:
    """The workloads to run: those given, else the trace workload with --trace, else `default`."""
    if given:
        return tuple(given)
    return (TRACE_WORKLOAD,) if trace_sources(settings) else default


def parse_assignments(assignments: list[str] | None, settings: Settings) -> None:
    """Apply `--set POLICY.OPTION=VALUE` flags (the value is read as TOML: 256, true, "x")."""
    for assignment in assignments or []:
        key, equals, text = assignment.partition("=")
        policy, dot, option = key.partition(".")
        if not equals or not dot or not policy or not option:
            raise ValueError(f"--set expects POLICY.OPTION=VALUE, got {assignment!r}")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text
        settings["policies"].setdefault(policy, {})[option] = value
