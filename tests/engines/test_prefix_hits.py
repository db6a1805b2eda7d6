"""`prefix_hits.HitMemo` with stand-ins for vLLM's cache: a remembered hit is looked up
again exactly when an entry its lookup reads changes, and never otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slidingserve.engines.vllm.prefix_hits import HitMemo, PrefixHits

BLOCK = 4


@dataclass
class Block:
    block_id: int
    ref_cnt: int = 0


class BlockHashToBlockMap:
    """vLLM's cache map, as far as the memo touches it: `insert` and `pop` change it."""

    def __init__(self) -> None:
        self.cache: dict[bytes, Block] = {}

    def insert(self, key: bytes, block: Block) -> None:
        self.cache[key] = block

    def pop(self, key: bytes, block_id: int) -> Block | None:
        return self.cache.pop(key, None)


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


def setup(coordinator_class: type = UnitaryKVCacheCoordinator) -> tuple[Any, Any, HitMemo]:
    pool = BlockPool()
    coordinator = coordinator_class(pool)
    return pool, KVCacheManager(coordinator), HitMemo(key_of)


def test_a_hit_is_looked_up_once_while_nothing_it_reads_changes() -> None:
    pool, manager, memo = setup()
    blocks = cached(pool, hashes("a", 3))
    request = EngineRequest("r", hashes("a", 5), num_tokens=21)  # 5 hashes, 20 tokens read
    first = memo.hits(manager, [request])
    assert first["r"].tokens == 12 and list(first["r"].blocks) == blocks
    cached(pool, hashes("other", 4), first_id=10)  # keys no lookup of "r" reads
    for _ in range(3):
        assert memo.hits(manager, [request]) == first
    assert manager.coordinator.calls == 1 and memo.lookups == 1


def test_a_block_cached_after_the_hit_extends_it_at_the_next_read() -> None:
    pool, manager, memo = setup()
    cached(pool, hashes("a", 2))
    request = EngineRequest("r", hashes("a", 5), num_tokens=21)
    assert memo.hits(manager, [request])["r"].tokens == 8
    pool.cached_block_hash_to_block.insert(key_of(hashes("a", 3)[2]), Block(7))
    assert memo.hits(manager, [request])["r"].tokens == 12
    assert manager.coordinator.calls == 2


def test_a_hit_block_evicted_shortens_the_hit() -> None:
    pool, manager, memo = setup()
    cached(pool, hashes("a", 4))
    request = EngineRequest("r", hashes("a", 5), num_tokens=21)
    assert memo.hits(manager, [request])["r"].tokens == 16
    pool.cached_block_hash_to_block.pop(key_of(hashes("a", 2)[1]), 1)
    assert memo.hits(manager, [request])["r"].tokens == 4
    pool.cached_block_hash_to_block.pop(key_of(hashes("a", 1)[0]), 0)
    assert memo.hits(manager, [request]) == {}  # no hit: not listed
    assert manager.coordinator.calls == 3


def test_a_key_past_what_the_lookup_reads_changes_nothing() -> None:
    pool, manager, memo = setup()
    cached(pool, hashes("a", 2))
    request = EngineRequest("r", hashes("a", 5), num_tokens=9)  # (9 − 1) // 4: two hashes read
    assert memo.hits(manager, [request])["r"].tokens == 8
    cached(pool, hashes("a", 5)[2:], first_id=2)
    assert memo.hits(manager, [request])["r"].tokens == 8
    assert manager.coordinator.calls == 1


def test_a_request_with_more_tokens_is_looked_up_again() -> None:
    pool, manager, memo = setup()
    cached(pool, hashes("a", 4))
    request = EngineRequest("r", hashes("a", 2), num_tokens=9)
    assert memo.hits(manager, [request])["r"].tokens == 8
    request.block_hashes, request.num_tokens = hashes("a", 4), 17  # preempted with its output
    assert memo.hits(manager, [request])["r"].tokens == 16
    assert manager.coordinator.calls == 2


def test_a_new_cache_map_forgets_every_hit() -> None:
    pool, manager, memo = setup()
    cached(pool, hashes("a", 2))
    request = EngineRequest("r", hashes("a", 3), num_tokens=13)
    assert memo.hits(manager, [request])["r"].tokens == 8
    pool.cached_block_hash_to_block = BlockHashToBlockMap()  # vLLM's reset_prefix_cache
    assert memo.hits(manager, [request]) == {}
    cached(pool, hashes("a", 1))  # the new map is watched in turn
    assert memo.hits(manager, [request])["r"].tokens == 4
    assert manager.coordinator.calls == 3


