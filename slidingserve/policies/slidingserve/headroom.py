"""KV headroom for the decodes (option `kv_headroom`).

When the KV cache runs short, the engine preempts a running request to give a decode the
block of its next token. A policy that fills the free blocks with prefill chunks leaves
the decodes nothing to grow into, and a few iterations later one of them is preempted and
its work recomputed. With this option the blocks the running decodes will add over their
next `kv_headroom` tokens are kept from prefills, as the blocks of their next token always
are (`PlanBuilder`): a prefill chunk, new or running, takes only what lies beyond them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slidingserve.core.view import SchedulerView

TIGHT_CACHE_TOKENS = 32  # growth of each decode `cache_is_tight` reads, at least
# `tight_cache_cap` applies only where the decodes alone take at most this share of the
# tightest TBT, so that an iteration capped near one TBT still leaves the prefill room
TIGHT_DECODE_SHARE = 0.5


def with_headroom(view: SchedulerView, tokens: int) -> SchedulerView:
    """`view` with the blocks its decodes add over the `tokens` (> 0) tokens after their
    next one added to those kept for their next token (`decode_blocks`)."""
    kv = view.kv
    block_size, held = kv.block_size, kv.held
    if kv.num_free >= _most_blocks_needed(view, tokens):
        return view  # no chunk can reach the headroom: the plan is the same without it
    growth = 0
    for request in view.decoding:
        next_token = -(-(request.num_computed + 1) // block_size)
        later = -(-(request.num_computed + 1 + tokens) // block_size)
        growth += max(0, later - max(next_token, held(request)))
    if growth <= 0:
        return view
    return dataclasses.replace(view, decode_blocks=view.decode_reserve() + growth)


def cache_is_tight(view: SchedulerView, tokens: int) -> bool:
    """Whether some plan could take blocks the decodes' next `tokens` tokens would need:
    fewer blocks free than `_most_blocks_needed`."""
    return view.kv.num_free < _most_blocks_needed(view, tokens)


def _most_blocks_needed(view: SchedulerView, tokens: int) -> int:
    """More blocks than the decodes' next token and headroom and any plan's prefill chunks
    can take together: each decode at most ⌈(tokens + 1)/s⌉ + 1, the chunks of at most
    `max_num_batched_tokens` tokens at most ⌈B/s⌉ + 1 each beside that, and a waiting
    request's prefix-cache hit whole (its blocks may sit among the free ones until it
    starts)."""
    limits, block_size = view.limits, view.kv.block_size
    per_decode = -(-(tokens + 1) // block_size) + 1
    budget = limits.max_num_batched_tokens
    chunks = min(limits.max_num_seqs, budget)
    hits = sum(-(-r.num_computed // block_size) for r in view.waiting if r.num_computed)
    return len(view.decoding) * per_decode + -(-budget // block_size) + chunks + 1 + hits
