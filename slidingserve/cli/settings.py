"""Settings from a TOML file and command-line flags, turned into the frozen configs; and the
defaults of every command (help texts print them from here).

Precedence: built-in defaults < the file given with --config < flags. The file's tables:

    [hardware]   gpu, model, tp, noise, gpu_memory_utilization
    [engine]     max_num_batched_tokens, max_num_seqs, block_size, prefix_caching
    [workload]   requests, arrival ("poisson" | "gamma" | "trace"), burstiness, slo
                 ("strict" | "relaxed"), slo_scale, trace_dir, tbt_reading ("cumulative" |
                 "per-gap"), trace_start, trace_spread, trace_block_size, system_prompt
                 ("TOKENS[:SHARE]" or a table: tokens, share), conversations
                 ("TURNS[:CONCURRENT]" or a table: turns, concurrent)
    [[workload.traces]]  path, class, weight, columns (a table: prompt, output, time,
                 time_unit); or `traces = ["a.csv:conversational:3", ...]`
    [workload.overload]  start, duration (seconds), factor
    [goodput]    policies, reference, workloads, seeds, criteria, threshold, precision,
                 curve_points, jobs
    [cluster]    replicas (a count of [hardware] replicas, or a list of "GPU:MODEL:TP"
                 points, one per replica), router (docs/cluster.md)
    [policies.NAME]      that policy's options, e.g. [policies.sarathi] chunk_size = 256

A key the file and the flags leave out is not passed on: the config it belongs to
(`WorkloadConfig`, `ArrivalConfig`, `GoodputExperiment`, ...) holds its default. Settings
are never changed in place: `override` and `with_assignments` return new ones.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from slidingserve.core.checks import is_integer
from slidingserve.core.slo_args import DEFAULT_SLO
from slidingserve.core.view import EngineLimits
from slidingserve.engines.vllm.runtime import CPU_ENGINE_LIMITS
from slidingserve.eval.experiment import GoodputExperiment
from slidingserve.eval.goodput import SearchSettings
from slidingserve.eval.regimes import RegimeMap
from slidingserve.metrics import TbtReading
from slidingserve.policies import get_policy_class
from slidingserve.predictor import DEFAULT_FEATURES
from slidingserve.predictor.calibration import DEFAULT_SAMPLES
from slidingserve.sim.cluster import DEFAULT_ROUTER, ClusterLayout
from slidingserve.sim.hardware import HardwareConfig, parse_hardware
from slidingserve.workloads import (
    TRACE_WORKLOAD,
    ArrivalConfig,
    Conversations,
    OverloadWindow,
    SystemPrompt,
    Tier,
    TierMix,
    TraceColumns,
    TraceSource,
    WorkloadConfig,
    get_tier_mix,
    recorded_rate,
)

# --- Defaults: the configs' own, and those of the commands ---------------------------------

HARDWARE = HardwareConfig()
LIMITS = EngineLimits()
ARRIVAL = ArrivalConfig()
EXPERIMENT = GoodputExperiment()
"""goodput: policies, workloads, seeds, requests, criteria, curve points, search, reference."""
SEARCH = EXPERIMENT.search
REGIMES = RegimeMap()
SLO = DEFAULT_SLO
"""serve: the SLO of requests that bring none."""
ENGINE_LIMITS = CPU_ENGINE_LIMITS
"""profile: the token budget and batch cap of the timed engine."""

WORKLOAD = "sharegpt"
"""The workload of simulate, diagnose, bench, compare and profile --live when none is given
(with --trace: the trace)."""
RATE = 1.0
"""req/s of simulate and bench when none is given and the workload replays no trace."""
SEED = 0
SIMULATE_POLICIES = ("sarathi",)
RUN_REQUESTS = 1000
"""Requests per simulated run of simulate and diagnose."""
PREDICTOR_SAMPLES = DEFAULT_SAMPLES
PREDICTOR_FEATURES = DEFAULT_FEATURES
DIAGNOSE_POLICIES = ("sarathi-edf", "slidingserve")
DIAGNOSE_RATE = 2.4
"""req/s. Measured with the defaults (seed 0, 1000 ShareGPT requests, strict SLOs): just past
sarathi-edf's goodput (0.8% violating at 2.3 req/s, 3.2% at 2.4, 6.2% at 2.5) and within
slidingserve's (0.4% at 2.4), so the two show what each does with the same load; the paper's
algorithm (slidingserve-paper) violates 1.5% / 4.6% / 7.2% at those rates."""
BENCH_REQUESTS = 200
BENCH_DURATION = 600.0
"""Seconds: bench sends no request after this."""
BENCH_TIMEOUT = 300.0
"""Seconds one bench request may take."""
BENCH_VOCAB_SIZE = 1000
"""bench draws prompt token ids below this."""
COMPARE_POLICIES = "slidingserve,sarathi-edf,vllm:fcfs,vllm:priority"
COMPARE_RATES = (8.0,)
COMPARE_REPEATS = 3
COMPARE_REQUESTS = 200
SERVE_POLICY = "slidingserve"
SERVE_HOST = "127.0.0.1"
SERVE_PORT = 8000
PROFILE_REPEATS = 3
PROFILE_OUT = Path("predictor.json")
PROFILE_STEPS_OUT = Path("steps.json")
PROFILE_LIVE_RATES = (2.0, 8.0, 16.0, 32.0)
"""req/s of profile --live's traffic: light load to overload on a CPU."""
TINY_MODEL_SIZE = "tiny"
GOODPUT_OUT_DIR = Path("results/goodput")
DIAGNOSE_OUT_DIR = Path("results/diagnose")
REGIMES_OUT_DIR = Path("results/regimes")
COMPARE_OUT_DIR = Path("results/live")
BENCH_OUT = Path("results/bench/bench.json")
TRACE_STATS_OUT_DIR = Path("results/trace-stats")

