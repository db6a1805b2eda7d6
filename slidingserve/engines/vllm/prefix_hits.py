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

**Remembered hits.** A lookup walks the request's block hashes through vLLM's coordinator,
a few microseconds a block, and every waiting request is looked up at every step: with
hundreds waiting it was most of the adapter's time. With one full-attention KV cache group
(`UnitaryKVCacheCoordinator`, no decode context parallelism), the lookup reads only the
cache entries of the request's first ⌊(tokens − 1)/block size⌋ block hashes, so its answer
stands until one of those entries changes. `HitMemo` records the keys the cache inserts or
pops between two reads (through the cache map's own `insert` and `pop`, the only ways
vLLM 0.32 changes it) and looks a request up again only when one of its keys changed, its
tokens changed, or the map was replaced (`reset_prefix_cache`); otherwise it returns the
same hit, the same blocks. Other cache layouts are looked up at every step, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple


class Hit(NamedTuple):
    """A waiting request's hit: tokens found, and its blocks (vLLM's, of the one group)."""

    tokens: int
    blocks: Sequence[Any]

    @property
    def shared_blocks(self) -> int:
        """Blocks of the hit that running requests hold now."""
        return sum(1 for block in self.blocks if block.ref_cnt > 0)


NO_HIT = Hit(0, ())

KeyOf = Callable[[bytes], bytes]
"""A block hash to its key in vLLM's cache map (group 0): `make_block_hash_with_group_id`."""


def looked_up(kv_cache_manager: Any, request: Any) -> bool:
    """Whether vLLM would look `request` up: it holds no KV yet and may use the cache."""
    return not request.num_computed_tokens and bool(
        kv_cache_manager.prefix_cache_lookup_enabled(request)
    )


def find_hit(kv_cache_manager: Any, request: Any) -> Hit:
    """`request`'s hit in vLLM's cache as `get_computed_blocks` would find it now."""
    if not looked_up(kv_cache_manager, request):
        return NO_HIT
    blocks, tokens, _ = kv_cache_manager.coordinator.find_longest_cache_hit(
        request.block_hashes, request.num_tokens - 1
    )
    if not tokens:
        return NO_HIT
    return Hit(int(tokens), blocks[0])


def remembers_hits(coordinator: Any) -> bool:
    """Whether a lookup through `coordinator` reads only the entries of the request's
    leading block hashes, one group, one block size (module docstring)."""
    managers: Sequence[Any] = getattr(coordinator, "single_type_managers", ())
    return (
        type(coordinator).__name__ == "UnitaryKVCacheCoordinator"
        and len(managers) == 1
        and type(managers[0]).__name__ == "FullAttentionManager"
        and getattr(coordinator, "dcp_world_size", 1) == 1
        and coordinator.block_size == coordinator.block_pool.hash_block_size
    )


class _Remembered(NamedTuple):
    request: Any  # the engine's request object looked up (an id can be reused)
    stamp: tuple[int, int]  # its tokens and block hashes then
    last_hash: bytes | None  # the last block hash its lookup read (chained: its whole prefix)
    keys: tuple[bytes, ...]  # the cache keys its lookup could read
    hit: Hit

    def holds_for(self, request: Any, stamp: tuple[int, int], changed: set[bytes]) -> bool:
        """Whether this lookup still answers for `request` (with `stamp`) once the cache
        changed the keys `changed`."""
        if self.request is not request or self.stamp != stamp:
            return False
        if self.keys and request.block_hashes[len(self.keys) - 1] != self.last_hash:
            return False  # the same counts, other tokens
        return changed.isdisjoint(self.keys)


