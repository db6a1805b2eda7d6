"""vLLM v1's own scheduling: running requests first in order, then waiting ones FCFS
(`vllm`) or by priority (`vllm-priority`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from slidingserve.core.checks import require_int
from slidingserve.core.plan import PlanBuilder
from slidingserve.core.request import Phase
from slidingserve.policies.base import Policy

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.plan import Plan
    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView


@dataclass(frozen=True, slots=True)
class VllmConfig:
    """Options of `vllm`."""

    max_num_batched_tokens: int | None = None  # token budget; None: the engine's limit (2048)

    def __post_init__(self) -> None:
        if self.max_num_batched_tokens is not None:
            require_int("max_num_batched_tokens", self.max_num_batched_tokens)


class VllmPolicy(Policy):
    """Running requests (decodes and partial prefills, in admission order) each take what the
    budget allows, then waiting requests in arrival order; no per-request cap
    (docs/baselines.md)."""

    name = "vllm"
    path = "fcfs"  # the decision path plans are labelled with
    config_type = VllmConfig
    config: VllmConfig

    def schedule(self, view: SchedulerView) -> Plan:
        builder = PlanBuilder(view, self.config.max_num_batched_tokens)
        for request in view.running:
            if request.phase is Phase.DECODING:
                builder.add(request, 1)
            else:
                builder.add(request, request.remaining_prefill)
        builder.add_prefills(self.waiting_order(view.waiting))
        return builder.build(self.path)

    def waiting_order(self, waiting: Sequence[Request]) -> Sequence[Request]:
        """The order waiting requests are admitted in: arrival (the queue's own order)."""
        return waiting


class VllmPriorityPolicy(VllmPolicy):
    """vLLM's `--scheduling-policy priority` with each request's priority set to its TTFT
    deadline, as `slidingserve bench` sends it: running requests first as in `vllm`, then
    waiting ones by (deadline, arrival), vLLM's heap order.

    vLLM preempts the lowest-priority running request when KV runs out; the simulator
    preempts the newest one. The two agree whenever KV suffices (the CPU engine's 262k-token
    cache) and differ only in the victim otherwise.
    """

    name = "vllm-priority"
    path = "priority"

    def waiting_order(self, waiting: Sequence[Request]) -> Sequence[Request]:
        return sorted(waiting, key=_priority)


def _priority(request: Request) -> tuple[float, float]:
    return request.ttft_deadline, request.arrival