# --- Reading settings ------------------------------------------------------------------------

Settings = Mapping[str, Mapping[str, Any]]
SECTIONS = ("hardware", "engine", "workload", "goodput", "policies", "cluster")


def empty_settings() -> Settings:
    """Settings without a file: every table empty."""
    return {section: {} for section in SECTIONS}


def load_settings(path: Path | None) -> Settings:
    """The tables of a TOML settings file (empty without a file); unknown tables are errors."""
    if path is None:
        return empty_settings()
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


def override(settings: Settings, section: str, **flags: Any) -> Settings:
    """`settings` with the flags that were given (not None) over the table `section`."""
    given = {key: value for key, value in flags.items() if value is not None}
    return {**settings, section: {**settings[section], **given}}


def with_assignments(settings: Settings, assignments: Sequence[str] | None) -> Settings:
    """`settings` with `--set POLICY.OPTION=VALUE` flags applied (the value is read as TOML:
    256, true, "x")."""
    policies = {  # copies: the given tables stay as they are (a non-table is refused later)
        name: dict(table) if isinstance(table, dict) else table
        for name, table in settings["policies"].items()
    }
    for assignment in assignments or []:
        key, equals, text = assignment.partition("=")
        policy, dot, option = key.partition(".")
        if not equals or not dot or not policy or not option:
            raise ValueError(f"--set expects POLICY.OPTION=VALUE, got {assignment!r}")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text
        policies.setdefault(policy, {})[option] = value
    return {**settings, "policies": policies}


