"""Admission control in the simulator: a refused request finishes at once without a token,
counts as a TTFT violation, and the rest of the run goes on."""

from __future__ import annotations

import pytest
from factories import LinearTimer, TokenLinearModel, make_request, make_view

from slidingserve.core import EngineLimits, Plan, SchedulerView
from slidingserve.core.request import Phase, Request
from slidingserve.metrics.timeline import Outcome, Timeline
from slidingserve.policies import Policy, PolicyContext, make_policy
from slidingserve.policies.base import ControlsAdmission
from slidingserve.policies.sarathi import SarathiConfig, SarathiPolicy
from slidingserve.sim.engine import Simulator, SimulatorOptions
from slidingserve.sim.runner import run_figures


class RefusingSarathi(SarathiPolicy):
    """Sarathi that refuses every waiting request whose id starts with "x"."""

    def schedule(self, view: SchedulerView) -> Plan:
        refused = [r for r in view.waiting if r.request_id.startswith("x")]
        plan = super().schedule(view.without(refused))
        plan.refused = refused
        return plan


def run(requests: list[Request], policy: Policy) -> None:
    options = SimulatorOptions(limits=EngineLimits())
    Simulator(policy, LinearTimer(), 10_000, options).run(requests)


def test_refused_requests_get_no_token_and_the_others_are_served() -> None:
    kept = make_request("a", prompt=100, output=3)
    refused = make_request("x1", prompt=100, output=3)
    alone = make_request("x2", arrival=5.0, prompt=50, output=2)  # refused with nothing else
    run([kept, refused, alone], RefusingSarathi(SarathiConfig(), PolicyContext(EngineLimits())))
    assert refused.refused and refused.phase is Phase.FINISHED and not refused.token_times
    assert alone.refused
    assert len(kept.token_times) == 3
    timeline = Timeline.of_request(refused)
    assert timeline.outcome is Outcome.FAILED
    verdict = timeline.verdict()
    assert verdict is not None and verdict.ttft
    metrics = run_figures([kept, refused, alone]).metrics
    assert metrics.cumulative.overall == pytest.approx(2 / 3)


def test_a_started_request_cannot_be_refused() -> None:
    class RefusesRunning(SarathiPolicy):
        def schedule(self, view: SchedulerView) -> Plan:
            plan = super().schedule(view)
            plan.refused = list(view.prefilling)
            return plan

    policy = RefusesRunning(SarathiConfig(chunk_size=64), PolicyContext(EngineLimits()))
    with pytest.raises(ValueError, match="cannot be refused"):
        run([make_request("a", prompt=500, output=2)], policy)


def test_slidingserve_admission_refuses_only_hopeless_requests() -> None:
    # 10 ms + 0.1 ms a token: a 2048-token batch takes 0.2148 s, ρ ≈ 9,500 tokens/s.
    model = TokenLinearModel(0.01, 1e-4)
    policy = make_policy("slidingserve", PolicyContext(EngineLimits(), model), {"admission": True})
    hopeless = make_request("hopeless", prompt=4000, output=2, ttft=0.2)  # needs ≥ 0.42 s
    fine = make_request("fine", prompt=100, output=2, ttft=1.0)
    run([hopeless, fine], policy)
    assert hopeless.refused
    assert not fine.refused and len(fine.token_times) == 2


