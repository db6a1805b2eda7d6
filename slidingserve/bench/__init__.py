"""SLO load generator for OpenAI-compatible streaming servers (`slidingserve bench`).

Replays the simulator's workloads (lengths scaled to the served model's context, arrivals,
tiers, SLO presets) against `/v1/completions`, records every streamed token's arrival and
reports vLLM's benchmark latencies with the project's SLO violations and goodput::

    result = run_bench(BenchConfig("http://127.0.0.1:8000", WorkloadConfig("sharegpt", 100),
                                   rate=2.0))
    print(result.summary.metrics.cumulative.overall, result.errors)
    write_bench_json(result, Path("bench.json"))
    plot_bench(result, Path("bench.png"))
"""

from __future__ import annotations

from slidingserve.bench.client import ERROR_KINDS, StreamError
from slidingserve.bench.records import RequestRecord
from slidingserve.bench.report import (
    bench_payload,
    format_summary,
    per_second,
    plot_bench,
    write_bench_json,
)
from slidingserve.bench.requests import PlannedRequest, plan_requests, request_body, scale_lengths
from slidingserve.bench.runner import (
    BenchConfig,
    BenchResult,
    BenchSetupError,
    bench,
    discover,
    run_bench,
)
from slidingserve.bench.summary import BenchSummary, summarize

__all__ = [
    "ERROR_KINDS",
    "BenchConfig",
    "BenchResult",
    "BenchSetupError",
    "BenchSummary",
    "PlannedRequest",
    "RequestRecord",
    "StreamError",
    "bench",
    "bench_payload",
    "discover",
    "format_summary",
    "per_second",
    "plan_requests",
    "plot_bench",
    "request_body",
    "run_bench",
    "scale_lengths",
    "summarize",
    "write_bench_json",
]
