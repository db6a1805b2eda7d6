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

if TYPE_CHECKING:
    from collections.abc import Iterable

    from slidingserve.core.request import Request


_NOT_LOOKED = (0, -1, -1, -1)  # a lookup's stamp before the first
_EVICTION_LOG = 1 << 16  # evicted keys kept before the oldest ones no lookup needs go


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
        # Changes that a lookup depends on, counted: a lookup is reused while they stand
        self._evicted: list[int] = []  # the keys evicted, in order (a hit may shrink), but
        self._evicted_before = 0  # the first ones, that no lookup needs any more
        self._registrations = 0  # keys cached (a hit may grow)
        self._ref_changes = 0  # keys whose holders went from none to some or back
        # id -> (hit, evictions, registrations, prefill target) at its last lookup
        self._looked: dict[str, tuple[int, int, int, int]] = {}
        self._shared: dict[str, tuple[int, int, int, int]] = {}  # id -> (hit, evictions,
        # ref changes, shared blocks)
        self._positions: dict[str, dict[int, int]] = {}  # id -> its keys' positions
        self.queried_tokens = 0
        self.hit_tokens = 0

    # -- reading -----------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        return self._plain_free + len(self._pool)

    @num_free.setter
    def num_free(self, value: int) -> None:
        """The base class sets it once in `__init__`; every later count comes from the pool."""

    def held(self, request: Request) -> int:
        table = self._tables.get(request.request_id)
        if table is not None:
            return len(table)
        return self._looked_shared(request)

    def lookup(self, request: Request) -> int:
        """Tokens of `request`'s prefill target already resident (a block multiple, at most
        the target less one); 0 without content or once it holds blocks. Changes nothing."""
        request_id, target = request.request_id, request.prefill_target
        hit, evictions, registrations, looked_target = self._looked.get(request_id, _NOT_LOOKED)
        unchanged = evictions == self._evictions and registrations == self._registrations
        if unchanged and looked_target == target:
            return hit * self.block_size  # nothing came or went since
        if not request.content or request_id in self._tables:
            return 0
        keys = self._keys_of(request)
        if evictions != self._evictions:
            hit = self._still_cached(request_id, keys, hit, evictions)
        most = min(len(keys), (target - 1) // self.block_size)
        hit = min(hit, most)
        refs = self._refs
        while hit < most and keys[hit] in refs:
            hit += 1
        self._looked[request_id] = (hit, self._evictions, self._registrations, target)
        return hit * self.block_size

    def _still_cached(self, request_id: str, keys: list[int], hit: int, evictions: int) -> int:
        """How much of a hit of `hit` blocks, found when `evictions` keys had been evicted,
        is left: up to the first of its keys evicted since (none without a lookup since the
        evictions still kept)."""
        if evictions < self._evicted_before:
            return 0  # never looked up, or too long ago: start over
        positions = self._positions.get(request_id)
        if positions is None:
            positions = self._positions[request_id] = {key: i for i, key in enumerate(keys)}
        for key in self._evicted[evictions - self._evicted_before :]:
            position = positions.get(key)
            if position is not None and position < hit:
                hit = position
        return hit

    def _looked_shared(self, request: Request) -> int:
        """Hit blocks of a request that has not started that running requests hold, as of its
        last `lookup` (0 if its computed tokens are not that hit); counted when first asked
        for after a change."""
        looked = self._looked.get(request.request_id)
        if looked is None or looked[1] != self._evictions:
            return 0
        hit = looked[0]
        if request.num_computed != hit * self.block_size:
            return 0
        stamp = (hit, self._evictions, self._ref_changes)
        cached = self._shared.get(request.request_id)
        if cached is not None and cached[:3] == stamp:
            return cached[3]
        refs = self._refs
        shared = sum(1 for key in self._keys_of(request)[:hit] if refs[key])
        self._shared[request.request_id] = (*stamp, shared)
        return shared

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
        self._forget_lookups(request.request_id)
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
                self._ref_changes += 1

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
                self._ref_changes += 1
            refs[key] += 1
            table.append(key)
        self._tables[request.request_id] = table
        self._forget_lookups(request.request_id)
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
        self._evicted.append(key)
        if len(self._evicted) > _EVICTION_LOG:
            self._trim_evictions()

    def _trim_evictions(self) -> None:
        """Forget the older half of the evictions: a waiting request is looked up at every
        step, so hardly any lookup needs them (one that does starts over)."""
        drop = len(self._evicted) // 2
        del self._evicted[:drop]
        self._evicted_before += drop

    @property
    def _evictions(self) -> int:
        return self._evicted_before + len(self._evicted)

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

    def _forget_lookups(self, request_id: str) -> None:
        """Drop what lookups kept of a request that starts or leaves."""
        self._looked.pop(request_id, None)
        self._shared.pop(request_id, None)
        self._positions.pop(request_id, None)

    def _keys_of(self, request: Request) -> list[int]:
        keys = self._keys.get(request.request_id)
        if keys is None:
            keys = self._keys[request.request_id] = block_keys(request.content, self.block_size)
        return keys
