"""The workload → planned requests step of the load generator, and the request bodies."""

from __future__ import annotations

import numpy as np
import pytest

from slidingserve.bench import plan_requests, request_body, scale_lengths
from slidingserve.bench.requests import REFERENCE_CONTEXT, scaled_requests
from slidingserve.workloads import (
    ArrivalConfig,
    WorkloadConfig,
    generate_requests,
    get_tier_mix,
)
from slidingserve.workloads.prefixes import SystemPrompt


def lengths(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_lengths_shrink_with_the_context_then_fit_in_it() -> None:
    # L = 512 is 1/16 of 8192: 8192 → 512, 100 → 6.25 → 6, 3 → 0.19 → at least 1 token.
    # Then prompt ≤ 510 and output ≤ 511 − prompt.
    prompt, output = scale_lengths(lengths(8192, 100, 3), lengths(100, 8192, 1), 512)
    assert prompt.tolist() == [510, 6, 1]
    assert output.tolist() == [1, 505, 1]


def test_a_longer_context_keeps_the_workload_lengths() -> None:
    prompt, output = scale_lengths(lengths(3000, 7000), lengths(900, 2000), 2 * REFERENCE_CONTEXT)
    assert prompt.tolist() == [3000, 7000]
    assert output.tolist() == [900, 2000]


@pytest.mark.parametrize("context", [3, 64, 512, 4096])
def test_every_planned_request_fits_the_context(context: int) -> None:
    workload = WorkloadConfig("mixed-v1", 300)
    plan = plan_requests(workload, rate=5.0, seed=3, max_model_len=context, vocab_size=1000)
    assert all(p.prompt_tokens >= 1 and p.max_tokens >= 1 for p in plan)
    assert max(p.prompt_tokens + p.max_tokens for p in plan) <= context - 1


def test_plan_follows_the_simulator_workload() -> None:
    workload = WorkloadConfig(
        "mixed-v2",
        50,
        ArrivalConfig("gamma", burstiness=2.0),
        slo_scale=1.5,
        tiers=get_tier_mix("premium-standard"),
    )
    # A context one token over the simulator's: no scaling, and the simulator's own trim
    # (prompt + output ≤ 8192) is already inside the plan's (≤ context − 1).
    plan = plan_requests(workload, rate=3.0, seed=7, max_model_len=8193, vocab_size=1000)
    simulated = generate_requests(workload, 3.0, 7, 8192)
    assert [p.send_at for p in plan] == [r.arrival for r in simulated]
    assert [p.slo for p in plan] == [r.slo for r in simulated]
    assert [(p.prompt_tokens, p.max_tokens) for p in plan] == [
        (r.prompt_len, r.output_len) for r in simulated
    ]
    assert {p.slo.tier for p in plan} == {"premium", "standard"}


def test_prompt_ids_are_seeded_and_in_range() -> None:
    workload = WorkloadConfig("sharegpt", 20)
    first = plan_requests(workload, rate=1.0, seed=1, max_model_len=1024, vocab_size=50)
    again = plan_requests(workload, rate=9.0, seed=1, max_model_len=1024, vocab_size=50)
    other = plan_requests(workload, rate=1.0, seed=2, max_model_len=1024, vocab_size=50)
    ids = [i for p in first for i in p.prompt_ids]
    assert min(ids) >= 10 and max(ids) < 50
    assert [p.prompt_ids for p in first] == [p.prompt_ids for p in again]
    assert [p.prompt_ids for p in first] != [p.prompt_ids for p in other]


def test_vocabulary_must_leave_room_for_ids() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        plan_requests(WorkloadConfig("sharegpt", 2), 1.0, 0, 512, vocab_size=10)


def test_body_carries_the_slo_and_streams_exactly() -> None:
    workload = WorkloadConfig("sharegpt", 10, tiers=get_tier_mix("premium-standard"))
    planned = next(
        p
        for p in plan_requests(workload, 2.0, 0, 512, 1000)
        if p.slo.tier == "premium" and p.send_at > 0
    )
    body = request_body(planned, "tiny", priority=True)
    assert body["prompt"] == list(planned.prompt_ids)
    assert body["max_tokens"] == planned.max_tokens
    assert body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.0
    assert body["return_token_ids"] is True
    assert body["vllm_xargs"] == {
        "ttft_ms": pytest.approx(planned.slo.ttft * 1000),
        "tbt_ms": pytest.approx(planned.slo.tbt * 1000),
        "protected": 1,
        "tier": "premium",
    }
    assert body["priority"] == round((planned.send_at + planned.slo.ttft) * 1000)


def test_body_without_vllm_fields() -> None:
    planned = plan_requests(WorkloadConfig("arxiv", 1), 1.0, 0, 512, 1000)[0]
    body = request_body(planned, "m", xargs=False)
    assert "vllm_xargs" not in body and "return_token_ids" not in body
    assert "priority" not in body and "cache_salt" not in body


def test_a_salted_body_keeps_its_prefix_cache_apart() -> None:
    planned = plan_requests(WorkloadConfig("arxiv", 1), 1.0, 0, 512, 1000)[0]
    assert request_body(planned, "m", cache_salt="run-3")["cache_salt"] == "run-3"


def test_requests_sharing_a_system_prompt_share_its_token_ids() -> None:
    workload = WorkloadConfig("sharegpt", 40, system_prompt=SystemPrompt(300, 0.5))
    planned = plan_requests(workload, 2.0, 0, 2048, 1000)
    requests = scaled_requests(workload, 2.0, 0, 2048)
    firsts = [r.content[0][0] for r in requests]
    system = max(set(firsts), key=firsts.count)  # the system prompt's segment
    with_it = [p for p, first in zip(planned, firsts, strict=True) if first == system]
    assert 5 < len(with_it) < 35
    # Scaled to a 2,048-token context, a prompt keeps its leading tokens: the system
    # prompt's, as far as the prompt goes; the rest of each prompt is its own.
    assert len({p.prompt_ids[:75] for p in with_it if p.prompt_tokens >= 75}) == 1
    own = [p.prompt_ids[-20:] for p in planned if p.prompt_tokens > 400]
    assert len(set(own)) == len(own)
    for plan, request in zip(planned, requests, strict=True):
        assert plan.prompt_tokens == request.prompt_len
        assert sum(t for _, t in request.content) == request.prompt_len + request.output_len


def test_without_content_the_prompt_ids_do_not_change() -> None:
    workload = WorkloadConfig("sharegpt", 20)
    first = plan_requests(workload, 2.0, 3, 2048, 1000)
    assert first == plan_requests(workload, 2.0, 3, 2048, 1000)
    assert all(not r.content for r in scaled_requests(workload, 2.0, 3, 2048))
