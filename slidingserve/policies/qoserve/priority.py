"""QoServe's prefill order, eager relegation and prefill-throughput estimate (SPEC §8)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence

    from slidingserve.core.request import Request


def priority_key(
    request: Request, relegated: Collection[str], weight: float
) -> tuple[bool, float, float]:
    """Sort key of a prefill, smallest first: relegated last, then the deadline of its next
    token plus `weight` seconds per remaining prefill token, then arrival.

    The next token's deadline is a_i + L_ttft_i until the request is preempted after
    emitting tokens; then it is the deadline of the token it will emit next.
    """
    urgency = request.next_deadline + weight * request.remaining_prefill
    return (request.request_id in relegated, urgency, request.arrival)


def cannot_meet_ttft(request: Request, now: float, throughput: float) -> bool:
    """Whether even the whole prefill throughput (tokens/s) would finish `request`'s prefill
    after the deadline of its next token: now + remaining / ρ > deadline (never done at ρ = 0)."""
    seconds = request.remaining_prefill / throughput if throughput > 0 else math.inf
    return now + seconds > request.next_deadline


def ttft_from_e2e(e2e_slo: float, time_per_decode: float, num_decodes: int) -> float:
    """QoServe's first-token target for a tier with only an end-to-end SLO, seconds:
    L_e2e − n_decode × (time of one batched decode step). `num_decodes` is the predicted
    output length (the config's `default_decode_count` when unknown). Not used by the
    policy: every request here carries a TTFT and a TBT SLO."""
    return e2e_slo - num_decodes * time_per_decode


class Relegation:
    """The ids of relegated requests. A request is relegated at most once and stays
    relegated until it leaves the engine (finishes)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    @property
    def ids(self) -> Collection[str]:
        return self._ids

    def relegate_if_hopeless(self, request: Request, now: float, throughput: float) -> bool:
        """Relegate `request` if it has not started (nothing cached), was never relegated
        and cannot meet its TTFT at `throughput` tokens/s; return whether it was."""
        if (
            request.num_computed == 0
            and request.request_id not in self._ids
            and cannot_meet_ttft(request, now, throughput)
        ):
            self._ids.add(request.request_id)
            return True
        return False

    def forget_departed(self, present: Sequence[Iterable[Request]]) -> None:
        """Drop the ids of requests in none of the `present` queues (they finished)."""
        if self._ids:
            self._ids &= {r.request_id for queue in present for r in queue}


class ThroughputEma:
    """ρ_EMA: prefill tokens per second, an EMA over the steps that computed prefill.

    The authors' code folds in an observation only when the previous step had prefill
    tokens (`if self.last_prefill_size != 0:`): decode-only steps leave ρ as it is.
    """

    def __init__(self, initial: float, decay: float) -> None:
        self.value = initial  # tokens per second
        self.decay = decay  # weight of the old value at each observed step

    def observe(self, prefill_tokens: int, seconds: float) -> None:
        """Fold in one step: `prefill_tokens` computed in `seconds`. A step without prefill
        tokens or without time is skipped."""
        if prefill_tokens > 0 and seconds > 0:
            self.value = self.decay * self.value + (1 - self.decay) * prefill_tokens / seconds
