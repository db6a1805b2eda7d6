"""Each baseline on one hand-worked queue (docs/baselines.md)."""

from __future__ import annotations

import pytest
from factories import make_decoding, make_request, make_view

from slidingserve.core import EngineLimits, Plan, SchedulerView
from slidingserve.policies import POLICIES, PolicyContext, make_policy


def scenario() -> SchedulerView:
    """Running in admission order d0, p0, d1; waiting w0, w1.

    Deadlines of the prefills: p0 at 1 + 5 = 6 s, w0 at 2 + 1 = 3 s, w1 at 3 + 0.5 = 3.5 s.
    """
    d0, d1 = make_decoding("d0"), make_decoding("d1")
    p0 = make_request("p0", arrival=1.0, ttft=5.0, prompt=400, computed=100)
    w0 = make_request("w0", arrival=2.0, ttft=1.0, prompt=400)
    w1 = make_request("w1", arrival=3.0, ttft=0.5, prompt=100)
    view, _ = make_view(now=3.0, waiting=[w0, w1], running=[d0, p0, d1])
    return view


def plan_of(name: str, **options: int) -> list[tuple[str, int]]:
    policy = make_policy(name, PolicyContext(EngineLimits()), options)
    plan: Plan = policy.schedule(scenario())
    return [(chunk.request.request_id, chunk.tokens) for chunk in plan.chunks]


def test_vllm_runs_running_requests_in_order_then_waiting_fcfs() -> None:
    assert plan_of("vllm") == [("d0", 1), ("p0", 300), ("d1", 1), ("w0", 400), ("w1", 100)]


def test_vllm_budget_cuts_the_first_request_that_does_not_fit() -> None:
    assert plan_of("vllm", max_num_batched_tokens=500) == [
        ("d0", 1),
        ("p0", 300),
        ("d1", 1),
        ("w0", 198),
    ]


def test_vllm_priority_takes_waiting_requests_by_ttft_deadline() -> None:
    d0 = make_decoding("d0")
    late = make_request("late", arrival=2.0, ttft=5.0, prompt=300)  # due at 7 s
    urgent = make_request("urgent", arrival=3.0, ttft=0.5, prompt=300)  # due at 3.5 s
    limits = EngineLimits(max_num_batched_tokens=512)
    view, _ = make_view(now=3.0, waiting=[late, urgent], running=[d0], limits=limits)
    chosen: dict[str, list[tuple[str, int]]] = {}
    for name in ("vllm", "vllm-priority"):
        plan = make_policy(name, PolicyContext(limits)).schedule(view)
        chosen[name] = [(chunk.request.request_id, chunk.tokens) for chunk in plan.chunks]
    assert chosen["vllm"] == [("d0", 1), ("late", 300), ("urgent", 211)]
    assert chosen["vllm-priority"] == [("d0", 1), ("urgent", 300), ("late", 211)]


def test_sarathi_runs_decodes_then_ongoing_then_new_prefills() -> None:
    assert plan_of("sarathi") == [("d0", 1), ("d1", 1), ("p0", 300), ("w0", 210)]


def test_sarathi_edf_orders_prefills_by_deadline() -> None:
    assert plan_of("sarathi-edf") == [("d0", 1), ("d1", 1), ("w0", 400), ("w1", 100), ("p0", 10)]


def test_sarathi_edf_chunk_size_is_configurable() -> None:
    assert plan_of("sarathi-edf", chunk_size=256) == [("d0", 1), ("d1", 1), ("w0", 254)]


def test_unknown_policy_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown policy 'fifo'.*sarathi-edf"):
        make_policy("fifo", PolicyContext(EngineLimits()))


def test_unknown_option_is_rejected_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"chunk.*known: chunk_size"):
        make_policy("sarathi", PolicyContext(EngineLimits()), {"chunk": 256})


def test_invalid_option_value_is_rejected() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        make_policy("sarathi", PolicyContext(EngineLimits()), {"chunk_size": 0})


def test_every_registered_policy_has_its_own_name() -> None:
    assert all(cls.name == name for name, cls in POLICIES.items())
