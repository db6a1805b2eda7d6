"""The simulator with a prefix cache: hits skip prefill, every policy runs on it, and
without known content nothing changes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from factories import LinearTimer, TokenLinearModel, make_request

from slidingserve.core import EngineLimits, Request, TimedBatch
from slidingserve.policies import POLICIES, PolicyContext, make_policy
from slidingserve.predictor import random_batch_shapes
from slidingserve.sim.engine import SimulationRun, Simulator, SimulatorOptions

SYSTEM_PROMPT = 7
TIMER = LinearTimer()
PROFILE = [  # what the planning policies fit or read: the timer's own batches
    TimedBatch(shape, TIMER.sample_time(shape))
    for shape in random_batch_shapes(200, np.random.default_rng(0))
]


def shared_prompt_requests(count: int = 12, gap: float = 0.2) -> list[Request]:
    """Requests that start with one 512-token system prompt, then their own 100 tokens."""
    requests = []
    for i in range(count):
        request = make_request(f"r{i}", arrival=gap * i, prompt=612, output=20, ttft=2.0)
        content = ((SYSTEM_PROMPT, 512), (100 + i, 100), (500 + i, 20))
        requests.append(dataclasses.replace(request, content=content))
    return requests


def run(
    requests: list[Request],
    prefix_cache: bool,
    policy: str = "sarathi",
    kv_blocks: int = 10_000,
) -> SimulationRun:
    limits = EngineLimits(prefix_caching=prefix_cache)
    options = SimulatorOptions(limits=limits, record_iterations=True)
    context = PolicyContext(limits, TokenLinearModel(0.01, 1e-4), PROFILE)
    built = make_policy(policy, context)
    return Simulator(built, LinearTimer(), kv_blocks, options).run(requests)


def test_hits_skip_the_shared_prefill() -> None:
    cached = run(shared_prompt_requests(), prefix_cache=True)
    plain = run(shared_prompt_requests(), prefix_cache=False)
    assert plain.prefix_cache is None
    assert cached.prefix_cache is not None
    # The first request computes the system prompt; each later one finds its 32 blocks.
    assert cached.prefix_cache.hit_tokens == 11 * 512
    assert cached.prefix_cache.queried_tokens == 12 * 612
    prefill = sum(log.num_tokens - log.num_decodes for log in cached.iterations)
    assert prefill == 612 + 11 * 100
    assert sum(log.num_tokens - log.num_decodes for log in plain.iterations) == 12 * 612
    first = [r.token_times[0] - r.arrival for r in cached.requests[1:]]
    first_plain = [r.token_times[0] - r.arrival for r in plain.requests[1:]]
    assert max(first) < min(first_plain)
    assert cached.blocks_in_use_at_end == 0


def test_without_known_content_the_cache_changes_nothing() -> None:
    def requests() -> list[Request]:
        return [dataclasses.replace(r, content=()) for r in shared_prompt_requests()]

    on, off = run(requests(), prefix_cache=True), run(requests(), prefix_cache=False)
    assert on.prefix_cache is None
    assert [r.token_times for r in on.requests] == [r.token_times for r in off.requests]


def test_preempted_requests_resume_from_their_cached_blocks() -> None:
    # 60 blocks: the prompts fit, their outputs do not all fit together.
    requests = [
        dataclasses.replace(
            make_request(f"r{i}", prompt=300, output=300, ttft=5.0),
            content=((SYSTEM_PROMPT, 200), (100 + i, 100), (500 + i, 300)),
        )
        for i in range(4)
    ]
    result = run(requests, prefix_cache=True, kv_blocks=100)
    assert result.num_preemptions > 0
    assert all(len(r.token_times) == 300 for r in result.requests)
    assert result.prefix_cache is not None
    # Beyond the three later requests' system prompts, resumed requests found blocks too.
    assert result.prefix_cache.hit_tokens > 3 * 192
    assert result.blocks_in_use_at_end == 0


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_plans_valid_batches_with_hits(policy: str) -> None:
    result = run(shared_prompt_requests(24, gap=0.02), prefix_cache=True, policy=policy)
    assert all(len(r.token_times) == 20 for r in result.requests)
    assert result.prefix_cache is not None and result.prefix_cache.hit_tokens > 0
