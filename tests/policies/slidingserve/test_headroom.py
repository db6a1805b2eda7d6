"""KV headroom for the decodes (`headroom.py`): what is kept, that prefills take only what
lies beyond it, and that it spares preemptions where the cache binds."""

from __future__ import annotations

import pytest
from factories import make_decoding, make_request, make_slidingserve, make_view

from slidingserve.core import Phase
from slidingserve.core.plan import PlanBuilder
from slidingserve.policies.slidingserve.headroom import with_headroom
from slidingserve.sim.hardware import HardwareConfig
from slidingserve.sim.runner import SimulationSpec, simulate
from slidingserve.workloads import WorkloadConfig

BLOCK = 16  # EngineLimits' block size


def test_the_headroom_is_the_blocks_of_each_decodes_next_tokens() -> None:
    # 320 cached tokens hold 20 blocks; the next token needs a 21st, 32 more reach token 353:
    # 23 blocks in all, so 3 beyond what each holds.
    decodes = [make_decoding(f"d{i}", prompt=320, generated=1) for i in range(2)]
    view, _ = make_view(running=decodes, kv_blocks=2 * 20 + 30)  # a cache that binds
    assert view.limits.block_size == BLOCK
    assert view.decode_blocks is None
    assert with_headroom(view, 32).decode_blocks == 2 * 3
    # One token past the next stays inside the 21st block: nothing beyond the next block,
    # which the plan keeps anyway.
    assert with_headroom(view, 1) is view


def test_blocks_already_held_count_and_a_view_without_growth_is_returned_as_is() -> None:
    decode = make_decoding("d", prompt=300, generated=1)  # 300 tokens, 19 blocks: room for 4
    view, _ = make_view(running=[decode], kv_blocks=19 + 30)
    assert with_headroom(view, 3) is view
    assert with_headroom(view, 4) is not view and with_headroom(view, 4).decode_blocks == 1
    empty, _ = make_view(waiting=[make_request("w", prompt=500)])
    assert with_headroom(empty, 32) is empty


def test_with_room_for_any_plan_the_view_is_kept_and_the_plans_agree() -> None:
    decodes = [make_decoding(f"d{i}", prompt=320, generated=1) for i in range(4)]
    waiting = [make_request(f"w{i}", prompt=300) for i in range(3)]  # 19 blocks each
    for spare in (30, 10_000):
        view, _ = make_view(running=decodes, waiting=waiting, kv_blocks=4 * 20 + spare)
        kept = with_headroom(view, 32)
        assert (kept is view) == (spare == 10_000)
        plans = []
        for shown in (view, kept):
            builder = PlanBuilder(shown, 4096)
            builder.add_decodes(decodes)
            builder.add_prefills(waiting)
            plans.append([(c.request.request_id, c.tokens) for c in builder.chunks])
        assert (plans[0] == plans[1]) == (spare == 10_000)


def test_a_waiting_requests_prefix_hit_counts_against_the_room_for_any_plan() -> None:
    """A hit whose blocks sit among the free ones (no running request shares them) leaves
    the free pool when its request starts, beyond the chunk the budget limits."""
    decodes = [make_decoding(f"d{i}", prompt=330, generated=1) for i in range(10)]
    hit = make_request("hit", prompt=8000)
    hit.num_computed = 4800  # 300 blocks cached, none held by a running request
    view, kv = make_view(running=decodes, waiting=[hit], kv_blocks=10 * 21 + 430)
    assert kv.num_free == 430
    kept = with_headroom(view, 32)
    assert kept is not view and kept.decode_blocks == 10 * 2
    plans = []
    for shown in (view, kept):
        builder = PlanBuilder(shown)
        builder.add_decodes(decodes)
        builder.add_prefills([hit])
        plans.append([c.request.request_id for c in builder.chunks])
    # 2,038 tokens on top of the hit: 428 blocks, which fit beside the decodes' next blocks
    # but not beside the headroom.
    assert "hit" in plans[0] and "hit" not in plans[1]


def test_a_prefill_takes_only_the_blocks_beyond_the_headroom() -> None:
    decodes = [make_decoding(f"d{i}", prompt=320, generated=1) for i in range(4)]
    prefill = make_request("p", prompt=2000, computed=160, phase=Phase.PREFILLING)
    running = [*decodes, prefill]
    held = 4 * 20 + 10
    view, kv = make_view(running=running, kv_blocks=held + 30)
    assert kv.num_free == 30
    plain = PlanBuilder(view, 4096)
    plain.add(prefill, 2000)
    kept = PlanBuilder(with_headroom(view, 32), 4096)
    kept.add(prefill, 2000)
    # Without: all but the decodes' 4 next blocks (26 blocks); with: 4 × 3 kept (18).
    assert plain.chunks[0].tokens == 26 * BLOCK
    assert kept.chunks[0].tokens == 18 * BLOCK
    kept.add_decodes(decodes)
    assert len(kept.chunks) == 5  # the decodes still get their next token


def test_where_the_cache_binds_it_spares_most_preemptions() -> None:
    """The A40 with Llama-2-7B and a cache cut to half, arXiv past its goodput: the
    thrashing regime of the memory issue (hundreds of preemptions without it)."""
    hardware = HardwareConfig(gpu="a40", model="llama-2-7b", gpu_memory_utilization=0.45)
    workload = WorkloadConfig("arxiv", 150)
    runs = [
        simulate(SimulationSpec("slidingserve", workload, hardware, policy_options=o), 0.5, 0)
        # The forecast off: it spares most of them too.
        for o in ({"kv_headroom": 32, "kv_forecast": 0.0}, {"kv_headroom": 0, "kv_forecast": 0.0})
    ]
    kept, plain = runs
    assert kept.metrics.completed == plain.metrics.completed == 150
    assert plain.num_preemptions > 100
    assert kept.num_preemptions < plain.num_preemptions / 2


def test_the_design_keeps_32_tokens_and_a_bad_headroom_is_refused() -> None:
    assert make_slidingserve().config.kv_headroom == 32
    assert make_slidingserve(kv_headroom=0).config.kv_headroom == 0
    for bad in (-1, 2.5, "32", True):
        with pytest.raises(ValueError, match="kv_headroom"):
            make_slidingserve(kv_headroom=bad)
