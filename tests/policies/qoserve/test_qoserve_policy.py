"""The QoServe policy on hand-made queues, and once through the simulator."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from factories import make_decoding, make_request, make_view

from slidingserve.core import BatchShape, EngineLimits, Plan, Request, SchedulerView, TimedBatch
from slidingserve.policies import IterationRecord, PolicyContext, make_policy
from slidingserve.policies.qoserve import QoServeConfig, QoServePolicy
from slidingserve.policies.qoserve.predictor import QoServeLinear, QoServePredictor
from slidingserve.predictor import Sample, random_batch_shapes

PER_TOKEN = QoServePredictor(
    QoServeLinear(0.010, (1e-5, 0, 0, 0, 0)), QoServeLinear(0.010, (1e-5, 0, 0, 0, 0))
)
"""10 ms plus 10 µs per batch token, on both sides of the split."""

WITH_PREFILL_CONTEXT = QoServePredictor(
    QoServeLinear(0.010, (1e-5, 0, 0, 0, 1e-6)), QoServeLinear(0.010, (1e-5, 0, 0, 0, 1e-6))
)
"""The same plus 1 µs per cached token of the prefill."""


def policy_for(
    truth: QoServePredictor = PER_TOKEN, limits: EngineLimits = EngineLimits(), **options: Any
) -> QoServePolicy:
    """A policy fitted to batches timed exactly by `truth` (so it predicts like `truth`)."""
    shapes = random_batch_shapes(600, np.random.default_rng(0))
    profile = [TimedBatch(shape, truth.predict_shape(shape)) for shape in shapes]
    policy = make_policy("qoserve", PolicyContext(limits, profile=profile), options)
    assert isinstance(policy, QoServePolicy)
    return policy


def tight_decodes() -> list[Request]:
    """Two decodes whose next deadline is 30 ms away at t = 0: room for 1280 tokens."""
    return [make_decoding(f"d{i}", ttft=0.02, tbt=0.01) for i in range(2)]


def entries(plan: Plan) -> list[tuple[str, int]]:
    return [(chunk.request.request_id, chunk.tokens) for chunk in plan.chunks]


def schedule(policy: QoServePolicy, view: SchedulerView) -> list[tuple[str, int]]:
    return entries(policy.schedule(view))


def test_a_profile_is_required() -> None:
    with pytest.raises(ValueError, match=r"'qoserve'.*timed batches"):
        make_policy("qoserve", PolicyContext(EngineLimits()))


def test_the_fitted_predictor_predicts_like_the_profile() -> None:
    policy = policy_for()
    shape = BatchShape((100, 200), ((700, 0),))
    assert policy.predictor.predict_shape(shape) == pytest.approx(0.010 + 702e-5, rel=1e-6)


def test_decodes_first_then_prefills_by_priority_up_to_the_chosen_total() -> None:
    # Priority keys: a 2 + 0.008 × 600 = 6.8 s; b 3 + 0.008 × 100 = 3.8 s: b first.
    a = make_request("a", ttft=2.0, prompt=600)
    b = make_request("b", ttft=3.0, prompt=100)
    c = make_request("c", ttft=9.0, prompt=2000)
    view, _ = make_view(waiting=[a, b, c], running=tight_decodes())
    plan = policy_for().schedule(view)
    assert entries(plan) == [("d0", 1), ("d1", 1), ("b", 100), ("a", 600), ("c", 578)]
    assert plan.path == "qoserve:grid"
    assert plan.predicted_time == pytest.approx(0.010 + 1280e-5, rel=1e-6)


def test_the_head_of_the_queue_sets_the_prefill_context() -> None:
    # With 5000 cached tokens at the head: 1.2 × (15 ms + 10 µs × total) ≤ 30 ms → 768.
    head = make_request("head", ttft=0.5, prompt=8000, computed=5000)
    view, _ = make_view(running=[*tight_decodes(), head])
    plan = policy_for(WITH_PREFILL_CONTEXT).schedule(view)
    assert entries(plan) == [("d0", 1), ("d1", 1), ("head", 766)]
    fresh, _ = make_view(waiting=[make_request("new", prompt=8000)], running=tight_decodes())
    assert entries(policy_for(WITH_PREFILL_CONTEXT).schedule(fresh))[-1] == ("new", 1278)


def test_a_late_decode_limits_the_batch_to_the_fallback_chunk() -> None:
    late = make_decoding("late", ttft=0.02, tbt=0.01)  # next deadline 0.03 s
    view, _ = make_view(now=0.05, waiting=[make_request("w", prompt=3000)], running=[late])
    plan = policy_for().schedule(view)
    assert entries(plan) == [("late", 1), ("w", 127)]
    assert plan.path == "qoserve:late-decode"


def test_without_decodes_the_largest_grid_value_capped_by_the_budget() -> None:
    view, _ = make_view(waiting=[make_request("w", prompt=3000, ttft=60.0)])
    assert schedule(policy_for(), view) == [("w", 2048)]
    assert schedule(policy_for(max_batch_tokens=1000), view) == [("w", 1000)]


def test_low_free_memory_switches_to_the_small_grid() -> None:
    # 1500 free blocks × 16 / 32 = 750 < 1000.
    view, _ = make_view(waiting=[make_request("w", prompt=3000, ttft=60.0)], kv_blocks=1500)
    plan = policy_for().schedule(view)
    assert entries(plan) == [("w", 512)]
    assert plan.path == "qoserve:no-decodes:low-kv"


class TestDecodeChunkSize:
    def decodes(self, count: int) -> list[Request]:
        """`count` decodes; the later the index, the earlier the next deadline."""
        return [make_decoding(f"d{i}", ttft=10.0 - i / 1000) for i in range(count)]

    def test_decodes_beyond_the_chunk_size_wait(self) -> None:
        limits = EngineLimits(max_num_seqs=512)
        view, _ = make_view(running=self.decodes(300), limits=limits)
        scheduled = schedule(policy_for(limits=limits), view)
        assert scheduled == [(f"d{i}", 1) for i in range(299, 43, -1)]  # the 256 most urgent

    def test_schedules_all_decodes_says_so(self) -> None:
        policy = policy_for()
        assert policy.schedules_all_decodes(256)
        assert not policy.schedules_all_decodes(257)
        assert policy_for(decode_chunk_size=300).schedules_all_decodes(300)
        assert not policy_for(max_batch_tokens=100).schedules_all_decodes(101)


class TestEagerRelegation:
    def queue(self) -> tuple[Request, Request]:
        # At 8500 tok/s the 10,000-token prompt needs 1.18 s > its 1 s TTFT.
        return (
            make_request("hopeless", ttft=1.0, prompt=10_000),
            make_request("ok", ttft=3.0, prompt=100),
        )

    def test_a_hopeless_request_sinks_to_the_back(self) -> None:
        view, _ = make_view(waiting=self.queue())
        assert schedule(policy_for(priority_weight=0.0), view) == [("ok", 100), ("hopeless", 1948)]

    def test_switched_off_it_keeps_its_deadline_order(self) -> None:
        view, _ = make_view(waiting=self.queue())
        policy = policy_for(priority_weight=0.0, eager_relegation=False)
        assert schedule(policy, view) == [("hopeless", 2048)]

    def test_relegated_once_and_forgotten_when_gone(self) -> None:
        hopeless, ok = self.queue()
        policy = policy_for(priority_weight=0.0)
        view, _ = make_view(waiting=[hopeless, ok])
        policy.schedule(view)
        assert set(policy.relegation.ids) == {"hopeless"}
        faster = make_view(now=0.0, waiting=[hopeless, ok])[0]
        policy.throughput.value = 1e9  # it could make it now, but stays relegated
        assert schedule(policy, faster)[0] == ("ok", 100)
        policy.schedule(make_view(waiting=[ok])[0])
        assert set(policy.relegation.ids) == set()

    def test_a_started_request_is_never_relegated(self) -> None:
        started = make_request("started", ttft=1.0, prompt=10_000, computed=16)
        view, _ = make_view(running=[started])
        policy = policy_for()
        policy.schedule(view)
        assert set(policy.relegation.ids) == set()


class TestThroughputEstimate:
    def record(self, prefill_tokens: int, seconds: float) -> IterationRecord:
        chunks = ((prefill_tokens, 0),) if prefill_tokens else ()
        return IterationRecord(0.0, seconds, Plan(), BatchShape((100,) * 4, chunks))

    def test_one_step(self) -> None:
        policy = policy_for()
        policy.on_iteration_end(self.record(1000, 0.05))
        assert policy.throughput.value == pytest.approx(0.995 * 8500 + 0.005 * 20_000)

    def test_decode_only_steps_leave_it_unchanged(self) -> None:
        # The authors' rule: observed only after a step with prefill tokens.
        policy = policy_for()
        for seconds in (0.02, 0.03, 0.05):
            policy.on_iteration_end(self.record(0, seconds))
        assert policy.throughput.value == 8500.0
        policy.on_iteration_end(self.record(500, 0.05))  # 10,000 tok/s
        assert policy.throughput.value == pytest.approx(0.995 * 8500 + 0.005 * 10_000)

    def test_a_fast_forwarded_decode_run_leaves_it_unchanged(self) -> None:
        policy = policy_for()
        policy.on_decode_run([0.02] * 300, 4)
        assert policy.throughput.value == 8500.0


def test_a_light_sharegpt_load_meets_its_slos() -> None:
    from slidingserve.sim.runner import SimulationSpec, simulate
    from slidingserve.workloads import WorkloadConfig

    result = simulate(SimulationSpec("qoserve", WorkloadConfig("sharegpt", 100)), 1.0, 0)
    assert result.metrics.requests == 100
    assert result.violations.overall <= 0.01


def test_the_config_type_is_registered() -> None:
    assert QoServePolicy.config_type is QoServeConfig and QoServePolicy.needs_profile


class TestRelegationInTheFillLoop:
    """The authors test relegation only on the requests their fill loop pops."""

    def queue(self, head_prompt: int) -> list[Request]:
        # At t = 30 s and ρ = 8500 tok/s: a (due 34 s) and b (due 35 s) can make it;
        # c (due 36 s) needs 60,000 / 8500 = 7.06 s: hopeless. Weight 0: order a, b, c.
        return [
            make_request("a", arrival=29.0, ttft=5.0, prompt=head_prompt),
            make_request("b", arrival=29.0, ttft=6.0, prompt=100),
            make_request("c", arrival=0.0, ttft=36.0, prompt=60_000),
        ]

    def test_a_hopeless_request_the_loop_does_not_reach_stays_unrelegated(self) -> None:
        view, _ = make_view(now=30.0, waiting=self.queue(head_prompt=3000))
        policy = policy_for(priority_weight=0.0)
        # a takes the whole 2048-token budget; b is popped, finds it spent, and stops the loop.
        assert schedule(policy, view) == [("a", 2048)]
        assert set(policy.relegation.ids) == set()

    def test_a_reached_hopeless_request_is_relegated_then_served_last(self) -> None:
        view, _ = make_view(now=30.0, waiting=self.queue(head_prompt=100))
        policy = policy_for(priority_weight=0.0)
        assert schedule(policy, view) == [("a", 100), ("b", 100), ("c", 1848)]
        assert set(policy.relegation.ids) == {"c"}

    def test_relegated_requests_behind_one_that_can_still_make_it(self) -> None:
        # d (due 33 s, 40,000 tokens: hopeless) comes first by deadline, is relegated when
        # popped and goes behind a and b, which then share the budget before it.
        d = make_request("d", arrival=0.0, ttft=33.0, prompt=40_000)
        view, _ = make_view(now=30.0, waiting=[d, *self.queue(head_prompt=100)[:2]])
        policy = policy_for(priority_weight=0.0)
        assert schedule(policy, view) == [("a", 100), ("b", 100), ("d", 1848)]
        assert set(policy.relegation.ids) == {"d"}


class TestLateFirstToken:
    """A decode whose first token came late has its TBT deadlines anchored at that token."""

    def view(self) -> SchedulerView:
        # Due at 0.02 + 0.05 = 0.07 s, but the first token came at 0.10 s: at t = 0.10 the
        # project's deadline has passed; anchored at 0.10 the next token is due at 0.15 s.
        late = make_decoding("late", ttft=0.02, tbt=0.05)
        late.token_times.append(0.10)
        view, _ = make_view(now=0.10, waiting=[make_request("w", prompt=3000)], running=[late])
        return view

    def test_it_keeps_normal_chunking(self) -> None:
        # Slack 0.05 s: 1.2 × (10 ms + 10 µs × total) ≤ 50 ms up to 3,333: the grid's 2048.
        plan = policy_for().schedule(self.view())
        assert entries(plan) == [("late", 1), ("w", 2047)]
        assert plan.path == "qoserve:grid"

    def test_switched_off_the_late_decode_forces_the_fallback_chunk(self) -> None:
        plan = policy_for(reanchor_late_decodes=False).schedule(self.view())
        assert entries(plan) == [("late", 1), ("w", 127)]
        assert plan.path == "qoserve:late-decode"


def test_refit_replaces_the_predictor_with_one_fitted_to_the_samples() -> None:
    policy = policy_for()
    slower = QoServePredictor(
        QoServeLinear(0.020, (3e-5, 0, 0, 0, 0)), QoServeLinear(0.020, (3e-5, 0, 0, 0, 0))
    )
    shapes = random_batch_shapes(400, np.random.default_rng(1))
    policy.refit([Sample.from_shape(shape, slower.predict_shape(shape)) for shape in shapes])
    shape = BatchShape((100, 200), ((700, 0),))
    assert policy.predictor.predict_shape(shape) == pytest.approx(0.020 + 702 * 3e-5, rel=1e-6)
