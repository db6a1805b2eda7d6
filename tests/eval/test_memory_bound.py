"""The memory-aware bound: hand-computed cases, its two ends, and the simulator under it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from slidingserve.core import EngineLimits
from slidingserve.eval.capacity import capacity_bound
from slidingserve.eval.memory_bound import (
    COMPUTE,
    KV,
    RequestDemand,
    bound_of,
    held_blocks,
    memory_bound,
    request_demand,
)
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig, load_model
from slidingserve.sim.runner import SimulationSpec, simulate
from slidingserve.workloads import WorkloadConfig, sample_workload

A40 = HardwareConfig(gpu="a40", model="llama-2-7b", tp=1)  # 32 KV heads: the cache binds
A100 = HardwareConfig()  # Llama-3-8B: 8 KV heads, compute binds


def test_held_blocks_add_up_the_blocks_of_every_held_token() -> None:
    rng = np.random.default_rng(0)
    prompt = rng.integers(1, 200, 300)
    output = rng.integers(1, 200, 300)
    for size in (1, 4, 16):
        expected = [
            sum(-(-t // size) for t in range(p, p + d)) for p, d in zip(prompt, output, strict=True)
        ]
        assert held_blocks(prompt, output, size).tolist() == expected
    # P = 4, D = 5, blocks of 4: t = 4 … 8 hold 1, 2, 2, 2, 2 blocks.
    assert held_blocks(np.array([4]), np.array([5]), 4).tolist() == [9]


def test_a_fixed_iteration_cost_makes_the_cache_the_limit() -> None:
    # P = 4, D = 5: 8 tokens, 9 held blocks; a cache of 4 blocks; NA = 10 ms at any size up
    # to 8 tokens. The cache holds at most two requests' decodes (2 blocks each) per
    # iteration, so a request needs 9/4 iterations: 22.5 ms. Tokens alone: 8/8 of one.
    demand = RequestDemand(tokens=8.0, held_blocks=9.0, attention=0.0)
    bound = bound_of(demand, np.full(8, 0.010), kv_blocks=4, block_size=4)
    assert bound.compute == pytest.approx(100.0)
    assert bound.kv == pytest.approx(1 / 0.0225)
    assert bound.rate == pytest.approx(1 / 0.0225)
    assert bound.binding == KV
    assert bound.batch_tokens == pytest.approx(8 * 4 / 9)


def test_with_an_affine_iteration_cost_it_is_tighter_than_both_parts() -> None:
    # NA(N) = 10 ms + 1 ms·N, N ≤ 8: 9/4 iterations at 10 ms each, and 8 tokens at 1 ms.
    demand = RequestDemand(tokens=8.0, held_blocks=9.0, attention=0.005)
    non_attention = 0.010 + 0.001 * np.arange(1, 9, dtype=np.float64)
    bound = bound_of(demand, non_attention, kv_blocks=4, block_size=4)
    assert bound.rate == pytest.approx(1 / (0.0225 + 0.008 + 0.005))
    assert bound.compute == pytest.approx(1 / (0.018 + 0.005))  # τ* = NA(8)/8 = 2.25 ms
    assert bound.kv == pytest.approx(1 / (0.011 * 9 / 4 + 0.005))  # NA_min = NA(1)
    assert bound.rate < min(bound.compute, bound.kv)
    assert bound.line == pytest.approx((0.010, 0.001))


def test_with_ample_memory_it_is_the_capacity_bound() -> None:
    workload = WorkloadConfig("sharegpt", 1)
    capacity = capacity_bound(workload, A40, EngineLimits())
    latency = GroundTruthLatency(dataclasses.replace(A40, noise=0.0))
    sample = sample_workload(
        dataclasses.replace(workload, num_requests=4000),
        1.0,
        0,
        load_model(A40.model).max_model_len,
    )
    demand = request_demand(latency, EngineLimits(), sample.prompt_lens, sample.output_lens)
    non_attention = np.asarray(latency.non_attention_time(np.arange(1, 2049)), dtype=np.float64)
    ample = bound_of(demand, non_attention, kv_blocks=10**9, block_size=16)
    assert ample.rate == pytest.approx(capacity.rate, rel=1e-9)
    assert ample.compute == pytest.approx(capacity.rate, rel=1e-9)
    assert ample.binding == COMPUTE
    # More memory never lowers it, and it reaches the compute part.
    rates = [
        bound_of(demand, non_attention, blocks, 16).rate
        for blocks in (500, 1000, 2000, 3667, 10_000, 30_000, 100_000, 10**9)
    ]
    assert rates == sorted(rates)
    assert rates[0] < 0.7 * capacity.rate
    assert rates[-2] == pytest.approx(capacity.rate, rel=1e-9)


def test_the_points_of_the_regime_map() -> None:
    limits = EngineLimits()
    sharegpt = WorkloadConfig("sharegpt", 1)
    kv_bound = memory_bound(sharegpt, A40, limits)
    assert kv_bound.binding == KV and kv_bound.share_of_capacity < 0.9
    assert kv_bound.kv_blocks == GroundTruthLatency(A40).kv_capacity_blocks(16)
    arxiv = memory_bound(WorkloadConfig("arxiv", 1), A100, limits)
    assert arxiv.binding == COMPUTE
    assert arxiv.rate == pytest.approx(
        capacity_bound(WorkloadConfig("arxiv", 1), A100, limits).rate
    )
    noisy = memory_bound(sharegpt, dataclasses.replace(A40, noise=0.2), limits)
    assert dataclasses.astuple(noisy) == dataclasses.astuple(kv_bound)


@pytest.mark.parametrize("policy", ["vllm", "sarathi"])
def test_no_policy_outruns_the_bound_where_the_cache_binds(policy: str) -> None:
    config = WorkloadConfig("sharegpt", 300)
    bound = memory_bound(config, A40, EngineLimits(), num_samples=300, seed=4)
    assert bound.binding == KV
    # The 300 requests the bound averaged arrive nearly at once: the throughput is the
    # engine's service rate with a full cache.
    result = simulate(SimulationSpec(policy, config, A40), rate=50 * bound.rate, seed=4)
    assert result.num_preemptions > 0  # the cache is full
    assert result.metrics.request_throughput <= bound.rate * 1.03  # 2% noise on times
    assert result.metrics.request_throughput >= 0.6 * bound.rate  # and it is not vacuous
