"""SCORPIO's two guards, as the authors' `vllm/core/scheduler.py` computes them.

TTFT guard: least-deadline-first order (`_get_ldf_ordered_requests`) and the rejection of
requests whose predicted wait passes their TTFT deadline (`_reject_ttft_unattainable`).
TPOT guard: the virtual batch size (`GlobalTPOTState.get_virtual_batch_size`), the
admission gate built on it (`_tpot_admission_control`) and credit-based batching (the
credit branch of `_schedule_running`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from slidingserve.core.request import Request

CREDIT_EPSILON = 1e-9
"""Slack on `credit ≥ 1`: credits of 1/3 added three times must make one token."""


def ldf_order(requests: Iterable[Request]) -> list[Request]:
    """Least deadline first: by a_i + L_ttft_i (the authors' `ttft_deadline`, which is the
    time left to it), ties by arrival. A request preempted after its first token keeps its
    TTFT deadline, already past, so it comes first."""
    return sorted(requests, key=lambda r: (r.ttft_deadline, r.arrival))


class TpotState:
    """The TPOT (here L_tbt, seconds) of every admitted request: `GlobalTPOTState`."""

    def __init__(self, tpots: Iterable[float] = ()) -> None:
        self.counts: Counter[float] = Counter(tpots)

    def add(self, tpot: float) -> None:
        self.counts[tpot] += 1

    @property
    def lowest(self) -> float:
        """The tightest TPOT; infinite when nothing is admitted."""
        return min(self.counts, default=float("inf"))

    @property
    def uniform(self) -> bool:
        """Whether every admitted request has the same TPOT (credits then change nothing)."""
        return len(self.counts) <= 1

    def virtual_batch_size(self, candidate: float | None = None) -> float:
        """Σ count × (lowest / TPOT), `candidate` counted in: the decodes one step holds on
        average when each request runs in lowest / TPOT of the steps (0 when empty)."""
        counts = self.counts if candidate is None else self.counts + Counter([candidate])
        if not counts:
            return 0.0
        lowest = min(counts)
        return sum(count * lowest / tpot for tpot, count in counts.items())


class CreditLedger:
    """Credit-based batching: each step, a decode whose TPOT is above the lowest earns
    lowest / TPOT credit and runs only when its credit reaches 1, which it then spends."""

    def __init__(self) -> None:
        self.credits: dict[str, float] = {}

    def select(self, decoding: Sequence[Request], lowest: float) -> list[Request]:
        """The decodes that run this step, in queue order (every one at the lowest TPOT)."""
        chosen: list[Request] = []
        credits = self.credits
        for request in decoding:
            tpot = request.slo.tbt
            if tpot <= lowest:
                chosen.append(request)
                continue
            credit = credits.get(request.request_id, 0.0) + lowest / tpot
            if credit >= 1 - CREDIT_EPSILON:
                credit -= 1
                chosen.append(request)
            credits[request.request_id] = credit
        return chosen

    def forget_departed(self, queues: Iterable[Iterable[Request]]) -> None:
        """Drop the credit of requests in none of `queues` (they finished or were refused);
        a preempted request keeps its credit, as the authors' `SequenceGroup` does."""
        if self.credits:
            present = {r.request_id for queue in queues for r in queue}
            self.credits = {k: v for k, v in self.credits.items() if k in present}
