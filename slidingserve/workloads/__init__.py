"""Workload generator for the simulator: request lengths, arrivals, SLOs, named workloads.

Typical use::

    config = WorkloadConfig("mixed-v1", num_requests=2000, arrival=ArrivalConfig("poisson"))
    requests = generate_requests(config, rate=4.0, seed=0, max_model_len=8192)
"""

from __future__ import annotations

from slidingserve.workloads.arrivals import (
    ArrivalConfig,
    OverloadWindow,
    arrival_times,
    scale_arrivals,
    unit_arrivals,
)
from slidingserve.workloads.lengths import (
    TRACE_FILES,
    EmbeddedLengths,
    LengthDistribution,
    QuantileTable,
    TraceLengths,
    embedded_distribution,
    load_quantile_tables,
    trace_distribution,
)
from slidingserve.workloads.prefixes import Conversations, SystemPrompt
from slidingserve.workloads.replay import TRACE_WORKLOAD, TraceSource
from slidingserve.workloads.slo import (
    CONVERSATIONAL,
    SLO_PRESETS,
    SUMMARIZATION,
    WORKLOAD_CLASSES,
    slo_for,
)
from slidingserve.workloads.tiers import TIER_PRESETS, Tier, TierMix, get_tier_mix
from slidingserve.workloads.trace_files import (
    TRACE_BLOCK_SIZE,
    TimedTrace,
    TraceColumns,
    read_trace_file,
)
from slidingserve.workloads.traces import LengthTable, TraceFormatError, read_trace
from slidingserve.workloads.workload import (
    WORKLOADS,
    WorkloadConfig,
    WorkloadSample,
    WorkloadSource,
    WorkloadSpec,
    generate_requests,
    get_workload,
    length_sources,
    recorded_rate,
    sample_workload,
    trim_to_context,
)

__all__ = [
    "CONVERSATIONAL",
    "SLO_PRESETS",
    "SUMMARIZATION",
    "TIER_PRESETS",
    "TRACE_BLOCK_SIZE",
    "TRACE_FILES",
    "TRACE_WORKLOAD",
    "WORKLOADS",
    "WORKLOAD_CLASSES",
    "ArrivalConfig",
    "Conversations",
    "EmbeddedLengths",
    "LengthDistribution",
    "LengthTable",
    "OverloadWindow",
    "QuantileTable",
    "SystemPrompt",
    "Tier",
    "TierMix",
    "TimedTrace",
    "TraceColumns",
    "TraceFormatError",
    "TraceLengths",
    "TraceSource",
    "WorkloadConfig",
    "WorkloadSample",
    "WorkloadSource",
    "WorkloadSpec",
    "arrival_times",
    "embedded_distribution",
    "generate_requests",
    "get_tier_mix",
    "get_workload",
    "length_sources",
    "load_quantile_tables",
    "read_trace",
    "read_trace_file",
    "recorded_rate",
    "sample_workload",
    "scale_arrivals",
    "slo_for",
    "trace_distribution",
    "trim_to_context",
    "unit_arrivals",
]
