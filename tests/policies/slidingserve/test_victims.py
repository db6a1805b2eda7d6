"""Lost requests first, and the most slack, when the KV cache runs short (`victims.py`), and
the same victim through the policy, the simulator and the plan order vLLM preempts from."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from factories import (
    LinearTimer,
    TokenLinearModel,
    make_decoding,
    make_request,
    make_slidingserve,
    make_view,
)

from slidingserve.core import EngineLimits, Plan, ScheduledChunk
from slidingserve.engines.vllm.imposer import PlanImposer
from slidingserve.policies import PolicyContext, make_policy
from slidingserve.policies.slidingserve.victims import (
    lost_first_victim,
    may_preempt,
    most_slack_victim,
    order_for_preemption,
    put_lost_last,
)
from slidingserve.sim.engine import Simulator, SimulatorOptions

NOW = 10.0


def decoding(request_id: str, *, lost: bool, cached: int, slack: float = 1.0) -> Any:
    """A decode with `cached` tokens whose next deadline is 1 s ago (lost) or in `slack` s."""
    ttft = NOW - 1.0 if lost else NOW + slack
    return make_decoding(request_id, prompt=cached, ttft=ttft, tbt=0.05, output=cached + 10)


def imposed_tail(plan: Plan) -> str:
    """The request vLLM preempts first once the imposer has put `plan` on its queues."""
    queues = _Queues([_Queued(chunk.request.request_id) for chunk in reversed(plan.chunks)])
    PlanImposer(queues, 1024).impose(plan)
    return queues.running[-1].request_id


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


class TestMostSlack:
    def running(self) -> list[Any]:
        return [
            decoding("old-tight", lost=False, cached=900, slack=0.2),
            decoding("banked", lost=False, cached=300, slack=3.0),
            decoding("new-tight", lost=False, cached=20, slack=0.1),
        ]

    def test_the_request_with_the_most_slack_goes_not_the_newest(self) -> None:
        assert most_slack_victim(self.running()).request_id == "banked"

    def test_of_two_with_the_same_deadline_the_later_goes(self) -> None:
        running = [decoding(name, lost=False, cached=50, slack=2.0) for name in ("a", "b")]
        assert most_slack_victim(running).request_id == "b"

    def test_a_lost_request_still_goes_first_with_lost_first(self) -> None:
        running = [*self.running(), decoding("lost", lost=True, cached=10)]
        assert lost_first_victim(running, NOW, most_slack=True).request_id == "lost"
        assert lost_first_victim(self.running(), NOW, most_slack=True).request_id == "banked"

    def test_without_lost_first_a_lost_request_has_the_least_slack(self) -> None:
        running = [decoding("lost", lost=True, cached=10), *self.running()]
        assert most_slack_victim(running).request_id == "banked"

    def test_the_plan_order_puts_the_same_victims_at_vllms_tail(self) -> None:
        for lost_first in (True, False):
            running = [decoding("lost", lost=True, cached=10), *self.running()]
            plan = Plan([ScheduledChunk(request, 1) for request in running])
            order_for_preemption(plan, NOW, lost_first)
            if lost_first:
                expected = ["new-tight", "old-tight", "banked", "lost"]
                assert imposed_tail(plan) == lost_first_victim(running, NOW, True).request_id
            else:
                expected = ["lost", "new-tight", "old-tight", "banked"]
                assert imposed_tail(plan) == most_slack_victim(running).request_id
            assert [chunk.request.request_id for chunk in plan.chunks] == expected

    def test_the_requests_it_starts_keep_their_order_among_themselves(self) -> None:
        late = make_request("start-late", ttft=NOW + 5.0, prompt=100)
        soon = make_request("start-soon", ttft=NOW + 0.5, prompt=100)
        plan = Plan(
            [
                ScheduledChunk(late, 100),
                ScheduledChunk(decoding("banked", lost=False, cached=50, slack=3.0), 1),
                ScheduledChunk(soon, 100),
                ScheduledChunk(decoding("tight", lost=False, cached=50, slack=0.1), 1),
            ]
        )
        order_for_preemption(plan, NOW, lost_first=True)
        order = [chunk.request.request_id for chunk in plan.chunks]
        assert order == ["tight", "banked", "start-late", "start-soon"]

    def test_may_preempt_only_when_the_decodes_next_tokens_lack_blocks(self) -> None:
        # Two 16-token decodes fill their blocks: each next token needs a new block.
        running = [decoding(name, lost=False, cached=16) for name in ("a", "b")]
        for free, expected in ((1, True), (2, False)):
            view, kv = make_view(now=NOW, running=running, kv_blocks=2 + free)
            assert kv.num_free == free
            assert may_preempt(view) is expected

    def test_fewer_free_blocks_than_decodes_is_not_enough(self) -> None:
        # One decode fills its block, the other has room in its own: one block needed.
        running = [
            decoding("full", lost=False, cached=16),
            decoding("room", lost=False, cached=20),
        ]
        view, kv = make_view(now=NOW, running=running, kv_blocks=3 + 1)
        assert kv.num_free == 1 < len(view.decoding)
        assert not may_preempt(view)


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
        with pytest.raises(ValueError, match="preempt_most_slack must be true or false"):
            make_slidingserve(preempt_most_slack=1)


class TestMostSlackThroughThePolicy:
    def short_view(self, free: int) -> Any:
        """Three decodes whose next tokens each need a new block, `free` blocks free."""
        running = [
            decoding("banked", lost=False, cached=16, slack=3.0),
            decoding("tight", lost=False, cached=32, slack=0.2),
            decoding("newest", lost=False, cached=16, slack=0.5),
        ]
        view, _ = make_view(now=NOW, running=running, kv_blocks=4 + free)
        return view

    def test_where_the_cache_runs_short_the_plan_ends_with_the_most_slack(self) -> None:
        view = self.short_view(free=2)
        policy = make_slidingserve(preempt_most_slack=True)
        plan = policy.schedule(view)
        assert [c.request.request_id for c in plan.chunks] == ["tight", "newest", "banked"]
        assert policy.preemption_victim(view.running, NOW).request_id == "banked"
        assert imposed_tail(plan) == "banked"

    def test_where_it_has_room_the_plan_keeps_its_order(self) -> None:
        view = self.short_view(free=3)
        plan = make_slidingserve(preempt_most_slack=True).schedule(view)
        assert [c.request.request_id for c in plan.chunks] == ["banked", "tight", "newest"]

    def test_off_the_newest_is_the_victim(self) -> None:
        view = self.short_view(free=2)
        policy = make_slidingserve(preempt_most_slack=False, preempt_lost_first=False)
        assert policy.preemption_victim(view.running, NOW).request_id == "newest"

    def test_the_simulator_preempts_the_request_with_the_most_slack(self) -> None:
        # Three blocks of 16: both 16-token prompts fit, both cannot grow to 36 tokens. The
        # older request has a TTFT of 10 s, the newer one of 1 s: the older one has the
        # most slack, and is preempted instead of the newest.
        def run(most_slack: bool) -> tuple[Any, Any]:
            old = make_request("old", prompt=16, output=20, ttft=10.0)
            new = make_request("new", arrival=0.001, prompt=16, output=20, ttft=1.0)
            context = PolicyContext(EngineLimits(), TokenLinearModel(0.010, 1e-5))
            # The forecast off: it would keep the two from starting together.
            options = {"preempt_most_slack": most_slack, "kv_headroom": 0, "kv_forecast": 0}
            policy = make_policy("slidingserve", context, options)
            Simulator(policy, LinearTimer(), 3, SimulatorOptions()).run([old, new])
            return old, new

        old, new = run(most_slack=True)
        assert old.num_preemptions >= 1 and new.num_preemptions == 0
        assert len(old.token_times) == 20 and len(new.token_times) == 20
        old, new = run(most_slack=False)
        assert new.num_preemptions >= 1 and old.num_preemptions == 0


class _Queued:
    def __init__(self, request_id: str) -> None:
        self.request_id = request_id


class _Queues:
    def __init__(self, running: list[_Queued]) -> None:
        self.running = running
        self.waiting: deque[_Queued] = deque()
        self.kv_holding_waiting: deque[_Queued] = deque()
        self.max_num_scheduled_tokens = 1024
