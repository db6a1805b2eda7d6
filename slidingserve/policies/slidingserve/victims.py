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
(docs/design.md §8.2).

With `preempt_most_slack` the victim, when no lost request runs (or with
`preempt_lost_first` off), is the running request with the most slack before its next
token's deadline, instead of the newest. Deadlines accumulate (docs/design.md §1): a
request that decoded faster than its TBT has banked the difference, and one that got its
first token early keeps the rest of its TTFT. Such a request can lose its cache, wait for
blocks and recompute, and still make its next deadline, where the newest request, started
late because the cache was full, has little slack to lose. The plan then orders its
running requests so that vLLM's tail is the same victim: only at a step where the cache
may run short, as that order costs a sort (`order_for_preemption`). Two differences stay:
a running request the plan leaves out (a prefill whose next chunk found no block, a
yielded decode) goes behind the planned ones in vLLM and is preempted there first, and a
tie goes to the later request in the plan's order there, in admission order here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slidingserve.core.request import WAITING, next_deadlines

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.plan import Plan, ScheduledChunk
    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView


def lost_first_victim(running: Sequence[Request], now: float, most_slack: bool = False) -> Request:
    """The lost request with the most cached tokens (the later one on a tie), else the
    newest, or with `most_slack` the one with the most slack (`most_slack_victim`)."""
    victim: Request | None = None
    for request in running:
        if request.next_deadline <= now and (
            victim is None or request.num_computed >= victim.num_computed
        ):
            victim = request
    if victim is not None:
        return victim
    return most_slack_victim(running) if most_slack else running[-1]


def most_slack_victim(running: Sequence[Request]) -> Request:
    """The request of `running` whose next token's deadline is the latest (the most slack
    at any `now`; the later one in `running` on a tie, as the newest would be)."""
    deadlines = next_deadlines(running)
    latest = max(deadlines)
    last = len(deadlines) - 1 - deadlines[::-1].index(latest)
    return running[last]


def may_preempt(view: SchedulerView) -> bool:
    """Whether the engine may have to preempt at the step of `view`: the decodes' next
    tokens need more blocks than are free. Fewer free blocks than decodes is tested
    first, as it is cheap and without it no decode can lack a block."""
    free = view.kv.num_free
    return free < len(view.decoding) and view.decode_reserve() > free


def order_for_preemption(plan: Plan, now: float, lost_first: bool) -> None:
    """Reorder `plan` so that vLLM, preempting from the tail of its running list, takes the
    victims in the order of `most_slack_victim` (after the lost requests, by cached tokens,
    with `lost_first`): the running requests by next deadline ascending, the plan's order
    on a tie. The waiting requests it starts keep their order among themselves (vLLM
    admits them in it, from its own queue), but for the lost ones with `lost_first`."""
    chunks = plan.chunks
    running = [chunk for chunk in chunks if chunk[0].phase is not WAITING]
    deadlines = next_deadlines([chunk[0] for chunk in running])
    order = sorted(range(len(running)), key=deadlines.__getitem__)
    starting = [chunk for chunk in chunks if chunk[0].phase is WAITING]
    plan.chunks = [running[i] for i in order] + starting
    if lost_first:
        put_lost_last(plan, now)


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
