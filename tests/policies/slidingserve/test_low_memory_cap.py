"""`low_memory_cap`: QoServe's low-memory test caps the step's batch, and only then."""

from __future__ import annotations

from typing import Any

import pytest
from factories import make_decoding, make_request, make_slidingserve, make_view

from slidingserve.core import Request
from slidingserve.core.kv_blocks import blocks_for_tokens
from slidingserve.policies.common import LOW_MEMORY_DIVISOR, LOW_MEMORY_THRESHOLD
from slidingserve.policies.slidingserve.constructor import BatchConstructor

BLOCK = 16  # EngineLimits' block size
# The fewest free blocks at which QoServe's test says the memory is not low: 2,000 of 16
ENOUGH_FREE = LOW_MEMORY_DIVISOR * LOW_MEMORY_THRESHOLD // BLOCK


def _queues() -> tuple[list[Request], list[Request]]:
    """Eight decodes and a waiting prompt far larger than any cap, its deadline calm."""
    decodes = [make_decoding(f"d{i}", prompt=200, generated=3, output=50) for i in range(8)]
    waiting = [make_request("w", prompt=1_500, ttft=30.0)]
    return waiting, decodes


def _plan_tokens(cap: int, free_blocks: int) -> int:
    waiting, running = _queues()
    held = sum(blocks_for_tokens(r.num_computed, BLOCK) for r in running)
    view, _ = make_view(waiting=waiting, running=running, kv_blocks=held + free_blocks)
    assert view.kv.num_free == free_blocks
    return make_slidingserve(low_memory_cap=cap).schedule(view).total_tokens


def test_below_qoserves_threshold_the_batch_holds_at_most_the_cap() -> None:
    uncapped = _plan_tokens(0, ENOUGH_FREE - 1)
    assert uncapped > 384  # the design alone would run more
    assert _plan_tokens(384, ENOUGH_FREE - 1) == 384


def test_with_enough_memory_free_the_plan_is_the_designs() -> None:
    uncapped = _plan_tokens(0, ENOUGH_FREE)
    assert uncapped > 384
    assert _plan_tokens(384, ENOUGH_FREE) == uncapped


def test_a_cap_above_the_engines_budget_changes_nothing() -> None:
    assert _plan_tokens(100_000, ENOUGH_FREE - 1) == _plan_tokens(0, ENOUGH_FREE - 1)


def test_the_decodes_still_run_when_they_alone_pass_the_cap() -> None:
    waiting, running = _queues()
    view, _ = make_view(waiting=waiting, running=running, kv_blocks=1_000)
    plan = make_slidingserve(low_memory_cap=4).schedule(view)
    assert {id(r) for r, _ in plan.chunks} == {id(r) for r in running}


def test_the_admission_rates_keep_the_engines_budget() -> None:
    """Both tests' rates: the best prefill rate, and the queue test's published one."""
    policies = [
        make_slidingserve(low_memory_cap=cap, admission=True, admission_test="queue")
        for cap in (128, 0)
    ]
    for policy in policies:
        waiting, running = _queues()
        view, _ = make_view(waiting=waiting, running=running, kv_blocks=1_000)
        policy.schedule(view)
    capped, design = policies
    assert capped.step_tokens == 128
    assert capped.admission_rate() == design.admission_rate()
    capped_queue, design_queue = capped.admission_queue(), design.admission_queue()
    assert capped_queue is not None and design_queue is not None
    assert capped_queue.rate == design_queue.rate


def test_the_batch_constructor_plans_within_the_step_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A waiting request due within the candidate batch's time, so the BatchConstructor
    plans (decodes and that request alone); its B_max follows the free memory."""
    policy = make_slidingserve(low_memory_cap=256, batch_constructor=True)
    limits_seen: list[int] = []
    select = BatchConstructor.select

    def spy(constructor: BatchConstructor, *args: Any) -> Any:
        limits_seen.append(args[-1])  # the step's B_max, the last argument
        return select(constructor, *args)

    monkeypatch.setattr(BatchConstructor, "select", spy)
    for free_blocks, limit in ((ENOUGH_FREE - 1, 256), (ENOUGH_FREE, 2048)):
        decodes = [make_decoding(f"d{i}", prompt=200, generated=3, output=50) for i in range(8)]
        urgent = make_request("u", prompt=100, ttft=0.012)  # 12 ms: a 108-token batch fits
        others = [make_request(f"o{i}", prompt=100, ttft=5.0) for i in range(6)]
        held = sum(blocks_for_tokens(r.num_computed, BLOCK) for r in decodes)
        view, _ = make_view(
            waiting=[urgent, *others], running=decodes, kv_blocks=held + free_blocks
        )
        plan = policy.schedule(view)
        assert limits_seen[-1] == limit
        assert plan.path == "constructor"
        assert plan.total_tokens == 108


@pytest.mark.parametrize("cap", [-1, 1.5, "512", True])
def test_the_option_is_a_whole_number_of_tokens(cap: object) -> None:
    with pytest.raises(ValueError, match="low_memory_cap"):
        make_slidingserve(low_memory_cap=cap)
