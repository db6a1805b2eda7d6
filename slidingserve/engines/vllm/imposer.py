"""Makes vLLM's scheduler run a plan, through the hooks of vLLM 0.32's `Scheduler` (docs/vllm.md).

Before vLLM's own `schedule()`, `impose` puts the planned requests first, in plan order, in
its running list and both waiting queues, and sets the step's token budget to the plan's
total. While vLLM schedules, its `_reserve_prefill_lookahead` asks `cap` how many tokens a
request may take: the plan's count, 0 for an unplanned one. After it, `release` restores the
budget and says whether vLLM ran the plan as given. An empty plan imposes nothing: vLLM's
own scheduler then fills the step rather than leave the engine idle.
No vLLM import: it changes only the scheduler's queues and budget, tested with stand-ins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Mapping

    from slidingserve.core.plan import Plan


class EngineQueues(Protocol):
    """What the imposer changes of vLLM's scheduler; the requests have a `request_id`."""

    running: list[Any]  # admitted requests, in the order vLLM serves them
    waiting: deque[Any]  # requests to admit, in the order vLLM admits them
    kv_holding_waiting: deque[Any]  # waiting ones that hold KV blocks: admitted first
    max_num_scheduled_tokens: int  # the token budget of the next step


class StepOutcome(NamedTuple):
    """How a step's schedule departed from its plan (`AdapterHealth.step` counts these)."""

    fell_back: bool  # the plan was empty and vLLM's own scheduler filled the step
    mismatch: bool  # vLLM ran other requests or token counts than the plan


class PlanImposer:
    """Imposes one plan per step on `queues`; see the module docstring."""

    def __init__(self, queues: EngineQueues, max_num_batched_tokens: int) -> None:
        self._queues = queues
        self._max_tokens = max_num_batched_tokens  # vLLM's own budget, restored after a step
        self._caps: dict[str, int] | None = None  # tokens per request while a plan is imposed

    def impose(self, plan: Plan) -> None:
        """Planned requests first, in plan order; caps and budget from the plan. Whatever a
        step left behind (one whose `release` never came: vLLM's `schedule()` raised) is
        lifted first."""
        self.lift()
        if not plan.chunks:
            return
        rank = {chunk.request.request_id: i for i, chunk in enumerate(plan.chunks)}
        last = len(rank)
        queues = self._queues
        queues.running.sort(key=lambda r: rank.get(r.request_id, last))
        for queue in (queues.kv_holding_waiting, queues.waiting):
            ordered = sorted(queue, key=lambda r: rank.get(r.request_id, last))
            queue.clear()
            queue.extend(ordered)
        self._caps = {chunk.request.request_id: chunk.tokens for chunk in plan.chunks}
        queues.max_num_scheduled_tokens = min(plan.total_tokens, self._max_tokens)

    def hold(self) -> None:
        """A step that runs nothing: every request capped at 0 tokens and a budget of 0,
        as vLLM's own scheduler runs while paused."""
        self.lift()
        self._caps = {}
        self._queues.max_num_scheduled_tokens = 0

    def cap(self, request_id: str, tokens: int) -> int:
        """The tokens request `request_id` may take of the `tokens` vLLM would give it: its
        planned count (0 if unplanned) while a plan is imposed, else all of them."""
        if self._caps is None:
            return tokens
        return min(tokens, self._caps.get(request_id, 0))

    def release(self, plan: Plan, scheduled: Mapping[str, int]) -> StepOutcome:
        """After vLLM scheduled `scheduled` (request id: tokens) for `plan`: lift the caps,
        restore vLLM's budget and compare the two."""
        self.lift()
        ran = dict(scheduled)
        wanted = {chunk.request.request_id: chunk.tokens for chunk in plan.chunks}
        return StepOutcome(
            fell_back=not plan.chunks and bool(ran),
            mismatch=bool(plan.chunks) and ran != wanted,
        )

    def lift(self) -> None:
        """No caps, and vLLM's own budget: the state between two steps."""
        self._caps = None
        self._queues.max_num_scheduled_tokens = self._max_tokens

    @property
    def num_caps(self) -> int:
        """Requests capped now: those of the imposed plan, 0 between steps."""
        return len(self._caps) if self._caps is not None else 0
