"""The capacity bound holds against the simulator and behaves as its definition says."""

from __future__ import annotations

import dataclasses

import pytest

from slidingserve.core import EngineLimits
from slidingserve.eval.capacity import capacity_bound
from slidingserve.sim.hardware import HardwareConfig
from slidingserve.sim.runner import SimulationSpec, simulate
from slidingserve.workloads import WorkloadConfig


@pytest.mark.parametrize("policy", ["vllm", "sarathi"])
@pytest.mark.parametrize("workload", ["sharegpt", "arxiv"])
def test_no_policy_outruns_the_bound_under_overload(policy: str, workload: str) -> None:
    config = WorkloadConfig(workload, 300)
    bound = capacity_bound(config, HardwareConfig(), EngineLimits(), num_samples=300, seed=4)
    # All 300 requests (the same ones the bound averaged) arrive at once, nearly:
    # throughput is then the engine's service rate.
    result = simulate(SimulationSpec(policy, config), rate=50 * bound.rate, seed=4)
    assert result.metrics.request_throughput <= bound.rate * 1.03  # 2% noise on times
    assert result.metrics.request_throughput >= 0.3 * bound.rate  # and it is not vacuous


def test_bound_rises_with_tp_and_falls_with_more_kv_heads() -> None:
    limits = EngineLimits()
    sharegpt = capacity_bound(WorkloadConfig("sharegpt", 1), HardwareConfig(), limits)
    tp2 = capacity_bound(WorkloadConfig("sharegpt", 1), HardwareConfig(tp=2), limits)
    llama2 = capacity_bound(
        WorkloadConfig("sharegpt", 1), HardwareConfig(model="llama-2-7b"), limits
    )
    assert tp2.rate > sharegpt.rate
    assert llama2.rate < sharegpt.rate  # 32 KV heads: 4x the decode attention of Llama-3-8B
    assert 0 < sharegpt.best_batch_tokens <= limits.max_num_batched_tokens


def test_a_bigger_token_budget_cannot_lower_the_bound() -> None:
    workload = WorkloadConfig("arxiv", 1)
    small = capacity_bound(workload, HardwareConfig(), EngineLimits(max_num_batched_tokens=256))
    large = capacity_bound(workload, HardwareConfig(), EngineLimits(max_num_batched_tokens=4096))
    assert large.rate >= small.rate
    assert small.best_batch_tokens <= 256


def test_bound_ignores_the_noise_setting() -> None:
    workload = WorkloadConfig("sharegpt", 1)
    quiet = capacity_bound(workload, HardwareConfig(noise=0.0), EngineLimits())
    noisy = capacity_bound(workload, HardwareConfig(noise=0.2), EngineLimits())
    assert dataclasses.astuple(quiet) == dataclasses.astuple(noisy)


def test_a_budget_smaller_than_any_usual_chunk_still_has_a_bound() -> None:
    bound = capacity_bound(
        WorkloadConfig("arxiv", 1), HardwareConfig(), EngineLimits(max_num_batched_tokens=16)
    )
    assert 0 < bound.rate < 1.0
    assert bound.best_batch_tokens <= 16


def test_least_prefill_attention_beats_every_equal_chunking() -> None:
    import numpy as np

    from slidingserve.eval.capacity import least_prefill_attention
    from slidingserve.sim.hardware import GroundTruthLatency

    latency = GroundTruthLatency(HardwareConfig(noise=0.0))
    prompt = 1500
    bound = float(least_prefill_attention(latency, np.array([prompt]), 2048)[0])
    for chunks in range(1, 80):
        sizes = [prompt // chunks + (k < prompt % chunks) for k in range(chunks)]
        cached = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        actual = float(latency.prefill_attention_time(np.array(sizes), cached).sum())
        assert bound <= actual + 1e-12
    assert bound == pytest.approx(0.01243, rel=1e-3)  # and equal chunks attain it
