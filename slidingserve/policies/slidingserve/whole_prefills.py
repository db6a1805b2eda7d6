"""Whole prefills only (option `whole_prefills`).

vLLM starts a waiting request as soon as its first chunk fits in the free KV blocks, and
the simulator's `PlanBuilder` does the same. Where the cache is full, a long prompt then
starts with one chunk, holds its blocks, and waits for more blocks before its next
chunk: while it waits it emits nothing and keeps blocks the decodes need to grow, so a
decode is preempted and recomputed. Measured on the A100 with 40% of its memory and
ShareGPT past the goodput, a fifth of the cache sat in such half-done prefills.

With this option a waiting request starts only when the blocks of its whole prefill fit
beside what is spoken for: the decodes' reserve (their next token and the KV headroom)
and the blocks the prefills already started still need to finish. A waiting request's
prefix-cache hit is counted whole, as blocks it takes (they may sit among the free ones
until it starts). The queue keeps its order; the first waiting request that does not fit
stops the starts for the step, as vLLM's admission does, and the requests already started
keep their places.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slidingserve.core.request import WAITING

if TYPE_CHECKING:
    from slidingserve.core.request import Request
    from slidingserve.core.view import KVView, SchedulerView


def startable_queue(queue: list[Request], view: SchedulerView) -> list[Request]:
    """`queue` (a prefill queue in the policy's order) without the waiting requests that
    may not start this step (module docstring); `queue` itself when every one may.

    A request whose prefill would not fit even in an idle cache still starts when nothing
    else runs or is kept ahead of it, so that the engine never stalls on it. The walk stops
    once the requests kept ahead hold more prefill than a step can run: no later request
    can start this step, whatever its size.
    """
    kv = view.kv
    room = kv.num_free - view.decode_reserve()
    for request in view.prefilling:
        room -= blocks_to_finish(request, kv)
    step_tokens = view.limits.max_num_batched_tokens
    busy = bool(view.decoding or view.prefilling)
    ahead = 0  # prefill tokens of the requests kept so far
    for position, request in enumerate(queue):
        if ahead >= step_tokens:
            return queue
        if request.phase is WAITING:
            blocks = blocks_to_finish(request, kv)
            if blocks > room and (busy or position):
                return starts_stopped_at(queue, position)
            room -= blocks
        ahead += request.remaining_prefill
    return queue


def starts_stopped_at(queue: list[Request], position: int) -> list[Request]:
    """`queue` without its waiting requests from `position` on: the first waiting request
    a start rule refuses stops the starts for the step, as vLLM's admission does, and the
    requests already started keep their places."""
    return queue[:position] + [r for r in queue[position:] if r.phase is not WAITING]


def blocks_to_finish(request: Request, kv: KVView) -> int:
    """Blocks `request` still has to take to hold its whole prefill target."""
    return max(0, -(-request.prefill_target // kv.block_size) - kv.held(request))
