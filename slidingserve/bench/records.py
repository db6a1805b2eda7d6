"""What was measured of one request: its times, tokens and outcome.

Times are seconds after the run start (monotonic clock). Latencies follow vLLM's benchmark:
TTFT is the first streamed token minus the send time, e2e the last minus the send time, TPOT
(e2e − TTFT) / (output tokens − 1), ITL every gap between consecutive chunks. SLO deadlines
(SPEC eq. 1) count from the *scheduled* send time instead, see `slidingserve.bench.metrics`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slidingserve.core.request import SLO


class Outcome(enum.Enum):
    COMPLETED = "completed"  # every asked-for token arrived
    FAILED = "failed"  # an error ended it; `error_kind` says which
    CANCELLED = "cancelled"  # still running when the run was stopped (Ctrl-C)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One sent request and what came back."""

    request_id: str
    scheduled: float  # seconds after the run start: when the workload said to send it
    sent: float  # seconds after the run start: when it was sent
    finished: float  # seconds after the run start: end of stream, error or cancellation
    prompt_tokens: int
    max_tokens: int  # output tokens asked for
    slo: SLO  # seconds
    outcome: Outcome
    chunk_times: tuple[float, ...] = ()  # seconds after the run start, per chunk with a token
    chunk_tokens: tuple[int, ...] = ()  # tokens in each chunk (token_ids when sent, else 1)
    usage_tokens: int | None = None  # completion_tokens of the stream's usage event
    error_kind: str | None = None  # connection, http_<status>, timeout, dropped, ...
    error_message: str | None = field(default=None, repr=False)

    @property
    def output_tokens(self) -> int:
        """Tokens received: the usage event's count when there is one, else the chunks'."""
        return self.usage_tokens if self.usage_tokens is not None else sum(self.chunk_tokens)

    @property
    def token_times(self) -> tuple[float, ...]:
        """Arrival of every output token, seconds after the run start.

        A chunk of k tokens gives k equal times. Tokens the usage event counts beyond the
        chunks arrived by the last chunk (they are given its time); if it counts fewer, the
        last ones are dropped but the last chunk's time is kept for the final token.
        """
        times = np.repeat(np.asarray(self.chunk_times), np.asarray(self.chunk_tokens, dtype=int))
        count = self.output_tokens
        if times.size == 0 or count == times.size:
            return tuple(times.tolist())
        if count > times.size:
            return tuple(times.tolist() + [float(times[-1])] * (count - times.size))
        if count == 0:
            return ()
        return (*times[: count - 1].tolist(), float(times[-1]))

    @property
    def ttft(self) -> float | None:
        """Seconds from sending to the first token; None without a token."""
        return self.chunk_times[0] - self.sent if self.chunk_times else None

    @property
    def e2e(self) -> float | None:
        """Seconds from sending to the last token; None without a token."""
        return self.chunk_times[-1] - self.sent if self.chunk_times else None

    @property
    def tpot(self) -> float | None:
        """Seconds per output token after the first; None with fewer than 2 tokens."""
        if not self.chunk_times or self.output_tokens < 2:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / (self.output_tokens - 1)

    @property
    def itl(self) -> tuple[float, ...]:
        """Every gap between consecutive chunks, seconds."""
        return tuple(np.diff(np.asarray(self.chunk_times)).tolist())

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "outcome": self.outcome.value,
            "scheduled_s": self.scheduled,
            "sent_s": self.sent,
            "finished_s": self.finished,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "output_tokens": self.output_tokens,
            "ttft_slo_ms": self.slo.ttft * 1000.0,
            "tbt_slo_ms": self.slo.tbt * 1000.0,
            "protected": self.slo.protected,
            "tier": self.slo.tier,
            "ttft_ms": _ms(self.ttft),
            "tpot_ms": _ms(self.tpot),
            "e2e_ms": _ms(self.e2e),
            "chunk_times_s": list(self.chunk_times),
            "chunk_tokens": list(self.chunk_tokens),
            "error_kind": self.error_kind,
            "error_message": self.error_message,
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0
