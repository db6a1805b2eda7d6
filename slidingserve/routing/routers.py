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
    so a replica with long prompts queued, many decodes or a slower GPU counts as busier;
    between replicas with equal work, the one holding the fewest requests."""

    name = "least-work"
    needs_models = True

    def route(self, request: Request, loads: Sequence[ReplicaLoad]) -> int:
        # Equal work (most often none queued anywhere) goes to the fewest requests, not
        # to the lowest index: that would pile every decode on replica 0 at light load.
        return min(
            range(len(loads)),
            key=lambda i: (self.work_seconds(i, loads[i]), loads[i].outstanding),
        )

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
    prompts due first that can still make their deadlines (a deadline-first scheduler
    serves those first and sets the late ones aside), at the rate the replica gives prefill
    while its decodes keep their TBT (`ReplicaModel.paced_prefill_rate`, at the tightest of
    the request's TBT and its decodes': many or long decodes leave little room).

    It refuses the request only when on no replica its own prompt alone, run next in full
    batches (`ReplicaModel.prefill_rate`), would make its first-token deadline: the test
    of admission control, optimistic, so the router refuses only requests no replica could
    serve in time, as far as the predictor can tell."""

    name = "slo-aware"
    needs_models = True
    reads_prefixes = True

    def route(self, request: Request, loads: Sequence[ReplicaLoad]) -> int | None:
        if all(self.hopeless(i, request, load) for i, load in enumerate(loads)):
            return None
        slacks = [self.slack(i, request, load) for i, load in enumerate(loads)]
        return max(range(len(loads)), key=lambda i: slacks[i])

    def slack(self, index: int, request: Request, load: ReplicaLoad) -> float:
        """Seconds from the predicted first token on replica `index` to its deadline; −inf
        when its decodes leave prefill no room."""
        replica = self.replicas[index]
        pace = request.slo.tbt if load.decode_tbt is None else min(request.slo.tbt, load.decode_tbt)
        rate = replica.paced_prefill_rate(load.decode_contexts, pace)
        if rate <= 0:
            return -float("inf")
        deadline, now = request.next_deadline, load.now
        ahead = sum(e.tokens for e in load.prefills if now < e.deadline <= deadline)
        return deadline - (now + (ahead + self._own_tokens(request, load)) / rate)

    def hopeless(self, index: int, request: Request, load: ReplicaLoad) -> bool:
        """Whether the request's own prompt, run next on replica `index` in full batches
        beside its decodes, would still miss its first-token deadline."""
        rate = self.replicas[index].prefill_rate(load.decode_contexts)
        if rate <= 0:
            return True
        return load.now + self._own_tokens(request, load) / rate > request.next_deadline

    @staticmethod
    def _own_tokens(request: Request, load: ReplicaLoad) -> int:
        return max(1, request.prefill_target - load.prefix_hit)
