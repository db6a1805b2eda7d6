"""`prefix_hits.HitMemo` with stand-ins for vLLM's cache: a remembered hit is looked up
again exactly when an entry its lookup reads changes, and never otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slidingserve.engines.vllm.prefix_hits import Hit, HitMemo, PrefixHits

BLOCK = 4


@dataclass
class Block:
    block_id: int
    ref_cnt: int = 0


class SlottedMap:
    """vLLM's cache map, as far as the memo touches it: `insert` and `pop` change it. With
    slots and no `__dict__`, its methods cannot be replaced on the instance."""

    __slots__ = ("cache",)

    def __init__(self) -> None:
        self.cache: dict[bytes, Block] = {}

    def insert(self, key: bytes, block: Block) -> None:
        self.cache[key] = block

    def pop(self, key: bytes, block_id: int) -> Block | None:
        return self.cache.pop(key, None)


class BlockHashToBlockMap(SlottedMap):
    """The same map with an instance `__dict__`, as vLLM's has: the memo can watch it."""


@dataclass
class BlockPool:
    hash_block_size: int = BLOCK
    cached_block_hash_to_block: BlockHashToBlockMap = field(default_factory=BlockHashToBlockMap)


class FullAttentionManager:
    """Named as vLLM's manager of full attention: the memo remembers its hits."""


