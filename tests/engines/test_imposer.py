"""Imposing a plan on vLLM's queues, caps and budget, with plain stand-ins for its scheduler."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from factories import make_decoding, make_request

from slidingserve.core.plan import Plan, ScheduledChunk
from slidingserve.engines.vllm.imposer import PlanImposer, StepOutcome

BUDGET = 256


@dataclass
class Queued:
    request_id: str


@dataclass
class Queues:
    """What the imposer changes of vLLM's scheduler."""

    running: list[Any] = field(default_factory=list)
    waiting: deque[Any] = field(default_factory=deque)
    kv_holding_waiting: deque[Any] = field(default_factory=deque)
    max_num_scheduled_tokens: int = BUDGET


def ids(queue: Any) -> list[str]:
    return [request.request_id for request in queue]


def make_queues() -> Queues:
    return Queues(
        running=[Queued("r1"), Queued("r2"), Queued("r3")],
        waiting=deque([Queued("w1"), Queued("w2"), Queued("w3")]),
        kv_holding_waiting=deque([Queued("k1"), Queued("k2")]),
    )


PLAN = Plan(
    [
        ScheduledChunk(make_request("w3", prompt=80), 40),
        ScheduledChunk(make_decoding("r3"), 1),
        ScheduledChunk(make_request("k2", prompt=30), 30),
        ScheduledChunk(make_decoding("r1"), 1),
    ]
)


def test_planned_requests_go_first_in_plan_order_and_the_rest_keep_theirs() -> None:
    queues = make_queues()
    PlanImposer(queues, BUDGET).impose(PLAN)
    assert ids(queues.running) == ["r3", "r1", "r2"]
    assert ids(queues.waiting) == ["w3", "w1", "w2"]
    assert ids(queues.kv_holding_waiting) == ["k2", "k1"]
    assert queues.max_num_scheduled_tokens == 72  # the plan's total


def test_caps_hold_while_the_plan_is_imposed_and_unplanned_requests_get_nothing() -> None:
    queues = make_queues()
    imposer = PlanImposer(queues, BUDGET)
    assert imposer.cap("w3", 80) == 80  # no plan yet: vLLM decides
    imposer.impose(PLAN)
    assert (imposer.cap("w3", 80), imposer.cap("w3", 25), imposer.cap("w1", 80)) == (40, 25, 0)
    assert imposer.release(PLAN, {"w3": 40, "r3": 1, "k2": 30, "r1": 1}) == StepOutcome(
        fell_back=False, mismatch=False
    )
    assert imposer.cap("w1", 80) == 80 and queues.max_num_scheduled_tokens == BUDGET


def test_a_step_that_ran_other_tokens_than_planned_is_a_mismatch() -> None:
    imposer = PlanImposer(make_queues(), BUDGET)
    imposer.impose(PLAN)
    outcome = imposer.release(PLAN, {"w3": 16, "r3": 1, "k2": 30, "r1": 1})
    assert outcome == StepOutcome(fell_back=False, mismatch=True)


def test_an_empty_plan_leaves_vllm_to_fill_the_step() -> None:
    queues = make_queues()
    imposer = PlanImposer(queues, BUDGET)
    imposer.impose(Plan())
    assert ids(queues.running) == ["r1", "r2", "r3"] and queues.max_num_scheduled_tokens == BUDGET
    assert imposer.cap("w1", 80) == 80
    assert imposer.release(Plan(), {"w1": 80}) == StepOutcome(fell_back=True, mismatch=False)
    assert imposer.release(Plan(), {}) == StepOutcome(fell_back=False, mismatch=False)


def test_a_held_step_gives_no_request_a_token_and_the_next_plan_gets_its_budget() -> None:
    queues = make_queues()
    imposer = PlanImposer(queues, BUDGET)
    imposer.impose(PLAN)
    imposer.hold()  # whatever the plan before it capped is gone
    assert queues.max_num_scheduled_tokens == 0
    assert (imposer.cap("w3", 80), imposer.cap("r1", 1)) == (0, 0)
    assert imposer.release(Plan(), {}) == StepOutcome(fell_back=False, mismatch=False)
    imposer.impose(PLAN)
    assert queues.max_num_scheduled_tokens == 72 and imposer.cap("w3", 80) == 40


def test_a_plan_larger_than_vllm_s_budget_gets_vllm_s_budget() -> None:
    queues = make_queues()
    big = Plan([ScheduledChunk(make_request("w1", prompt=1000), 300)])
    PlanImposer(queues, BUDGET).impose(big)
    assert queues.max_num_scheduled_tokens == BUDGET
