"""The adapter with vLLM's prefix cache on: plans count the hits vLLM will find, so vLLM runs
them as given, and the health counts report the hit rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

vllm = pytest.importorskip("vllm")

from test_adapter_unit import steps  # noqa: E402
from vllm_schedulers import engine_request, make_scheduler  # noqa: E402

from slidingserve.core.request import Phase  # noqa: E402

POLICIES = [
    ("sarathi-edf", {"chunk_size": 48}),
    ("vllm", {}),
    ("slidingserve", {}),
    ("qoserve", {}),
]


@pytest.mark.parametrize(("policy", "options"), POLICIES)
def test_requests_sharing_a_prefix_run_their_plans_from_the_hit(
    tmp_path: Path, policy: str, options: dict[str, Any]
) -> None:
    scheduler = make_scheduler(tmp_path, policy, options, prefix_caching=True)
    slo: dict[str, Any] = {"ttft_ms": 60_000}  # nothing late: every step runs as planned
    scheduler.add_request(engine_request("first", 200, max_tokens=3, **slo))
    list(steps(scheduler))
    # Both start with the first one's 200 prompt tokens: 12 full blocks of 16 are cached.
    scheduler.add_request(engine_request("longer", 260, max_tokens=3, **slo))
    scheduler.add_request(engine_request("shorter", 120, max_tokens=3, **slo))
    first_steps = 0
    for output in steps(scheduler):
        plan = scheduler.last_plan
        assert plan is not None
        assert dict(output.num_scheduled_tokens) == {
            c.request.request_id: c.tokens for c in plan.chunks
        }
        new = {d.req_id: d.num_computed_tokens for d in output.scheduled_new_reqs}
        for chunk in plan.chunks:
            if chunk.request.request_id in new:
                first_steps += 1
                assert chunk.request.num_computed == new[chunk.request.request_id]
    assert first_steps == 2
    counts = scheduler.health.counts
    assert counts.plan_mismatches == 0
    assert counts.prefix_queried_tokens == 200 + 260 + 120
    # 192 of "longer"; "shorter" (120 tokens) finds 7 blocks, its last token left to compute.
    assert counts.prefix_hit_tokens == 192 + 112
    assert "52.4% prefix-cache hits" in counts.line()


def test_the_policy_sees_a_waiting_request_s_hit_and_what_sharing_it_costs(
    tmp_path: Path,
) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi-edf", {"chunk_size": 48}, prefix_caching=True)
    scheduler.add_request(engine_request("first", 100, max_tokens=40))
    run = steps(scheduler)
    next(run), next(run), next(run)  # its prompt in 48 + 48 + 4 tokens, then a decode
    scheduler.add_request(engine_request("twin", 100, max_tokens=3))
    view = scheduler._view(0.0)
    (waiting,) = view.waiting
    assert waiting.phase is Phase.WAITING and waiting.num_computed == 96
    assert view.kv.held(waiting) == 6  # "first" still holds the six blocks: no free block
    scheduler.prefix_hits.clear()
    assert view.kv.held(waiting) == 0


def test_without_prefix_caching_nothing_is_hit(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi-edf", {"chunk_size": 48})
    scheduler.add_request(engine_request("first", 100, max_tokens=3))
    list(steps(scheduler))
    scheduler.add_request(engine_request("twin", 100, max_tokens=3))
    list(steps(scheduler))
    counts = scheduler.health.counts
    assert (counts.prefix_queried_tokens, counts.prefix_hit_tokens) == (200, 0)
    assert counts.plan_mismatches == 0
