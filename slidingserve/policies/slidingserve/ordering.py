"""The ordering part: the order of the prefill queue (waiting and prefilling requests).

Two orders: the paper's Multi-Level Priority Sorter (docs/design.md §4) and earliest deadline first
(Sarathi-EDF's, which the measured design runs), optionally with requests whose deadline
passed behind the live ones. Decodes are not sorted: they always get their token first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from slidingserve.core.checks import require_number, require_positive
from slidingserve.core.request import WAITING, next_deadlines, remaining_prefills
from slidingserve.policies.common import deadline_order

if TYPE_CHECKING:
    from slidingserve.core.request import Request


@dataclass(frozen=True, slots=True)
class MlpsOrder:
    """MLPS (option `sorter=mlps`): protected first, live before lost, urgent first, then
    the fewest remaining tokens. It reads the prefill-rate EMA ρ_t."""

    alpha: float = 1.0  # urgency threshold α: urgent when u > α (dimensionless)
    epsilon: float = 0.001  # ε, seconds: floor of the slack in the urgency

    def __post_init__(self) -> None:
        require_positive("alpha", self.alpha)
        require_positive("epsilon", self.epsilon)


@dataclass(frozen=True, slots=True)
class EdfOrder:
    """Earliest deadline of the next token first, ties by arrival (option `sorter=edf`)."""

    lost_last: bool = False  # requests whose next deadline passed go after the live ones
    # > 0 (seconds): a waiting request whose prefix is cached goes as if its deadline came
    # this much earlier times the share of its prefill the cache holds, so that it runs
    # before its blocks are evicted (option `prefix_first`)
    prefix_first: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.lost_last, bool):
            raise ValueError(f"lost_last must be true or false, got {self.lost_last!r}")
        require_number("prefix_first", self.prefix_first, 0)


Ordering = MlpsOrder | EdfOrder


def sort_queue(
    ordering: Ordering, candidates: Sequence[Request], now: float, rate: float
) -> list[Request]:
    """`candidates` in the order of `ordering` at `now`; `rate` is ρ_t, tokens per second
    (MLPS's urgency)."""
    if isinstance(ordering, MlpsOrder):
        return mlps_order(candidates, now, rate, ordering.alpha, ordering.epsilon)
    return edf_order(candidates, now, lost_last=ordering.lost_last)


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

    The keys are made in one pass without a call per request (the queue is sorted at every
    iteration): `urgency` written out, with the same operations in the same order, so
    every key and so the order is that of `mlps_key` (tests/policies/slidingserve checks).
    """
    keys = [
        (
            not r.slo.protected,
            lost := slack <= 0,
            lost or not remaining / (throughput * (epsilon if epsilon > slack else slack)) > alpha,
            remaining,
            r.arrival,
        )
        for r, remaining, slack in zip(
            candidates,
            remaining_prefills(candidates),
            [deadline - now for deadline in next_deadlines(candidates)],
            strict=True,
        )
    ]
    return [candidates[i] for i in sorted(range(len(keys)), key=keys.__getitem__)]


def mlps_key(
    request: Request, now: float, throughput: float, alpha: float = 1.0, epsilon: float = 0.001
) -> tuple[bool, bool, bool, int, float]:
    """The MLPS key of one request at `now`, ascending: (1 − g, lost, 1 − e, r, arrival)."""
    remaining = request.remaining_prefill
    slack = request.next_deadline - now
    lost = slack <= 0
    urgent = not lost and urgency(remaining, slack, throughput, epsilon) > alpha
    return (not request.protected, lost, not urgent, remaining, request.arrival)


class DeadlineQueue(NamedTuple):
    """The prefill queue in deadline order, with the next deadline of each request (read
    once, for the ordering and the triage after it)."""

    requests: list[Request]
    deadlines: list[float]  # next deadline of each of `requests`, seconds


def edf_order(
    candidates: Sequence[Request], now: float = 0.0, *, lost_last: bool = False
) -> list[Request]:
    """Earliest deadline of the next token first, ties by arrival (Sarathi-EDF's key); with
    `lost_last`, the requests whose next deadline is not after `now` go behind the others."""
    return edf_queue(candidates, now, lost_last=lost_last).requests


def edf_queue(
    candidates: Sequence[Request],
    now: float = 0.0,
    *,
    lost_last: bool = False,
    prefix_first: float = 0.0,
) -> DeadlineQueue:
    """`edf_order` with the deadlines it read, in the same order; `prefix_first` (seconds)
    moves waiting requests with a prefix-cache hit ahead (`EdfOrder.prefix_first`)."""
    deadlines = next_deadlines(candidates)  # each deadline read once
    keys = _prefix_first_keys(candidates, deadlines, prefix_first) if prefix_first else deadlines
    order = deadline_order(keys, [r.arrival for r in candidates])
    if lost_last:
        live = [i for i in order if deadlines[i] > now]
        if len(live) < len(order):
            order = live + [i for i in order if deadlines[i] <= now]
    return DeadlineQueue([candidates[i] for i in order], [deadlines[i] for i in order])


def _prefix_first_keys(
    candidates: Sequence[Request], deadlines: list[float], window: float
) -> list[float]:
    """Each request's deadline, less `window` × the share of its prefill target its hit
    covers for a waiting request (its computed tokens are its hit)."""
    return [
        deadline - window * r.num_computed / r.prefill_target
        if r.phase is WAITING and r.num_computed
        else deadline
        for r, deadline in zip(candidates, deadlines, strict=True)
    ]