class HitMemo:
    """`find_hit`, remembered per request until the cache changes under it (module
    docstring); `key_of` gives a block hash's key in the cache map."""

    def __init__(self, key_of: KeyOf) -> None:
        self._key_of = key_of
        self._map: Any = None  # the cache map watched (vLLM's `cached_block_hash_to_block`)
        self._changed: set[bytes] = set()  # its keys inserted or popped since the last read
        self._remembered: dict[str, _Remembered] = {}
        self.lookups = 0  # lookups made through vLLM, for tests and benchmarks

    def hits(self, kv_cache_manager: Any, waiting: Iterable[Any]) -> dict[str, Hit]:
        """The hit of each of `waiting` (vLLM's requests) that has one, by id."""
        coordinator = kv_cache_manager.coordinator
        if not remembers_hits(coordinator) or not self._watch(
            coordinator.block_pool.cached_block_hash_to_block
        ):
            self.forget()
            return self._looked_up(kv_cache_manager, waiting)
        block_size = coordinator.block_size
        before, changed = self._remembered, self._changed
        remembered: dict[str, _Remembered] = {}
        found: dict[str, Hit] = {}
        for request in waiting:
            if not looked_up(kv_cache_manager, request):
                continue
            stamp = (request.num_tokens, len(request.block_hashes))
            entry = before.get(request.request_id)
            if entry is None or not entry.holds_for(request, stamp, changed):
                entry = self._look_up(kv_cache_manager, request, stamp, block_size)
            remembered[request.request_id] = entry
            if entry.hit.tokens:
                found[request.request_id] = entry.hit
        self._remembered = remembered  # a request not read now is looked up when it waits
        changed.clear()
        return found

    def _look_up(
        self, kv_cache_manager: Any, request: Any, stamp: tuple[int, int], block_size: int
    ) -> _Remembered:
        self.lookups += 1
        probed = request.block_hashes[: (request.num_tokens - 1) // block_size]
        keys = tuple(self._key_of(block_hash) for block_hash in probed)
        last = probed[-1] if probed else None
        return _Remembered(request, stamp, last, keys, find_hit(kv_cache_manager, request))

    def _looked_up(self, kv_cache_manager: Any, waiting: Iterable[Any]) -> dict[str, Hit]:
        found: dict[str, Hit] = {}
        for request in waiting:
            self.lookups += 1
            if (hit := find_hit(kv_cache_manager, request)).tokens:
                found[request.request_id] = hit
        return found

    def _watch(self, cache_map: Any) -> bool:
        """Record the keys `cache_map` inserts and pops; a new map (the prefix cache was
        reset) makes every remembered hit stale. False if the map cannot be watched (its
        methods cannot be replaced): every hit is then looked up."""
        if cache_map is self._map:
            return True
        self.forget()
        self._map = None
        changed = self._changed
        insert, pop = cache_map.insert, cache_map.pop

        def recording_insert(key: bytes, block: Any) -> None:
            changed.add(key)
            insert(key, block)

        def recording_pop(key: bytes, block_id: int) -> Any:
            changed.add(key)
            return pop(key, block_id)

        try:
            cache_map.insert = recording_insert
            cache_map.pop = recording_pop
        except AttributeError:  # a map with slots: nothing recorded, nothing remembered
            return False
        self._map = cache_map
        return True

    def forget(self) -> None:
        """Remember nothing (the engine holds no request)."""
        self._remembered = {}
        self._changed.clear()

    def __len__(self) -> int:
        return len(self._remembered)


class PrefixHits:
    """The hits of the requests waiting at the latest plan, by request id."""

    def __init__(self, key_of: KeyOf) -> None:
        self._hits: dict[str, Hit] = {}
        self.memo = HitMemo(key_of)

    def read(self, kv_cache_manager: Any, waiting: Iterable[Any]) -> dict[str, int]:
        """Find the hit of each of `waiting` (vLLM's requests); their tokens by id, for
        the requests that have one."""
        self._hits = self.memo.hits(kv_cache_manager, waiting)
        return {request_id: hit.tokens for request_id, hit in self._hits.items()}

    def clear(self) -> None:
        """Forget the hits (after vLLM scheduled the step they were read for); the memo
        keeps them for the next read."""
        self._hits = {}

    def shared_blocks(self, request_id: str) -> int:
        """Blocks of `request_id`'s hit that running requests hold (0 without a hit)."""
        return self._hits.get(request_id, NO_HIT).shared_blocks

    def __len__(self) -> int:
        return len(self._hits)
