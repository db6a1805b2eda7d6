"""The summary of a benchmark run: the metrics of its requests (`slidingserve.metrics`) and
what was sent of the plan."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slidingserve.bench.records import RequestRecord
from slidingserve.metrics import RunMetrics, measure, measure_tiers


@dataclass(frozen=True, slots=True)
class BenchSummary:
    """The figures of one run."""

    requests_planned: int  # requests of the workload
    requests_sent: int
    interrupted: bool  # the run was stopped by Ctrl-C (or a stop request)
    metrics: RunMetrics  # every sent request, rates per second of the run
    tiers: dict[str, RunMetrics]  # by tier name, rates per second of the run; {} without tiers

    @property
    def not_sent(self) -> int:
        """Planned but never sent (stopped by --duration or Ctrl-C)."""
        return self.requests_planned - self.requests_sent

    def to_dict(self) -> dict[str, Any]:
        """The summary as `bench.json` holds it: latencies in ms, each tier's violations."""
        m = self.metrics
        return {
            "requests_planned": self.requests_planned,
            "requests_sent": self.requests_sent,
            "completed": m.completed,
            "failed": m.failed,
            "cancelled": m.cancelled,
            "not_sent": self.not_sent,
            "duration_s": m.duration,
            "request_throughput": m.request_throughput,
            "output_throughput": m.output_throughput,
            **{f"{name}_ms": getattr(m, name).in_ms() for name in ("ttft", "tpot", "itl", "e2e")},
            "violations": dataclasses.asdict(m.cumulative),
            "violations_per_gap": dataclasses.asdict(m.per_gap),
            "tiers": [
                {
                    "name": name,
                    "cumulative": dataclasses.asdict(tier.cumulative),
                    "per_gap": dataclasses.asdict(tier.per_gap),
                }
                for name, tier in self.tiers.items()
            ],
            "goodput": m.goodput,
            "goodput_per_gap": m.goodput_per_gap,
            "goodput_vllm": m.goodput_vllm,
            "interrupted": self.interrupted,
        }


def summarize(
    records: Sequence[RequestRecord],
    *,
    planned: int,
    duration: float,
    interrupted: bool = False,
) -> BenchSummary:
    """The summary of a run of `planned` requests that lasted `duration` seconds."""
    timelines = [record.timeline for record in records]
    return BenchSummary(
        requests_planned=planned,
        requests_sent=len(records),
        interrupted=interrupted,
        metrics=measure(timelines, duration),
        tiers=measure_tiers(timelines, duration),
    )
