"""Lost requests first when the KV cache runs short (option `preempt_lost_first`).

A preemption by recompute throws away a request's cache. vLLM takes the newest request,
the one with the least work sunk in it. Where the cache binds and the load is past the
goodput, that victim is often a request still on time, which then misses its deadline,
while requests already lost (their next token's deadline has passed: they are violations
whatever happens) keep their blocks. Moore and Hodgson's argument, applied to memory:
the lost request with the most cached tokens goes first, since it frees the most blocks
and preempting it makes no request late that was not late already; with none lost, the
engine's own victim.

The simulator asks the policy for the victim (`Policy.preemption_victim`). vLLM takes the
tail of its running list, which the adapter orders as the plan, so the plan puts the lost
requests last, by cached tokens: both engines take the same victim while any is lost
(docs/design.md §12).
"""

from __future__ import annotations

from collections.abc import Sequence

from slidingserve.core.plan import Plan, ScheduledChunk
from slidingserve.core.request import Request


def lost_first_victim(running: Sequence[Request], now: float) -> Request:
    """The lost request with the most cached tokens (the later one on a tie), else the
    newest."""
    victim: Request | None = None
    for request in running:
        if request.next_deadline <= now and (
            victim is None or request.num_computed >= victim.num_computed
        ):
            victim = request
    return victim if victim is not None else running[-1]


def put_lost_last(plan: Plan, now: float) -> None:
    """Reorder `plan` so that its lost requests come last, by cached tokens ascending, the
    live ones keeping their order: vLLM preempts from the tail."""
    # `Request.next_deadline` written out, in one pass over the chunks
    lost = [
        chunk
        for chunk in plan.chunks
        if (r := chunk[0]).arrival + (slo := r.slo).ttft + r.num_generated * slo.tbt <= now
    ]
    if not lost:
        return
    lost_ids = {id(chunk) for chunk in lost}
    live = [chunk for chunk in plan.chunks if id(chunk) not in lost_ids]
    plan.chunks = live + sorted(lost, key=_cached_tokens)


def _cached_tokens(chunk: ScheduledChunk) -> int:
    return chunk.request.num_computed
