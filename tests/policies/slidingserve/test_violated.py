"""Violated requests yield to live ones (`violated.py`): who is known violated, when their
decodes leave the iteration, and the same through the policy and the simulator."""

from __future__ import annotations

from typing import Any

import pytest
from factories import make_decoding, make_request, make_slidingserve, make_view
from hypothesis import given
from hypothesis import strategies as st

from slidingserve.core.kv_blocks import next_token_blocks
from slidingserve.policies.slidingserve.violated import ViolatedRequests, violating_ids
from slidingserve.sim.runner import SimulationSpec, simulate
from slidingserve.workloads import WorkloadConfig

NOW = 10.0


TBT = 0.25  # s: binary fractions, so that a deadline can fall exactly on NOW


def decode(request_id: str, *, late_by: float, cached: int = 320) -> Any:
    """A decode (one token out, its blocks full) whose next deadline is `late_by` seconds
    ago (negative: still ahead)."""
    ttft = NOW - late_by - TBT
    return make_decoding(request_id, prompt=cached, ttft=ttft, tbt=TBT, output=cached + 50)


def live_prefill(request_id: str = "live") -> Any:
    return make_request(request_id, arrival=NOW - 0.1, ttft=2.0, prompt=400)


def lost_prefill(request_id: str = "lost") -> Any:
    return make_request(request_id, arrival=NOW - 3.0, ttft=1.0, prompt=400)


def ids(requests: Any) -> list[str]:
    return [r.request_id for r in requests]


class TestWhoIsViolated:
    def test_a_request_past_its_next_deadline_is_violated_and_one_on_time_is_not(self) -> None:
        view, _ = make_view(
            now=NOW,
            waiting=[lost_prefill(), live_prefill()],
            running=[decode("late", late_by=0.25), decode("on-time", late_by=-0.25)],
        )
        violated = ViolatedRequests()
        violated.observe(view)
        assert "late" in violated and "lost" in violated
        assert "on-time" not in violated and "live" not in violated

    def test_a_deadline_exactly_now_is_violated_since_the_token_comes_after_it(self) -> None:
        view, _ = make_view(now=NOW, running=[decode("due-now", late_by=0.0)])
        violated = ViolatedRequests()
        violated.observe(view)
        assert "due-now" in violated

    def test_a_late_first_token_marks_a_request_whose_next_deadline_is_ahead(self) -> None:
        caught_up = decode("caught-up", late_by=-0.5)
        caught_up.token_times = [caught_up.ttft_deadline + 0.01]
        on_time = decode("on-time", late_by=-0.5)
        on_time.token_times = [on_time.ttft_deadline]  # exactly at the deadline: met
        view, _ = make_view(now=NOW, running=[caught_up, on_time])
        violated = ViolatedRequests()
        violated.observe(view)
        assert "caught-up" in violated and "on-time" not in violated

    def test_once_violated_a_request_stays_so_after_it_catches_up(self) -> None:
        request = decode("r", late_by=0.25)
        violated = ViolatedRequests()
        violated.observe(make_view(now=NOW, running=[request])[0])
        request.num_generated += 2  # its next deadline is now 0.25 s ahead
        assert request.next_deadline > NOW
        violated.observe(make_view(now=NOW, running=[request])[0])
        assert "r" in violated

    def test_requests_that_left_are_forgotten_once_the_set_outgrows_the_queues(self) -> None:
        violated = ViolatedRequests()
        for i in range(300):
            violated.observe(make_view(now=NOW, running=[decode(f"gone-{i}", late_by=1.0)])[0])
        assert len(violated) < 300
        stays = decode("stays", late_by=1.0)
        for _ in range(3):
            violated.observe(make_view(now=NOW, running=[stays])[0])
        assert "stays" in violated

    @given(
        st.floats(0.0, 1e4),
        st.floats(1e-3, 50.0),
        st.floats(1e-3, 1.0),
        st.integers(0, 2000),
        st.floats(-5.0, 5.0),
        st.floats(-1e3, 1e5),
    )
    def test_the_one_pass_verdict_is_the_requests_own_deadlines(
        self,
        arrival: float,
        ttft: float,
        tbt: float,
        generated: int,
        first_token_offset: float,
        now: float,
    ) -> None:
        request = make_request("r", arrival=arrival, ttft=ttft, tbt=tbt, output=generated + 1)
        request.num_generated = generated
        if generated:
            request.token_times = [request.ttft_deadline + first_token_offset]
        late_first = bool(request.token_times) and request.token_times[0] > request.ttft_deadline
        expected = request.next_deadline <= now or late_first
        assert violating_ids([request], now) == (["r"] if expected else [])

    def test_on_the_deadlines_themselves_the_verdict_is_the_requests_own(self) -> None:
        request = make_request("r", arrival=0.1, ttft=0.7, tbt=0.3, output=5)
        request.num_generated = 3
        request.token_times = [request.ttft_deadline]  # met, exactly
        assert violating_ids([request], request.next_deadline - 1e-9) == []
        assert violating_ids([request], request.next_deadline) == ["r"]
        request.token_times = [request.ttft_deadline + 1e-12]
        assert violating_ids([request], 0.0) == ["r"]