class TestQueueAdmission:
    """`admission_test=queue`: a request that does not fit behind the queue is refused at
    its first step; a request admitted is refused later only once it could not make its
    first token even if it ran next."""

    def policy(self) -> Policy:
        # ρ ≈ 9,500 tokens/s observed (as above), but beside the decodes the queue will
        # become an iteration of one 50 ms TBT holds 10 ms + ~400 tokens: ~8,000 tokens/s,
        # ÷ the design's margin of 1.1: about 7,270 in a second.
        model = TokenLinearModel(0.01, 1e-4)
        options = {"admission": True, "admission_test": "queue"}
        return make_policy("slidingserve", PolicyContext(EngineLimits(), model), options)

    def test_what_does_not_fit_behind_the_queue_is_refused_and_the_rest_is_on_time(self) -> None:
        burst = [
            make_request(f"r{i}", arrival=0.001 * i, prompt=2000, output=2, ttft=1.0)
            for i in range(10)
        ]
        run(burst, self.policy())
        admitted = [r for r in burst if not r.refused]
        assert [r.request_id for r in admitted] == ["r0", "r1", "r2"]
        assert all(r.token_times[0] <= r.ttft_deadline for r in admitted)

    def test_requests_admitted_before_the_engine_are_not_tested_again(self) -> None:
        # The burst the test above refuses seven of, each request admitted by an API
        # server in front (`Request.admitted`): none is refused at its first step, and the
        # queue published holds those the triage keeps, as for requests admitted at an
        # earlier step. Those it gives up are refused once they cannot make their first
        # token even if they ran next, and nothing is served late.
        policy = self.policy()
        burst = [
            make_request(f"r{i}", arrival=0.001 * i, prompt=2000, output=2, ttft=1.0)
            for i in range(10)
        ]
        for request in burst:
            request.admitted = True
        first, _ = make_view(now=0.01, waiting=burst)
        assert not policy.schedule(first).refused
        assert isinstance(policy, ControlsAdmission)
        published = policy.admission_queue()
        assert published is not None and 3 <= len(published.queue) < 10
        run(burst, self.policy())
        kept = [r for r in burst if not r.refused]
        assert len(kept) >= 3  # as many served as the test at arrival serves, or more
        assert all(r.token_times[0] <= r.ttft_deadline for r in kept)  # none late
        assert all(not r.token_times for r in burst if r.refused)

    def test_a_request_admitted_is_refused_once_nothing_could_save_it(self) -> None:
        # Admitted at its first step. At 0.5 s it waits still and can make its deadline if
        # it runs next (0.42 s of prefill): kept. At 0.9 s it cannot any more: refused then,
        # not served late, as `admission=true` alone does.
        policy = self.policy()
        request = make_request("r", prompt=4000, output=2, ttft=1.0)
        first, _ = make_view(now=0.0, waiting=[request])
        assert not policy.schedule(first).refused
        still, _ = make_view(now=0.5, waiting=[request])
        assert not policy.schedule(still).refused
        fresh = make_request("fresh", arrival=0.92, prompt=400, output=2, ttft=1.0)
        later, _ = make_view(now=0.95, waiting=[request, fresh])
        assert [r.request_id for r in policy.schedule(later).refused] == ["r"]

    def test_a_pause_in_the_traffic_refuses_nothing_after_it(self) -> None:
        # The gap from the last step before a 30 s pause to the first after it is
        # idleness: counted as the engine's overhead a step it would leave the model ~0
        # of each step's time, and refuse every request that fits an empty engine.
        # The last step before it runs a decode beside a prefill, and both requests end.
        before = [
            make_request("a0", arrival=0.0, prompt=200, output=2),
            make_request("a1", arrival=0.005, prompt=200, output=1),
        ]
        after = [
            make_request(f"b{i}", arrival=30.0 + 0.1 * i, prompt=200, output=5) for i in range(5)
        ]
        run(before + after, self.policy())
        assert not [r.request_id for r in before + after if r.refused]
        assert all(r.token_times[0] <= r.ttft_deadline for r in before + after)

    def test_the_rate_assumed_is_the_prefill_beside_the_decodes_the_queue_will_become(
        self,
    ) -> None:
        policy = self.policy()
        queued = [make_request(f"q{i}", prompt=3000, output=50, ttft=2.0) for i in range(3)]
        first, _ = make_view(now=0.0, waiting=queued)
        policy.schedule(first)  # admitted: fresh at this step, they are the queue at the next
        fresh = make_request("fresh", arrival=0.005, prompt=10, output=2, ttft=2.0)
        later, _ = make_view(now=0.01, waiting=[*queued, fresh])
        policy.schedule(later)
        assert isinstance(policy, ControlsAdmission)
        published = policy.admission_queue()
        assert published is not None
        # Three decodes of 3,000 tokens leave 40 ms − 0.3 ms of a 50 ms TBT: 397 tokens,
        # 7,940 a second ÷ 1.1; the rate observed (~9,500 ÷ 1.1) is not the one assumed.
        assert published.rate == pytest.approx(397 / 0.05 / 1.1, rel=1e-3)

    def test_the_queue_is_published_for_the_api_server(self) -> None:
        policy = self.policy()
        assert isinstance(policy, ControlsAdmission)
        before = policy.admission_queue()  # before any step: empty, at the seed rate
        assert before is not None and before.queue == () and before.rate > 0
        queued = make_request("q", prompt=3000, output=2, ttft=2.0)
        view, _ = make_view(now=0.5, waiting=[queued])
        policy.schedule(view)
        published = policy.admission_queue()
        assert published is not None and published.now == 0.5
        assert published.relative() == [(1.5, 3000)]
        assert 8000 < published.rate < 9000