def settings_from(args: argparse.Namespace) -> Settings:
    """The --config file with the setup flags (`flags.add_setup_flags`) on top."""
    settings = load_settings(args.config)
    settings = override(
        settings,
        "hardware",
        gpu=args.gpu,
        model=args.model,
        tp=args.tp,
        noise=args.noise,
        gpu_memory_utilization=args.gpu_memory_utilization,
        profile_dir=args.profile_dir,
    )
    settings = override(
        settings,
        "engine",
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        prefix_caching=False if args.no_prefix_cache else None,
    )
    settings = override(settings, "workload", tbt_reading=args.tbt_reading, **workload_flags(args))
    settings = override(
        settings,
        "cluster",
        replicas=getattr(args, "replicas", None),
        router=getattr(args, "router", None),
    )
    return with_assignments(settings, args.set)


def workload_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The workload flags (`flags.add_workload_flags`) as [workload] settings (None where not
    given)."""
    return {
        "requests": args.requests,
        "arrival": args.arrival,
        "burstiness": args.burstiness,
        "overload": parse_overload(args.overload),
        "slo": args.slo,
        "slo_scale": args.slo_scale,
        "tiers": args.tiers,
        "trace_dir": args.trace_dir,
        "traces": args.trace,
        "trace_columns": args.trace_columns,
        "trace_start": args.trace_start,
        "trace_spread": args.trace_spread,
        "trace_block_size": args.trace_block_size,
        "system_prompt": args.system_prompt,
        "conversations": args.conversations,
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


def goodput_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The [goodput] flags the command has, as settings (None where not given or absent)."""
    return {key: getattr(args, key, None) for key in GOODPUT_KEYS}


def _take(table: Mapping[str, Any], section: str, known: tuple[str, ...]) -> dict[str, Any]:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ValueError(
            f"[{section}]: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}"
        )
    return dict(table)


def _given(table: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The keys of `table` that were given, under their config's field names (`names`)."""
    return {field: table[key] for key, field in names.items() if key in table}


# --- Settings to configs ---------------------------------------------------------------------


def hardware_config(settings: Settings) -> HardwareConfig:
    keys = ("gpu", "model", "tp", "noise", "gpu_memory_utilization", "profile_dir")
    return HardwareConfig(**_take(settings["hardware"], "hardware", keys))


def cluster_layout(settings: Settings) -> ClusterLayout | None:
    """The [cluster] table as a layout (None without `replicas`): a count of [hardware]
    replicas, or hardware points ("GPU:MODEL:TP", a list or a comma-separated text), each
    taking noise and memory from [hardware]."""
    table = _take(settings["cluster"], "cluster", ("replicas", "router"))
    if "replicas" not in table:
        if "router" in table:
            raise ValueError("a router needs a cluster: give [cluster] replicas (--replicas)")
        return None
    hardware = hardware_config(settings)
    replicas = table["replicas"]
    if isinstance(replicas, str) and replicas.strip().isdigit():
        replicas = int(replicas)
    if is_integer(replicas):
        if replicas < 1:
            raise ValueError(f"replicas must be at least 1, got {replicas}")
        points = (hardware,) * replicas
    else:
        texts = replicas.split(",") if isinstance(replicas, str) else list(replicas)
        points = tuple(parse_hardware(str(text), hardware) for text in texts)
    router = table.get("router", DEFAULT_ROUTER)
    return ClusterLayout(points, router)


def one_engine(settings: Settings, command: str) -> Settings:
    """`settings`, unchanged, for a command that runs one engine per hardware point;
    ValueError if they name a cluster (read by simulate and goodput only)."""
    if settings["cluster"]:
        raise ValueError(
            f"{command} runs one engine per hardware point; [cluster] is read by simulate "
            "and goodput"
        )
    return settings


def engine_limits(settings: Settings) -> EngineLimits:
    keys = ("max_num_batched_tokens", "max_num_seqs", "block_size", "prefix_caching")
    return EngineLimits(**_take(settings["engine"], "engine", keys))


PREFIX_KEYS = ("trace_block_size", "system_prompt", "conversations")
"""[workload] keys on shared prefixes (`prefix_options`)."""
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
    *PREFIX_KEYS,
)
SHARED_WORKLOAD_FIELDS = {
    "requests": "num_requests",
    "slo": "slo_preset",
    "slo_scale": "slo_scale",
    "trace_start": "trace_start",
    "trace_spread": "trace_spread",
}
"""[workload] keys that `WorkloadConfig` and `GoodputExperiment` both take, by field name."""
TRACE_KEYS = ("path", "class", "weight", "columns")
COLUMN_KEYS = ("prompt", "output", "time", "time_unit")


