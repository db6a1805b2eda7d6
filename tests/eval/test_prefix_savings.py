"""The bounds with a prefix cache: each prompt charged less its best-case hit, so no run
with the cache on passes them, and nothing changes without shared content."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from slidingserve.core import EngineLimits
from slidingserve.eval.capacity import capacity_bound
from slidingserve.eval.memory_bound import memory_bound
from slidingserve.eval.prefix_savings import best_case_hits, computed_prompts
from slidingserve.eval.slo_bound import _demand, slo_aware_bound
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig
from slidingserve.sim.runner import SimulationSpec, simulate
from slidingserve.workloads import (
    TRACE_WORKLOAD,
    ArrivalConfig,
    TraceSource,
    WorkloadConfig,
)
from slidingserve.workloads.prefixes import Conversations, SystemPrompt

SYSTEM = 5
CACHE, NO_CACHE = EngineLimits(), EngineLimits(prefix_caching=False)


def test_a_later_request_can_find_what_an_earlier_one_computed() -> None:
    contents = [
        ((SYSTEM, 512), (10, 100), (11, 20)),
        ((SYSTEM, 512), (20, 40), (21, 20)),
        ((SYSTEM, 512), (10, 100), (11, 20), (30, 50), (31, 5)),  # the first's next turn
        (),
    ]
    hits = best_case_hits(contents, [612, 552, 682, 100], [20, 20, 5, 9], 16)
    # The second finds the 32 system-prompt blocks; the third, the first's 39 full blocks
    # (prompt and output: 632 tokens); the one without content finds nothing.
    assert hits.tolist() == [0, 512, 624, 0]


def test_a_hit_leaves_the_last_prompt_token_to_compute() -> None:
    same = ((SYSTEM, 64), (1, 4))
    assert best_case_hits([same, same], [64, 64], [4, 4], 16).tolist() == [0, 48]


def test_without_the_cache_or_content_every_prompt_token_is_charged() -> None:
    prompts, outputs = np.array([600, 600]), np.array([5, 5])
    contents = [((SYSTEM, 600), (1, 5)), ((SYSTEM, 600), (2, 5))]
    assert computed_prompts(contents, prompts, outputs, 16, False).tolist() == [600, 600]
    assert computed_prompts(None, prompts, outputs, 16, True).tolist() == [600, 600]
    assert computed_prompts(contents, prompts, outputs, 16, True).tolist() == [600, 600 - 592]


@pytest.mark.parametrize(
    "shared",
    [{"system_prompt": SystemPrompt(1024)}, {"conversations": Conversations(4)}],
)
def test_the_bounds_rise_with_the_cache_and_no_run_passes_them(shared: dict[str, object]) -> None:
    workload = WorkloadConfig("sharegpt", 300, **shared)  # type: ignore[arg-type]
    hardware = HardwareConfig()
    with_cache = capacity_bound(workload, hardware, CACHE, num_samples=1000).rate
    without = capacity_bound(workload, hardware, NO_CACHE, num_samples=1000).rate
    assert with_cache > 1.05 * without
    assert (
        memory_bound(workload, hardware, CACHE, num_samples=1000).rate
        > memory_bound(workload, hardware, NO_CACHE, num_samples=1000).rate
    )
    # Far past the bound, the run finishes fewer requests a second than it allows.
    spec = SimulationSpec("sarathi-edf", workload, hardware, CACHE)
    result = simulate(spec, 3 * with_cache, seed=0)
    assert result.prefix_hit_rate is not None and result.prefix_hit_rate > 0.1
    assert result.metrics.request_throughput < with_cache


def test_without_shared_content_the_cache_changes_no_bound() -> None:
    workload, hardware = WorkloadConfig("sharegpt", 300), HardwareConfig()
    assert capacity_bound(workload, hardware, CACHE, num_samples=500) == capacity_bound(
        workload, hardware, NO_CACHE, num_samples=500
    )
    assert slo_aware_bound(workload, hardware, CACHE, num_samples=500).rate == pytest.approx(
        slo_aware_bound(workload, hardware, NO_CACHE, num_samples=500).rate
    )


def test_a_replayed_window_s_demand_is_per_request_of_the_window(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    rows = "".join(f"{k},200,{1 + k % 7}\n" for k in range(50))
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + rows)
    workload = WorkloadConfig(
        TRACE_WORKLOAD, 50, ArrivalConfig("trace"), traces=(TraceSource(str(trace)),),
        slo_scale=20.0,
    )  # fmt: skip
    latency = GroundTruthLatency(dataclasses.replace(HardwareConfig(), noise=0.0))
    demand = _demand(workload, latency, EngineLimits(), 1e-5, num_samples=4000, seed=0)
    outputs = np.array([1 + k % 7 for k in range(50)])
    assert demand.decode_steps.sum() == pytest.approx(np.mean(outputs - 1))
    assert demand.prefill_tokens == pytest.approx(200.0)
