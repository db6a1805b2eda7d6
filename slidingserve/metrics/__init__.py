"""SLO metrics of request timelines, for the simulator and the load generator alike.

Both produce one `Timeline` per request (seconds on the run's clock: when it was due, its
SLO, when each chunk of output came, how it ended) and read every figure here::

    timelines = [Timeline.of_request(request) for request in finished]
    metrics = measure(timelines, duration=span(timelines))
    print(metrics.cumulative.overall, metrics.ttft.p99, measure_tiers(timelines, 10.0))

Beside `core` at the bottom of the layers: it imports nothing else of the project.
"""

from __future__ import annotations

from slidingserve.metrics.figures import (
    Percentiles,
    RunMetrics,
    ViolationRates,
    measure,
    measure_tiers,
    span,
)
from slidingserve.metrics.timeline import (
    Outcome,
    Reading,
    TbtReading,
    Timeline,
    Verdict,
    received_tokens,
)

__all__ = [
    "Outcome",
    "Percentiles",
    "Reading",
    "RunMetrics",
    "TbtReading",
    "Timeline",
    "Verdict",
    "ViolationRates",
    "measure",
    "measure_tiers",
    "received_tokens",
    "span",
]