def _workload_table(settings: Settings) -> dict[str, Any]:
    return _take(settings["workload"], "workload", WORKLOAD_KEYS)


def trace_sources(settings: Settings) -> tuple[TraceSource, ...]:
    """The [[workload.traces]]: tables, or `FILE[:CLASS[:WEIGHT]]` strings (as --trace);
    `trace_columns` (`prompt=..,output=..`) applies to those without their own columns."""
    table = _workload_table(settings)
    traces = table.get("traces") or []
    if not isinstance(traces, list):
        raise ValueError(f"[workload] traces must be a list, got {traces!r}")
    shared = table.get("trace_columns")
    columns = TraceColumns.parse(shared) if isinstance(shared, str) else None
    if shared is not None and not isinstance(shared, str):
        raise ValueError(f"[workload] trace_columns must be a string, got {shared!r}")
    return tuple(_trace_source(entry, columns) for entry in traces)


def _trace_source(entry: Any, columns: TraceColumns | None) -> TraceSource:
    """One entry of [workload] traces; `columns` where it names none of its own."""
    if isinstance(entry, str):
        return TraceSource.parse(entry, columns)
    if not isinstance(entry, dict):
        raise ValueError(f"[workload] traces: a string or a table each, got {entry!r}")
    fields = _take(entry, "workload.traces", TRACE_KEYS)
    if "path" not in fields:
        raise ValueError("[[workload.traces]] needs a path")
    own = fields.get("columns")
    if own is not None and not isinstance(own, dict):
        raise ValueError(f"[[workload.traces]] columns must be a table, got {own!r}")
    given = _given(fields, {"class": "workload_class"})
    if "weight" in fields:
        given["weight"] = float(fields["weight"])
    return TraceSource(
        str(fields["path"]),
        columns=TraceColumns(**_take(own, "workload.traces.columns", COLUMN_KEYS))
        if own
        else columns,
        **given,
    )


def prefix_options(settings: Settings) -> dict[str, Any]:
    """The [workload] prefix keys given, as `WorkloadConfig` fields: `trace_block_size`,
    `system_prompt` and `conversations` (each a string as its flag, or a table)."""
    table = _workload_table(settings)
    options = _given(table, {"trace_block_size": "trace_block_size"})
    if "system_prompt" in table:
        options["system_prompt"] = _option(
            table["system_prompt"], SystemPrompt, ("tokens", "share"), "system_prompt"
        )
    if "conversations" in table:
        options["conversations"] = _option(
            table["conversations"], Conversations, ("turns", "concurrent"), "conversations"
        )
    return options


def _option(value: Any, kind: Any, keys: tuple[str, ...], name: str) -> Any:
    """A prefix option from its flag's string (`kind.parse`) or a table of `keys`."""
    if isinstance(value, str):
        return kind.parse(value)
    if isinstance(value, dict):
        return kind(**_take(value, f"workload.{name}", keys))
    raise ValueError(f"[workload] {name} must be a string or a table, got {value!r}")


def arrival_config(settings: Settings) -> ArrivalConfig:
    table = _workload_table(settings)
    given = _given(table, {"arrival": "process", "burstiness": "burstiness"})
    overload = table.get("overload")
    if overload is not None:
        if not isinstance(overload, dict):
            raise ValueError(f"[workload] overload must be a table, got {overload!r}")
        keys = ("start", "duration", "factor")
        given["overload"] = OverloadWindow(**_take(overload, "workload.overload", keys))
    return ArrivalConfig(**given)


