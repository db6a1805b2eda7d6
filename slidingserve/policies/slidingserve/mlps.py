"""Multi-Level Priority Sorter (SPEC §4), and the EDF order it replaces in ablations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slidingserve.core.request import Request


def urgency(remaining: int, slack: float, throughput: float, epsilon: float) -> float:
    """u_i = r_i / (ρ_t · max(s_i, ε)): above 1, the prefill cannot finish even at full speed."""
    return remaining / (throughput * max(slack, epsilon))


def mlps_order(
    candidates: Sequence[Request],
    now: float,
    throughput: float,
    alpha: float = 1.0,
    epsilon: float = 0.001,
) -> list[Request]:
    """Sort waiting and prefilling requests by (1 − g, lost, 1 − e, r, arrival), ascending.

    Protected requests first; within a protection level live requests before lost ones
    (their deadline passed, so budget goes to requests that can still make it); among live
    ones the urgent (u > α) first; then fewer remaining tokens first; ties by arrival.
    """

    def key(request: Request) -> tuple[bool, bool, bool, int, float]:
        remaining = request.remaining_prefill
        slack = request.next_deadline - now
        lost = slack <= 0
        urgent = not lost and urgency(remaining, slack, throughput, epsilon) > alpha
        return (not request.protected, lost, not urgent, remaining, request.arrival)

    return sorted(candidates, key=key)


def edf_order(candidates: Sequence[Request]) -> list[Request]:
    """Earliest deadline of the next token first, ties by arrival (Sarathi-EDF)."""
    return sorted(candidates, key=lambda r: (r.next_deadline, r.arrival))
