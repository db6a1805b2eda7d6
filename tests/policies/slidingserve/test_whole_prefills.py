"""Whole prefills only (`whole_prefills.py`): which waiting requests may start, that the
queue keeps its order, and that it spares preemptions where the cache binds."""

from __future__ import annotations

import pytest
from factories import make_decoding, make_request, make_slidingserve, make_view

from slidingserve.core import EngineLimits, Phase, Request
from slidingserve.policies.slidingserve.whole_prefills import startable_queue
from slidingserve.sim.hardware import HardwareConfig
from slidingserve.sim.runner import SimulationSpec, simulate
from slidingserve.workloads import WorkloadConfig

BLOCK = 16  # EngineLimits' block size


def _ids(queue: list[Request]) -> list[str]:
    return [r.request_id for r in queue]


def test_a_waiting_request_starts_only_when_its_whole_prefill_fits() -> None:
    # Two decodes of 320 cached tokens: 20 blocks each, their next token 2 more blocks.
    decodes = [make_decoding(f"d{i}", prompt=320, generated=1) for i in range(2)]
    small = make_request("small", prompt=30 * BLOCK)  # 30 blocks
    large = make_request("large", prompt=50 * BLOCK)  # 50 blocks
    view, kv = make_view(running=decodes, waiting=[small, large], kv_blocks=40 + 2 + 79)
    assert kv.num_free == 81 and view.decode_reserve() == 2
    # 79 blocks of room: the small one takes 30, the large one's 50 no longer fit.
    assert _ids(startable_queue([small, large], view)) == ["small"]
    # Alone, the large one fits.
    assert _ids(startable_queue([large], view)) == ["large"]


def test_the_first_miss_stops_the_starts_and_running_prefills_keep_their_places() -> None:
    decode = make_decoding("d", prompt=320, generated=1)
    started = make_request("started", prompt=40 * BLOCK, computed=10 * BLOCK)
    large = make_request("large", prompt=60 * BLOCK)
    small = make_request("small", prompt=2 * BLOCK)
    view, kv = make_view(running=[decode, started], waiting=[large, small], kv_blocks=100)
    # 100 − 20 (decode) − 10 (started) = 70 free, 1 for the decode's next token, and the
    # started prefill still needs 30: 39 blocks for a new one.
    assert kv.num_free == 70
    queue = [large, started, small]
    # The large one misses; the small one behind it waits too (vLLM's rule); the started
    # prefill stays where the ordering put it.
    assert _ids(startable_queue(queue, view)) == ["started"]
    assert _ids(startable_queue([started, small, large], view)) == ["started", "small"]


def test_with_room_the_queue_is_returned_as_is() -> None:
    decodes = [make_decoding(f"d{i}", prompt=320, generated=1) for i in range(4)]
    queue = [make_request(f"w{i}", prompt=1000) for i in range(5)]
    view, _ = make_view(running=decodes, waiting=queue, kv_blocks=100_000)
    assert startable_queue(queue, view) is queue


def test_a_prompt_larger_than_the_room_starts_when_nothing_else_runs() -> None:
    huge = make_request("huge", prompt=200 * BLOCK)
    view, _ = make_view(waiting=[huge], kv_blocks=50)
    assert _ids(startable_queue([huge], view)) == ["huge"]  # never a stall
    decode = make_decoding("d", prompt=16, generated=1)
    busy, _ = make_view(running=[decode], waiting=[huge], kv_blocks=50)
    assert startable_queue([huge], busy) == []  # the decode frees its blocks first


def test_requests_past_what_a_step_can_run_are_not_tested() -> None:
    limits = EngineLimits(max_num_batched_tokens=512)
    ahead = make_request("ahead", prompt=600)  # more than a step: nothing behind it starts
    behind = make_request("behind", prompt=100 * BLOCK)  # would not fit
    decode = make_decoding("d", prompt=16, generated=1)
    view, _ = make_view(running=[decode], waiting=[ahead, behind], limits=limits, kv_blocks=60)
    queue = [ahead, behind]
    assert startable_queue(queue, view) is queue


def test_the_policy_plans_no_chunk_of_a_prompt_that_would_not_fit_whole() -> None:
    decodes = [make_decoding(f"d{i}", prompt=320, generated=1, output=500) for i in range(2)]
    long_prompt = make_request("long", prompt=200 * BLOCK, ttft=30.0)
    limits = EngineLimits(max_num_batched_tokens=512)  # a chunk of 32 blocks
    view, _ = make_view(
        running=decodes, waiting=[long_prompt], limits=limits, kv_blocks=40 + 2 + 100
    )
    # The forecast off: expecting 439 more tokens from each request, it would hold both
    # the chunk and the whole prompt back.
    plain = make_slidingserve(kv_forecast=0).schedule(view)
    whole = make_slidingserve(whole_prefills=True, kv_forecast=0).schedule(view)
    assert "long" in [c.request.request_id for c in plain.chunks]  # a first chunk fits
    assert [c.request.request_id for c in whole.chunks] == ["d0", "d1"]
    assert all(c.request.phase is Phase.DECODING for c in whole.chunks)


def test_where_the_cache_binds_it_spares_preemptions() -> None:
    """The A100 with 40% of its memory, ShareGPT past its goodput: the design preempts
    dozens of times, most of them for blocks held by half-done prefills."""
    hardware = HardwareConfig(gpu="a100", model="llama-2-7b", gpu_memory_utilization=0.4)
    workload = WorkloadConfig("sharegpt", 300)
    runs = [
        simulate(SimulationSpec("slidingserve", workload, hardware, policy_options=o), 2.2, 0)
        for o in ({"whole_prefills": True}, {})
    ]
    whole, plain = runs
    assert whole.metrics.completed == plain.metrics.completed == 300
    assert plain.num_preemptions > 20
    assert whole.num_preemptions < plain.num_preemptions / 2


def test_the_option_is_a_boolean() -> None:
    assert make_slidingserve(whole_prefills=True).config.whole_prefills is True
    for bad in (1, "true", None):
        with pytest.raises(ValueError, match="whole_prefills"):
            make_slidingserve(whole_prefills=bad)
