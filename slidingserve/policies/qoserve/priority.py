"""QoServe's prefill order and its first-token target for end-to-end tiers (docs/baselines.md); its
eager relegation and prefill-rate EMA are `policies.common`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection

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


def ttft_from_e2e(e2e_slo: float, time_per_decode: float, num_decodes: int) -> float:
    """QoServe's first-token target for a tier with only an end-to-end SLO, seconds:
    L_e2e − n_decode × (time of one batched decode step). `num_decodes` is the predicted
    output length (the config's `default_decode_count` when unknown). Not used by the
    policy: every request here carries a TTFT and a TBT SLO."""
    return e2e_slo - num_decodes * time_per_decode
