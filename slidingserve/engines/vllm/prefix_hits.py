"""Prefix-cache hits read as vLLM's scheduler will find them, before the policy plans.

vLLM 0.32 looks up a waiting request's hit only when it schedules the request: the leading
full blocks of its tokens already in the cache, at most its tokens less one (the last
token's logits are needed), and the request starts with them computed. A policy that plans
without them would ask for tokens that are never computed and every plan with a hit would
mismatch. So before each plan `PrefixHits.read` finds every waiting request's hit the same
way, through the KV coordinator's `find_longest_cache_hit`, which changes nothing (no
block touched, no statistic or KV event recorded: those come when vLLM admits it), and
sets the mirror's computed tokens to it, as the simulator's view does
(`core/prefix_cache.py`).

It also says how many of a hit's blocks running requests already hold: sharing those costs
no free block, while a hit block that is free but still cached leaves the free pool when the
request starts, so `VllmKV.held` counts only the former for a waiting request. Allocations
earlier in the same step can still evict a hit read here (vLLM then computes fewer tokens
than planned: a plan mismatch, counted); a request that holds KV already (a KV transfer)
is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple


class Hit(NamedTuple):
    """A waiting request's hit: tokens found, and how many of its blocks are held."""

    tokens: int
    shared_blocks: int


NO_HIT = Hit(0, 0)


def find_hit(kv_cache_manager: Any, request: Any) -> Hit:
    """`request`'s hit in vLLM's cache as `get_computed_blocks` would find it now."""
    if request.num_computed_tokens or not kv_cache_manager.prefix_cache_lookup_enabled(request):
        return NO_HIT
    blocks, tokens, _ = kv_cache_manager.coordinator.find_longest_cache_hit(
        request.block_hashes, request.num_tokens - 1
    )
    if not tokens:
        return NO_HIT
    return Hit(int(tokens), sum(1 for block in blocks[0] if block.ref_cnt > 0))


class PrefixHits:
    """The hits of the requests waiting at the latest plan, by request id."""

    def __init__(self) -> None:
        self._hits: dict[str, Hit] = {}

    def read(self, kv_cache_manager: Any, waiting: Iterable[Any]) -> dict[str, int]:
        """Find the hit of each of `waiting` (vLLM's requests); their tokens by id, for
        the requests that have one."""
        self._hits = {
            request.request_id: hit
            for request in waiting
            if (hit := find_hit(kv_cache_manager, request)).tokens
        }
        return {request_id: hit.tokens for request_id, hit in self._hits.items()}

    def clear(self) -> None:
        """Forget the hits (after vLLM scheduled the step they were read for)."""
        self._hits = {}

    def shared_blocks(self, request_id: str) -> int:
        """Blocks of `request_id`'s hit that running requests hold (0 without a hit)."""
        return self._hits.get(request_id, NO_HIT).shared_blocks

    def __len__(self) -> int:
        return len(self._hits)
