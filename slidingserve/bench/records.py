"""What was measured of one request: its timeline, and what only a benchmark knows of it.

Times are seconds after the run start (monotonic clock). The timeline's `arrival` is the
*scheduled* send time, where the request's deadlines (eq. 1) count from, and its `sent` the
actual one, where vLLM's latencies count from (see `slidingserve.metrics`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slidingserve.metrics import Timeline


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One sent request and what came back."""

    request_id: str
    timeline: Timeline  # times, SLO, chunks, the usage event's token count, outcome
    finished: float  # seconds after the run start: end of stream, error or cancellation
    prompt_tokens: int
    max_tokens: int  # output tokens asked for
    error_kind: str | None = None  # connection, http_<status>, timeout, dropped, ...
    error_message: str | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        t = self.timeline
        return {
            "request_id": self.request_id,
            "outcome": t.outcome.value,
            "scheduled_s": t.arrival,
            "sent_s": t.start,
            "finished_s": self.finished,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "output_tokens": t.num_tokens,
            "ttft_slo_ms": t.slo.ttft * 1000.0,
            "tbt_slo_ms": t.slo.tbt * 1000.0,
            "protected": t.slo.protected,
            "tier": t.slo.tier,
            "ttft_ms": _ms(t.ttft),
            "tpot_ms": _ms(t.tpot),
            "e2e_ms": _ms(t.e2e),
            "chunk_times_s": list(t.chunk_times),
            "chunk_tokens": [1] * len(t.chunk_times)
            if t.chunk_tokens is None
            else list(t.chunk_tokens),
            "error_kind": self.error_kind,
            "error_message": self.error_message,
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0
