"""A KV cache that keeps computed blocks for the requests that share them: vLLM's prefix cache.

Every full block of a request whose content is known (`Request.content`) is cached under
its chain key (`core/prefix.py`) once computed, prompt or output alike. A request that has
not started finds its *hit*: the leading blocks of its tokens whose keys are resident, at
most its prefill target less one token (vLLM always computes the last token, whose logits
it needs), block by block. It starts with those tokens computed and shares their blocks.

A block is *resident* while its key is in the cache: held by one or more requests, or
free but not yet reused. Freed blocks join the free pool in least-recently-used order, a
request's tail first, so that its prefix outlives its tail (vLLM's order); taking a block
from the pool evicts its key. So the cache competes with running requests for the same
blocks and `num_free` counts the free blocks that still hold a key, as vLLM's does.

What a policy reads stays exact: for a request that has not started, `held` is the number
of its hit blocks that running requests already hold (those cost nothing to share), so
`extra_blocks` charges the hit blocks that leave the free pool plus the new ones. Hits are
read without changing anything (`lookup`); they take effect when the request's first chunk
is allocated, before any other allocation of that iteration, so that no allocation of the
same step evicts a hit it relies on. A request without known content shares nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from slidingserve.core.kv_blocks import KVBlockManager
from slidingserve.core.prefix import block_keys
from slidingserve.core.prefix_lookups import KeptHits

if TYPE_CHECKING:
    from collections.abc import Iterable

    from slidingserve.core.request import Request


class PrefixCachingKV(KVBlockManager):
    """`KVBlockManager` with a prefix cache (module docstring). `lookup` before planning;
    `queried_tokens` and `hit_tokens` count the prefill targets of started requests and
    the tokens their hits saved, as vLLM's prefix-cache statistics do."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._tables: dict[str, list[int | None]] = {}  # held blocks: key, or None (uncached)
        self._keys: dict[str, list[int]] = {}  # each request's block keys, by request id
        self._refs: dict[int, int] = {}  # resident keys: how many requests hold each
        self._pool: OrderedDict[int, None] = OrderedDict()  # free resident keys, LRU first
        self._plain_free = num_blocks  # free blocks without a key
        self._hits = KeptHits()  # the waiting requests' hits (`prefix_lookups.py`)
        self._registrations = 0  # keys cached so far: a kept hit may grow when this does
        self._holder_changes = 0  # keys whose holders went from none to some or back
        self.queried_tokens = 0
        self.hit_tokens = 0

    # -- reading -----------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        """Free blocks, those still holding a cached key among them."""
        return self._plain_free + len(self._pool)

    def held(self, request: Request) -> int:
        table = self._tables.get(request.request_id)
        if table is not None:
            return len(table)
        return self._shared_hit_blocks(request)

    def lookup(self, request: Request) -> int:
        """Tokens of `request`'s prefill target already resident (a block multiple, at most
        the target less one); 0 without content or once it holds blocks. Changes nothing
        a policy or the engine could see."""
        request_id, target = request.request_id, request.prefill_target
        hit = self._hits.get(request_id)
        if hit is not None and hit.registrations == self._registrations and hit.target == target:
            return hit.blocks * self.block_size  # nothing cached since; evictions cut it
        if not request.content or request_id in self._tables:
            return 0
        keys = self._keys_of(request)
        if hit is None:
            hit = self._hits.keep(request_id, keys, self._registrations, target)
        most = min(len(keys), (target - 1) // self.block_size)
        blocks, refs = min(hit.blocks, most), self._refs
        while blocks < most and keys[blocks] in refs:
            blocks += 1
        hit.blocks, hit.registrations, hit.target = blocks, self._registrations, target
        return blocks * self.block_size

    def resident_prefix(self, request: Request) -> int:
        """What `lookup` would find for a request this cache has not seen, without keeping
        anything (a router asks every replica's cache about a request only one serves)."""
        if not request.content or request.request_id in self._tables:
            return 0
        keys = block_keys(request.content, self.block_size)
        most = min(len(keys), (request.prefill_target - 1) // self.block_size)
        blocks, refs = 0, self._refs
        while blocks < most and keys[blocks] in refs:
            blocks += 1
        return blocks * self.block_size

    def _shared_hit_blocks(self, request: Request) -> int:
        """Hit blocks of a request that has not started that running requests hold, as of
        its last `lookup` (0 if its computed tokens are not that hit); counted again only
        after a change."""
        hit = self._hits.get(request.request_id)
        if hit is None or request.num_computed != hit.blocks * self.block_size:
            return 0
        stamp = (hit.blocks, self._holder_changes)
        if hit.shared_stamp != stamp:
            refs = self._refs
            hit.shared = sum(1 for key in self._keys_of(request)[: hit.blocks] if refs[key])
            hit.shared_stamp = stamp
        return hit.shared

    def extra_blocks(self, request: Request, new_tokens: int) -> int:
        needed = -(-(request.num_computed + new_tokens) // self.block_size)
        extra = needed - self.held(request)
        return extra if extra > 0 else 0

    def next_token_blocks(self, requests: Iterable[Request]) -> int:
        return sum(self.extra_blocks(request, 1) for request in requests)

    def extra_blocks_each(self, growths: Iterable[tuple[Request, int]]) -> int:
        return sum(self.extra_blocks(request, tokens) for request, tokens in growths)

    # -- changing ----------------------------------------------------------------------

    def grow_each(self, growths: Iterable[tuple[Request, int]]) -> None:
        """Allocate each growth in turn, after every starting request has taken its hit."""
        growths = list(growths)
        for request, _ in growths:
            if request.request_id not in self._tables:
                self._start(request)
        for request, new_tokens in growths:
            self._grow(request, new_tokens)

    def free(self, request: Request) -> None:
        table = self._tables.pop(request.request_id, None)
        self._forget_hit(request)
        if table is None:
            return
        refs, pool = self._refs, self._pool
        for key in reversed(table):  # the tail first: evicted before the prefix
            if key is None:
                self._plain_free += 1
                continue
            refs[key] -= 1
            if not refs[key]:
                pool[key] = None
                self._holder_changes += 1

    def _start(self, request: Request) -> None:
        """Share `request`'s hit (its computed tokens, read by `lookup`) and count it."""
        hit = request.num_computed // self.block_size
        if request.num_computed % self.block_size:
            raise RuntimeError(
                f"request {request.request_id} starts at {request.num_computed} computed "
                f"tokens, not a hit of whole blocks"
            )
        keys = self._keys_of(request) if hit else []
        table: list[int | None] = []
        refs, pool = self._refs, self._pool
        for key in keys[:hit]:
            if key not in refs:
                raise RuntimeError(
                    f"request {request.request_id}: a hit block was evicted before it started"
                )
            if not refs[key]:
                del pool[key]
                self._holder_changes += 1
            refs[key] += 1
            table.append(key)
        self._tables[request.request_id] = table
        self._forget_hit(request)
        self.queried_tokens += request.prefill_target
        self.hit_tokens += request.num_computed

    def _grow(self, request: Request, new_tokens: int) -> None:
        table = self._tables[request.request_id]
        computed = request.num_computed + new_tokens
        extra = -(-computed // self.block_size) - len(table)
        if extra > self.num_free:
            raise RuntimeError(
                f"KV over-commit: request {request.request_id} needs {extra} blocks, "
                f"{self.num_free} free"
            )
        for _ in range(extra):
            self._take_block()
            table.append(None)
        if request.content:
            self._cache_full_blocks(request, table, computed)

    def _take_block(self) -> None:
        if self._plain_free:
            self._plain_free -= 1
            return
        key, _ = self._pool.popitem(last=False)  # the least recently used
        del self._refs[key]
        self._hits.evicted(key)

    def _cache_full_blocks(self, request: Request, table: list[int | None], computed: int) -> None:
        """Give a key to each block that became full, unless another block holds it."""
        keys = self._keys_of(request)
        first = request.num_computed // self.block_size  # before this growth
        refs = self._refs
        for index in range(first, min(computed // self.block_size, len(keys))):
            if table[index] is None and keys[index] not in refs:
                refs[keys[index]] = 1
                table[index] = keys[index]
                self._registrations += 1

    def _forget_hit(self, request: Request) -> None:
        """Stop keeping the hit of a request that starts or leaves."""
        if self._hits.get(request.request_id) is not None:
            self._hits.forget(request.request_id, self._keys_of(request))

    def _keys_of(self, request: Request) -> list[int]:
        keys = self._keys.get(request.request_id)
        if keys is None:
            keys = self._keys[request.request_id] = block_keys(request.content, self.block_size)
        return keys