def test_a_request_not_waiting_at_a_read_is_forgotten() -> None:
    pool, manager, memo = setup()
    cached(pool, hashes("a", 2))
    one, two = (EngineRequest(name, hashes("a", 3), num_tokens=13) for name in "12")
    memo.hits(manager, [one, two])
    memo.hits(manager, [two])  # "1" was admitted
    assert len(memo) == 1
    pool.cached_block_hash_to_block.pop(key_of(hashes("a", 1)[0]), 0)
    memo.hits(manager, [two])
    assert memo.hits(manager, [one]) == {}  # looked up afresh, not from before the change
    memo.forget()
    assert len(memo) == 0


def test_requests_that_skip_the_cache_or_hold_tokens_have_no_hit_and_no_lookup() -> None:
    pool, manager, memo = setup()
    cached(pool, hashes("a", 2))
    skips = EngineRequest("s", hashes("a", 3), num_tokens=13, skip_reading_prefix_cache=True)
    holds = EngineRequest("h", hashes("a", 3), num_tokens=13, num_computed_tokens=4)
    assert memo.hits(manager, [skips, holds]) == {}
    assert manager.coordinator.calls == 0 and len(memo) == 0


def test_another_cache_layout_is_looked_up_at_every_read() -> None:
    pool, manager, memo = setup(HybridKVCacheCoordinator)
    cached(pool, hashes("a", 2))
    request = EngineRequest("r", hashes("a", 3), num_tokens=13)
    for _ in range(3):
        assert memo.hits(manager, [request])["r"].tokens == 8
    assert manager.coordinator.calls == 3 and len(memo) == 0


def test_shared_blocks_count_the_hit_blocks_held_when_asked() -> None:
    pool, manager, _ = setup()
    blocks = cached(pool, hashes("a", 3))
    hits = PrefixHits(key_of)
    assert hits.read(manager, [EngineRequest("r", hashes("a", 4), num_tokens=17)]) == {"r": 12}
    assert hits.shared_blocks("r") == 0
    blocks[0].ref_cnt, blocks[2].ref_cnt = 1, 2  # running requests took two of them
    assert hits.shared_blocks("r") == 2 and hits.shared_blocks("unknown") == 0
    hits.clear()
    assert hits.shared_blocks("r") == 0 and len(hits) == 0


class SlottedMap:
    """A map whose methods cannot be replaced on the instance."""

    __slots__ = ("cache",)

    def __init__(self) -> None:
        self.cache: dict[bytes, Block] = {}

    def insert(self, key: bytes, block: Block) -> None:
        self.cache[key] = block

    def pop(self, key: bytes, block_id: int) -> Block | None:
        return self.cache.pop(key, None)


def test_a_map_that_cannot_be_watched_is_looked_up_at_every_read() -> None:
    pool, manager, memo = setup()
    pool.cached_block_hash_to_block = SlottedMap()
    cached(pool, hashes("a", 2))
    request = EngineRequest("r", hashes("a", 3), num_tokens=13)
    for _ in range(2):
        assert memo.hits(manager, [request])["r"].tokens == 8
    assert manager.coordinator.calls == 2 and len(memo) == 0


def test_a_new_request_under_an_old_id_is_looked_up() -> None:
    pool, manager, memo = setup()
    cached(pool, hashes("a", 2))
    assert memo.hits(manager, [EngineRequest("r", hashes("a", 3), num_tokens=13)])["r"].tokens == 8
    again = EngineRequest("r", hashes("b", 3), num_tokens=13)  # aborted, then its id reused
    assert memo.hits(manager, [again]) == {}
    assert manager.coordinator.calls == 2


def test_other_tokens_with_the_same_counts_are_looked_up() -> None:
    pool, manager, memo = setup()
    cached(pool, hashes("a", 2))
    request = EngineRequest("r", hashes("a", 3), num_tokens=13)
    assert memo.hits(manager, [request])["r"].tokens == 8
    request.block_hashes[:] = hashes("b", 3)  # rewritten in place, as vLLM's sessions do
    assert memo.hits(manager, [request]) == {}
    assert manager.coordinator.calls == 2
