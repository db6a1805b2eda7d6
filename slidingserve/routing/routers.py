"""The routers: round robin, least outstanding requests, least outstanding work, and the
SLO-aware router (docs/cluster.md §2). Ties go to the lowest index."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slidingserve.routing.base import ReplicaLoad, ReplicaModel, Router

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.request import Request


class RoundRobin(Router):
    """Each replica in turn, whatever it holds."""

    name = "round-robin"

    def __init__(self, replicas: tuple[ReplicaModel, ...]) -> None:
        super().__init__(replicas)
        self._next = 0

    def route(self, request: Request, loads: Sequence[ReplicaLoad]) -> int:
        chosen = self._next
        self._next = (chosen + 1) % len(loads)
        return chosen


class LeastRequests(Router):
    """The replica holding the fewest requests (queued or running): what load balancers in
    front of vLLM commonly do (least outstanding requests)."""

    name = "least-requests"

    def route(self, request: Request, loads: Sequence[ReplicaLoad]) -> int:
        return min(range(len(loads)), key=lambda i: loads[i].outstanding)


class LeastWork(Router):
    """The replica with the least predicted prefill work queued: its queued prompt tokens
    over the prefill rate its GPU gives beside its decodes (`ReplicaModel.prefill_rate`),
    so a replica with long prompts queued, many decodes or a slower GPU counts as busier."""

    name = "least-work"

    def route(self, request: Request, loads: Sequence[ReplicaLoad]) -> int:
        return min(range(len(loads)), key=lambda i: self.work_seconds(i, loads[i]))

    def work_seconds(self, index: int, load: ReplicaLoad) -> float:
        """Predicted seconds to prefill what replica `index` has queued."""
        tokens = load.queued_tokens
        if not tokens:
            return 0.0
        rate = self.replicas[index].prefill_rate(load.decode_contexts)
        return tokens / rate if rate > 0 else float("inf")


class SloAware(Router):
    """The replica where the request's first token is predicted to leave the most slack:
    its prompt, less what the replica's prefix cache holds, prefilled after the queued
    prompts whose deadlines come first (the order of a deadline-first scheduler) at the
    rate the replica gives prefill while keeping its decodes within the request's TBT
    (`ReplicaModel.paced_prefill_rate`: many or long decodes leave little room).

    It refuses the request only when no replica could make its first-token deadline even
    in full batches that ignore the decodes' pace (`ReplicaModel.prefill_rate`): an
    optimistic test, so a refused request could not have been served in time anywhere."""

    name = "slo-aware"

    def route(self, request: Request, loads: Sequence[ReplicaLoad]) -> int | None:
        paced = [self.slack(i, request, load) for i, load in enumerate(loads)]
        best_case = [self.slack(i, request, load, paced=False) for i, load in enumerate(loads)]
        if max(best_case) < 0:
            return None
        return max(range(len(loads)), key=lambda i: (paced[i], best_case[i]))

    def slack(self, index: int, request: Request, load: ReplicaLoad, paced: bool = True) -> float:
        """Seconds from the predicted first token on replica `index` to its deadline, at
        the paced rate (or, `paced` False, at the full-batch rate); −inf at a rate of 0."""
        replica = self.replicas[index]
        if paced:
            rate = replica.paced_prefill_rate(load.decode_contexts, request.slo.tbt)
        else:
            rate = replica.prefill_rate(load.decode_contexts)
        if rate <= 0:
            return -float("inf")
        deadline = request.next_deadline
        ahead = sum(entry.tokens for entry in load.prefills if entry.deadline <= deadline)
        own = max(1, request.prefill_target - load.prefix_hit)
        return deadline - (load.now + (ahead + own) / rate)

    def refuses(self) -> bool:
        return True