def tier_mix(settings: Settings) -> TierMix | None:
    """SLO tiers: a preset name, or a list of tier tables (name, weight, ttft_factor,
    tbt_factor, protected, ttft, tbt), dealt by `tier_assignment` ("random" or "fixed")."""
    table = _workload_table(settings)
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
        **_given(table, {"tier_assignment": "assignment"}),
    )


def tbt_reading(settings: Settings) -> TbtReading:
    value = settings["workload"].get("tbt_reading", EXPERIMENT.tbt_reading.value)
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


def _goodput_table(settings: Settings) -> dict[str, Any]:
    return _take(settings["goodput"], "goodput", GOODPUT_KEYS)


def search_settings(settings: Settings) -> SearchSettings:
    table = _goodput_table(settings)
    return SearchSettings(**_given(table, {"threshold": "threshold", "precision": "precision"}))


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
    table = _workload_table(settings)
    trace_dir = table.get("trace_dir")
    given = {"num_requests": default_requests, **_given(table, SHARED_WORKLOAD_FIELDS)}
    return WorkloadConfig(
        name=name,
        arrival=arrival_config(settings),
        trace_dir=Path(trace_dir) if trace_dir else None,
        tiers=tier_mix(settings),
        traces=trace_sources(settings),
        **given,
        **prefix_options(settings),
    )


def workload_names(
    settings: Settings, given: Sequence[str] | None, default: tuple[str, ...] = (WORKLOAD,)
) -> tuple[str, ...]:
    """The workloads to run: those given, else the trace workload with --trace, else `default`."""
    if given:
        return tuple(given)
    return (TRACE_WORKLOAD,) if trace_sources(settings) else default


def default_rates(
    given: Sequence[float] | None, workload: WorkloadConfig, seed: int
) -> list[float]:
    """The rates to run: those given, else a replayed trace's recorded rate, else `RATE`."""
    if given:
        return list(given)
    return [recorded_rate(workload, seed)] if workload.replays else [RATE]


def experiment_from(settings: Settings) -> GoodputExperiment:
    """The goodput experiment of [goodput] and the setup tables."""
    table = _goodput_table(settings)
    policies = tuple(table.get("policies", EXPERIMENT.policies))
    if "reference" in table and table["reference"] not in policies:
        raise ValueError(
            f"reference policy {table['reference']!r} is not among {', '.join(policies)}"
        )
    workload = _workload_table(settings)
    cluster = cluster_layout(settings)
    return GoodputExperiment(
        policies=policies,
        workloads=workload_names(settings, table.get("workloads"), EXPERIMENT.workloads),
        arrival=arrival_config(settings),
        trace_dir=workload.get("trace_dir"),
        traces=trace_sources(settings),
        tbt_reading=tbt_reading(settings),
        tiers=tier_mix(settings),
        hardware=cluster.replicas[0] if cluster else hardware_config(settings),
        limits=engine_limits(settings),
        policy_options=policy_options(settings, policies),
        search=search_settings(settings),
        cluster=cluster,
        **_given(workload, SHARED_WORKLOAD_FIELDS),
        **prefix_options(settings),
        **_experiment_options(table),
    )


def _experiment_options(table: Mapping[str, Any]) -> dict[str, Any]:
    """The [goodput] keys given, as `GoodputExperiment` fields (seeds: a count or a list)."""
    options = _given(table, {"curve_points": "curve_points", "jobs": "jobs"})
    options.update(_given(table, {"reference": "reference"}))
    if "criteria" in table:
        options["criteria"] = tuple(table["criteria"])
    if "seeds" in table:
        seeds = table["seeds"]
        options["seeds"] = (
            tuple(seeds) if isinstance(seeds, list) else tuple(range(_count(seeds, "seeds")))
        )
    return options


def _count(value: Any, name: str) -> int:
    if not is_integer(value) or value < 1:
        raise ValueError(f"{name} must be a positive count or a list, got {value!r}")
    return value