class TestYielding:
    def test_violated_decodes_leave_while_a_live_request_waits(self) -> None:
        view, _ = make_view(
            now=NOW,
            waiting=[live_prefill()],
            running=[decode("late", late_by=0.25), decode("on-time", late_by=-0.25)],
        )
        kept = ViolatedRequests().yielding(view)
        assert ids(kept.decoding) == ["on-time"] and ids(kept.waiting) == ["live"]
        # Still running: its seat counts against max_num_seqs and its next block is kept.
        assert ids(kept.running) == ["late", "on-time"]
        assert kept.decode_blocks == next_token_blocks(view.kv, view.decoding) == 2

    def test_a_live_prefill_already_started_also_makes_them_yield(self) -> None:
        started = make_request("started", arrival=NOW - 0.1, ttft=2.0, prompt=400, computed=128)
        view, _ = make_view(now=NOW, running=[decode("late", late_by=0.25), started])
        kept = ViolatedRequests().yielding(view)
        assert ids(kept.decoding) == [] and ids(kept.prefilling) == ["started"]

    def test_they_stay_when_only_violated_requests_wait(self) -> None:
        view, _ = make_view(
            now=NOW, waiting=[lost_prefill()], running=[decode("late", late_by=0.25)]
        )
        assert ViolatedRequests().yielding(view) is view

    def test_they_stay_when_nothing_waits(self) -> None:
        view, _ = make_view(now=NOW, running=[decode("late", late_by=0.25)])
        assert ViolatedRequests().yielding(view) is view

    def test_nothing_changes_without_a_violated_decode(self) -> None:
        view, _ = make_view(
            now=NOW, waiting=[live_prefill()], running=[decode("on-time", late_by=-0.25)]
        )
        assert ViolatedRequests().yielding(view) is view


class TestThroughThePolicy:
    def view(self) -> Any:
        running = [decode("late", late_by=0.25), decode("on-time", late_by=-0.25)]
        return make_view(now=NOW, waiting=[live_prefill()], running=running)[0]

    def test_on_the_plan_has_no_violated_decode(self) -> None:
        plan = make_slidingserve(yield_violated=True).schedule(self.view())
        assert ids(c.request for c in plan.chunks) == ["on-time", "live"]

    def test_off_every_decode_runs(self) -> None:
        plan = make_slidingserve(yield_violated=False).schedule(self.view())
        assert sorted(ids(c.request for c in plan.chunks)) == ["late", "live", "on-time"]

    def test_a_value_that_is_not_a_boolean_is_refused(self) -> None:
        with pytest.raises(ValueError, match="yield_violated must be true or false"):
            make_slidingserve(yield_violated="yes")


def test_in_the_simulator_every_request_still_finishes() -> None:
    """Overloaded, the rule acts (the run differs from one without it), and every request
    still finishes: a violated decode waits but is never dropped."""
    workload = WorkloadConfig("sharegpt", 150)
    runs = [
        simulate(SimulationSpec("slidingserve", workload, policy_options=options), 6.0, 0)
        for options in ({"yield_violated": True}, {"yield_violated": False})
    ]
    on, off = (run.metrics for run in runs)
    assert on.completed == off.completed == 150
    assert off.cumulative.overall > 0.05  # overloaded: there were violated requests
    assert on.itl != off.itl