class UnitaryKVCacheCoordinator:
    """A longest-prefix lookup over the pool's map, counting its calls."""

    def __init__(self, pool: BlockPool) -> None:
        self.block_pool = pool
        self.block_size = BLOCK
        self.dcp_world_size = 1
        self.single_type_managers = [FullAttentionManager()]
        self.calls = 0

    def find_longest_cache_hit(
        self, block_hashes: list[bytes], max_length: int
    ) -> tuple[tuple[list[Block]], int, int]:
        self.calls += 1
        blocks: list[Block] = []
        for block_hash in block_hashes[: max_length // BLOCK]:
            block = self.block_pool.cached_block_hash_to_block.cache.get(key_of(block_hash))
            if block is None:
                break
            blocks.append(block)
        return (blocks,), len(blocks) * BLOCK, 0


class HybridKVCacheCoordinator(UnitaryKVCacheCoordinator):
    """Another layout: looked up at every read."""


class KVCacheManager:
    def __init__(self, coordinator: UnitaryKVCacheCoordinator) -> None:
        self.coordinator = coordinator

    def prefix_cache_lookup_enabled(self, request: Any) -> bool:
        return not request.skip_reading_prefix_cache


@dataclass
class EngineRequest:
    request_id: str
    block_hashes: list[bytes]
    num_tokens: int
    num_computed_tokens: int = 0
    skip_reading_prefix_cache: bool = False


def key_of(block_hash: bytes) -> bytes:
    return block_hash + b"\x00\x00\x00\x00"


def hashes(family: str, count: int) -> list[bytes]:
    return [f"{family}{k}".encode() for k in range(count)]


def cached(pool: BlockPool, block_hashes: list[bytes], first_id: int = 0) -> list[Block]:
    blocks = [Block(first_id + k) for k in range(len(block_hashes))]
    for block_hash, block in zip(block_hashes, blocks, strict=True):
        pool.cached_block_hash_to_block.insert(key_of(block_hash), block)
    return blocks


class Scene:
    """A pool whose map caches the first `blocks` hashes of family "a", its coordinator
    (`coordinator_class`) and a memo."""

    def __init__(
        self, blocks: int, coordinator_class: type = UnitaryKVCacheCoordinator, **map_: Any
    ) -> None:
        self.pool = BlockPool(**map_)
        self.coordinator: UnitaryKVCacheCoordinator = coordinator_class(self.pool)
        self.manager = KVCacheManager(self.coordinator)
        self.memo = HitMemo(key_of)
        self.blocks = cached(self.pool, hashes("a", blocks))

    def read(self, *requests: EngineRequest) -> dict[str, Hit]:
        return self.memo.hits(self.manager, requests)

    def evict(self, index: int) -> None:
        """Pop the cached block of family "a" at `index` (block id `index`)."""
        self.pool.cached_block_hash_to_block.pop(key_of(hashes("a", index + 1)[index]), index)

    @property
    def calls(self) -> int:
        return self.coordinator.calls


def waiting(block_hashes: int, tokens: int, family: str = "a", name: str = "r") -> EngineRequest:
    """A waiting request `name` of `tokens` tokens with `block_hashes` hashes of `family`."""
    return EngineRequest(name, hashes(family, block_hashes), num_tokens=tokens)


def test_a_hit_is_looked_up_once_while_nothing_it_reads_changes() -> None:
    scene = Scene(3)
    request = waiting(5, 21)  # 5 hashes, 20 tokens read
    first = scene.read(request)
    assert first["r"].tokens == 12 and list(first["r"].blocks) == scene.blocks
    cached(scene.pool, hashes("other", 4), first_id=10)  # keys no lookup of "r" reads
    for _ in range(3):
        assert scene.read(request) == first
    assert scene.calls == 1 and scene.memo.lookups == 1


def test_a_block_cached_after_the_hit_extends_it_at_the_next_read() -> None:
    scene, request = Scene(2), waiting(5, 21)
    assert scene.read(request)["r"].tokens == 8
    scene.pool.cached_block_hash_to_block.insert(key_of(hashes("a", 3)[2]), Block(7))
    assert scene.read(request)["r"].tokens == 12
    assert scene.calls == 2


def test_a_hit_block_evicted_shortens_the_hit() -> None:
    scene, request = Scene(4), waiting(5, 21)
    assert scene.read(request)["r"].tokens == 16
    scene.evict(1)
    assert scene.read(request)["r"].tokens == 4
    scene.evict(0)
    assert scene.read(request) == {}  # no hit: not listed
    assert scene.calls == 3


def test_a_key_past_what_the_lookup_reads_changes_nothing() -> None:
    scene, request = Scene(2), waiting(5, 9)  # (9 − 1) // 4: two hashes read
    assert scene.read(request)["r"].tokens == 8
    cached(scene.pool, hashes("a", 5)[2:], first_id=2)
    assert scene.read(request)["r"].tokens == 8
    assert scene.calls == 1


def test_a_request_with_more_tokens_is_looked_up_again() -> None:
    scene, request = Scene(4), waiting(2, 9)
    assert scene.read(request)["r"].tokens == 8
    request.block_hashes, request.num_tokens = hashes("a", 4), 17  # preempted with its output
    assert scene.read(request)["r"].tokens == 16
    assert scene.calls == 2


def test_a_new_cache_map_forgets_every_hit() -> None:
    scene, request = Scene(2), waiting(3, 13)
    assert scene.read(request)["r"].tokens == 8
    scene.pool.cached_block_hash_to_block = BlockHashToBlockMap()  # vLLM's reset_prefix_cache
    assert scene.read(request) == {}
    cached(scene.pool, hashes("a", 1))  # the new map is watched in turn
    assert scene.read(request)["r"].tokens == 4
    assert scene.calls == 3


def test_a_request_not_waiting_at_a_read_is_forgotten() -> None:
    scene = Scene(2)
    one, two = (waiting(3, 13, name=name) for name in "12")
    scene.read(one, two)
    scene.read(two)  # "1" was admitted
    assert len(scene.memo) == 1
    scene.evict(0)
    scene.read(two)
    assert scene.read(one) == {}  # looked up afresh, not from before the change
    scene.memo.forget()
    assert len(scene.memo) == 0


def test_requests_that_skip_the_cache_or_hold_tokens_have_no_hit_and_no_lookup() -> None:
    scene = Scene(2)
    skips = EngineRequest("s", hashes("a", 3), num_tokens=13, skip_reading_prefix_cache=True)
    holds = EngineRequest("h", hashes("a", 3), num_tokens=13, num_computed_tokens=4)
    assert scene.read(skips, holds) == {}
    assert scene.calls == 0 and len(scene.memo) == 0


def test_another_cache_layout_is_looked_up_at_every_read() -> None:
    scene, request = Scene(2, HybridKVCacheCoordinator), waiting(3, 13)
    for _ in range(3):
        assert scene.read(request)["r"].tokens == 8
    assert scene.calls == 3 and len(scene.memo) == 0


def test_shared_blocks_count_the_hit_blocks_held_when_asked() -> None:
    scene = Scene(3)
    hits = PrefixHits(key_of)
    assert hits.read(scene.manager, [waiting(4, 17)]) == {"r": 12}
    assert hits.shared_blocks("r") == 0
    scene.blocks[0].ref_cnt, scene.blocks[2].ref_cnt = 1, 2  # running requests took two
    assert hits.shared_blocks("r") == 2 and hits.shared_blocks("unknown") == 0
    hits.clear()
    assert hits.shared_blocks("r") == 0 and len(hits) == 0


def test_a_map_that_cannot_be_watched_is_looked_up_at_every_read() -> None:
    scene, request = Scene(2, cached_block_hash_to_block=SlottedMap()), waiting(3, 13)
    for _ in range(2):
        assert scene.read(request)["r"].tokens == 8
    assert scene.calls == 2 and len(scene.memo) == 0


def test_a_new_request_under_an_old_id_is_looked_up() -> None:
    scene = Scene(2)
    assert scene.read(waiting(3, 13))["r"].tokens == 8
    assert scene.read(waiting(3, 13, family="b")) == {}  # aborted, then its id reused
    assert scene.calls == 2


def test_other_tokens_with_the_same_counts_are_looked_up() -> None:
    scene, request = Scene(2), waiting(3, 13)
    assert scene.read(request)["r"].tokens == 8
    request.block_hashes[:] = hashes("b", 3)  # rewritten in place, as vLLM's sessions do
    assert scene.read(request) == {}
    assert scene.calls == 2
