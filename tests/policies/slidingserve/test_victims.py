"""Lost requests first when the KV cache runs short (`victims.py`), and the same victim
through the policy, the simulator and the plan order vLLM preempts from."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from factories import make_decoding, make_request, make_slidingserve, make_view

from slidingserve.core import Plan, ScheduledChunk
from slidingserve.engines.vllm.imposer import PlanImposer
from slidingserve.policies.slidingserve.victims import lost_first_victim, put_lost_last

NOW = 10.0


def decoding(request_id: str, *, lost: bool, cached: int) -> Any:
    """A decode with `cached` tokens whose next deadline is 1 s ago (lost) or in 1 s."""
    ttft = NOW - 1.0 if lost else NOW + 1.0
    return make_decoding(request_id, prompt=cached, ttft=ttft, tbt=0.05, output=cached + 10)


class TestVictim:
    def test_the_lost_request_with_the_most_cached_tokens_goes_first(self) -> None:
        running = [
            decoding("lost-small", lost=True, cached=100),
            decoding("lost-big", lost=True, cached=900),
            decoding("live", lost=False, cached=50),
        ]
        assert lost_first_victim(running, NOW).request_id == "lost-big"

    def test_without_a_lost_request_the_newest_goes(self) -> None:
        running = [decoding("old", lost=False, cached=900), decoding("new", lost=False, cached=5)]
        assert lost_first_victim(running, NOW).request_id == "new"

    def test_of_two_lost_with_the_same_cache_the_later_goes(self) -> None:
        running = [
            decoding("first", lost=True, cached=300),
            decoding("second", lost=True, cached=300),
        ]
        assert lost_first_victim(running, NOW).request_id == "second"

    def test_a_prefilling_request_past_its_first_token_deadline_is_lost(self) -> None:
        late = make_request("late", ttft=NOW - 0.5, prompt=400, computed=200)
        running = [late, decoding("live", lost=False, cached=50)]
        assert lost_first_victim(running, NOW).request_id == "late"


class TestPlanOrder:
    def test_lost_requests_go_last_by_cached_tokens_and_live_ones_keep_their_order(self) -> None:
        plan = Plan(
            [
                ScheduledChunk(decoding("lost-big", lost=True, cached=900), 1),
                ScheduledChunk(decoding("live-a", lost=False, cached=50), 1),
                ScheduledChunk(decoding("lost-small", lost=True, cached=100), 1),
                ScheduledChunk(make_request("prefill", ttft=NOW + 2.0, prompt=300), 128),
            ]
        )
        put_lost_last(plan, NOW)
        order = [chunk.request.request_id for chunk in plan.chunks]
        assert order == ["live-a", "prefill", "lost-small", "lost-big"]
        assert plan.total_tokens == 131

    def test_vllm_preempts_the_same_request_as_the_simulator(self) -> None:
        # vLLM's FCFS scheduler preempts the tail of its running list, which the imposer
        # orders as the plan.
        running = [
            decoding("lost-big", lost=True, cached=900),
            decoding("live", lost=False, cached=50),
            decoding("lost-small", lost=True, cached=100),
        ]
        plan = Plan([ScheduledChunk(request, 1) for request in running])
        put_lost_last(plan, NOW)
        queues = _Queues([_Queued(r.request_id) for r in running])
        PlanImposer(queues, 1024).impose(plan)
        assert queues.running[-1].request_id == lost_first_victim(running, NOW).request_id


class TestThroughThePolicy:
    def view(self) -> Any:
        lost = decoding("lost", lost=True, cached=600)
        live = decoding("live", lost=False, cached=200)
        waiting = make_request("w", arrival=NOW - 0.1, ttft=2.0, prompt=100)
        view, _ = make_view(now=NOW, waiting=[waiting], running=[lost, live])
        return view

    def test_on_the_plan_ends_with_the_victim(self) -> None:
        view = self.view()
        # on in the design; the yield would leave the lost decode out of the plan
        policy = make_slidingserve(yield_violated=False)
        plan = policy.schedule(view)
        assert plan.chunks[-1].request.request_id == "lost"
        assert policy.preemption_victim(view.running, view.now).request_id == "lost"

    def test_off_the_newest_is_the_victim_and_the_plan_keeps_its_order(self) -> None:
        view = self.view()
        policy = make_slidingserve(preempt_lost_first=False, yield_violated=False)
        plan = policy.schedule(view)
        assert [c.request.request_id for c in plan.chunks] == ["lost", "live", "w"]
        assert policy.preemption_victim(view.running, view.now).request_id == "live"

    def test_a_value_that_is_not_a_boolean_is_refused(self) -> None:
        with pytest.raises(ValueError, match="preempt_lost_first must be true or false"):
            make_slidingserve(preempt_lost_first="yes")


class _Queued:
    def __init__(self, request_id: str) -> None:
        self.request_id = request_id


class _Queues:
    def __init__(self, running: list[_Queued]) -> None:
        self.running = running
        self.waiting: deque[_Queued] = deque()
        self.kv_holding_waiting: deque[_Queued] = deque()
        self.max_num_scheduled_tokens = 1024
