"""The adapter's remembered prefix-cache hits against vLLM's own lookup, read afresh at every
step of traffic that fills, evicts and resets vLLM's real prefix cache (no model)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

vllm = pytest.importorskip("vllm")

from test_adapter_unit import run_step, steps  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm_schedulers import EOS, HASHER, make_scheduler  # noqa: E402

from slidingserve.engines.vllm.adapter import SlidingServeScheduler  # noqa: E402
from slidingserve.engines.vllm.prefix_hits import find_hit  # noqa: E402


def family_request(request_id: str, family: int, shared: int, own: int, rng: random.Random) -> Any:
    """`shared` tokens of prefix `family`, then `own` tokens of its own."""
    params = SamplingParams(max_tokens=rng.randint(2, 12), ignore_eos=True)
    params.update_from_generation_config({}, EOS)
    tokens = [10 + (family * 97 + i) % 400 for i in range(shared)]
    tokens += [500 + rng.randrange(500) for _ in range(own)]
    return Request(request_id, tokens, params, None, arrival_time=0.0, block_hasher=HASHER)


def checked(scheduler: SlidingServeScheduler) -> dict[str, int]:
    """Make each read of the hits also look every waiting request up through vLLM, and
    compare what the policy sees: the hit's tokens and its blocks held. Returns counters of
    the requests compared and of the blocks the cache evicted."""
    hits, counts = scheduler.prefix_hits, {"compared": 0, "evicted": 0}
    read = hits.read
    cache_map = scheduler.kv_cache_manager.block_pool.cached_block_hash_to_block
    pop = cache_map.pop

    def counted_pop(key: bytes, block_id: int) -> Any:
        block = pop(key, block_id)
        counts["evicted"] += block is not None
        return block

    cache_map.pop = counted_pop  # the memo records what this one pops

    def compared_read(manager: Any, waiting: Any) -> dict[str, int]:
        waiting = list(waiting)
        tokens = read(manager, waiting)
        for request in waiting:
            fresh = find_hit(manager, request)
            assert tokens.get(request.request_id, 0) == fresh.tokens, request.request_id
            assert hits.shared_blocks(request.request_id) == fresh.shared_blocks
            counts["compared"] += 1
        return tokens

    hits.read = compared_read  # type: ignore[method-assign,assignment]
    return counts


@pytest.mark.parametrize("policy", ["vllm", "slidingserve"])
def test_remembered_hits_are_vllm_s_own_at_every_step(tmp_path: Path, policy: str) -> None:
    # 24 blocks of 16 tokens: four families of 64-160-token prefixes crowd out each other.
    scheduler = make_scheduler(tmp_path, policy, {}, budget=64, blocks=24, prefix_caching=True)
    counts, rng = checked(scheduler), random.Random(1)
    for step in range(400):
        for k in range(rng.choice((0, 1, 2))):
            family, own = rng.randrange(4), rng.randrange(40)
            scheduler.add_request(family_request(f"{step}-{k}", family, 64 + 32 * family, own, rng))
        if scheduler.has_requests():
            run_step(scheduler)
    list(steps(scheduler, limit=2000))  # the design's forecast starts few at once here
    assert not scheduler.has_requests()
    memo = scheduler.prefix_hits.memo
    assert counts["compared"] > 10_000
    assert memo.lookups < counts["compared"] / 2  # most reads were remembered...
    assert counts["evicted"] > 500  # ...while the cache evicted blocks others hit
    assert scheduler.health.counts.prefix_hit_tokens > 0
    assert scheduler.state_sizes()["remembered_hits"] == 0  # idle: nothing kept


def test_hits_after_a_reset_of_the_prefix_cache_are_looked_up_afresh(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "vllm", {}, prefix_caching=True)
    counts, rng = checked(scheduler), random.Random(2)
    scheduler.add_request(family_request("first", 0, 96, 0, rng))
    list(steps(scheduler))
    scheduler.add_request(family_request("twin", 0, 96, 8, rng))
    scheduler._view(0.0)  # read while "twin" waits: its 96-token hit remembered
    assert scheduler.prefix_hits.read(scheduler.kv_cache_manager, scheduler.waiting) == {"twin": 96}
    assert scheduler.reset_prefix_cache()  # nothing runs: vLLM drops every cached block
    assert scheduler.prefix_hits.read(scheduler.kv_cache_manager, scheduler.waiting) == {}
    list(steps(scheduler))
    assert counts["compared"] >= 3 and scheduler.health.counts.plan_mismatches == 0
