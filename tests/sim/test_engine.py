"""The simulator on hand-worked runs and, under hypothesis, its invariants."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pytest
from factories import CheckingPolicy, LinearTimer, TokenLinearModel, make_request
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.core import (
    EngineLimits,
    Plan,
    Request,
    SchedulerView,
    TimedBatch,
    blocks_for_tokens,
)
from slidingserve.policies import POLICIES, Policy, PolicyContext, make_policy
from slidingserve.predictor import random_batch_shapes
from slidingserve.sim.engine import (
    SchedulingStallError,
    SimulationRun,
    Simulator,
    SimulatorOptions,
)


def simulate(
    requests: list[Request],
    policy: str | Policy = "sarathi",
    *,
    limits: EngineLimits = EngineLimits(),
    kv_blocks: int = 10_000,
    fast_forward: bool = True,
    timer: LinearTimer | None = None,
) -> SimulationRun:
    if isinstance(policy, str):
        policy = make_policy(policy, PolicyContext(limits))
    options = SimulatorOptions(limits=limits, fast_forward=fast_forward, record_iterations=True)
    return Simulator(policy, timer or LinearTimer(), kv_blocks, options).run(requests)


class TestHandWorked:
    def test_one_request_prefill_then_decodes(self) -> None:
        # 100-token prefill: 0.01 + 100e-4 = 0.02 s; each decode 0.01 + 1e-4 = 0.0101 s.
        request = make_request(prompt=100, output=3)
        simulate([request], fast_forward=False)
        assert request.token_times == pytest.approx([0.02, 0.0301, 0.0402])

    def test_chunked_prefill_spans_iterations(self) -> None:
        request = make_request(prompt=1000, output=1)
        run = simulate([request])
        # Chunks of 512 and 488: 0.0612 + 0.0588 s.
        assert request.token_times == pytest.approx([0.12])
        assert [log.num_tokens for log in run.iterations] == [512, 488]

    def test_engine_waits_for_the_first_arrival(self) -> None:
        request = make_request(arrival=5.0, prompt=100, output=1)
        simulate([request])
        assert request.token_times == pytest.approx([5.02])

    def test_a_request_arriving_mid_iteration_joins_the_next_one(self) -> None:
        first = make_request("a", prompt=100, output=5)
        second = make_request("b", arrival=0.025, prompt=100, output=1)
        simulate([first, second])
        # Iteration 1 [0, 0.02): a's prefill. Iteration 2 [0.02, 0.0301): a decodes; b is
        # not there yet. Iteration 3 [0.0301, ...): a decode + b's 100 tokens = 0.0201 s.
        assert second.token_times == pytest.approx([0.0502])
        assert first.token_times[:3] == pytest.approx([0.02, 0.0301, 0.0502])

    def test_fast_forward_gives_the_same_token_times(self) -> None:
        def workload() -> list[Request]:
            return [
                make_request(f"r{i}", arrival=0.3 * i, prompt=200 + 50 * i, output=40 + 7 * i)
                for i in range(6)
            ]

        slow, fast = workload(), workload()
        simulate(slow, fast_forward=False)
        run = simulate(fast)
        assert run.num_fast_forwarded > 0
        for a, b in zip(slow, fast, strict=True):
            assert a.token_times == pytest.approx(b.token_times, rel=1e-12)

    def test_decode_growth_preempts_the_newest_request(self) -> None:
        # Three blocks of 16: both 16-token prompts fit, but both cannot grow to 36 tokens.
        old = make_request("old", prompt=16, output=20)
        new = make_request("new", arrival=0.001, prompt=16, output=20)
        run = simulate([old, new], kv_blocks=3)
        assert run.num_preemptions == 1  # and no thrashing after it
        assert new.num_preemptions >= 1 and old.num_preemptions == 0
        assert len(old.token_times) == 20 and len(new.token_times) == 20

    def test_the_policy_chooses_the_victim(self) -> None:
        sarathi = make_policy("sarathi", PolicyContext(EngineLimits()))

        class OldestVictim(type(sarathi)):  # type: ignore[misc]
            def preemption_victim(self, running: Sequence[Request], now: float) -> Request:
                return running[0]

        old = make_request("old", prompt=16, output=20)
        new = make_request("new", arrival=0.001, prompt=16, output=20)
        run = simulate([old, new], OldestVictim(sarathi.config, sarathi.context), kv_blocks=3)
        assert run.num_preemptions == 1
        assert old.num_preemptions == 1 and new.num_preemptions == 0
        assert len(old.token_times) == 20 and len(new.token_times) == 20

    def test_request_too_big_for_the_cache_is_rejected_up_front(self) -> None:
        with pytest.raises(ValueError, match="r0 needs 7 KV blocks"):
            simulate([make_request(prompt=90, output=10)], kv_blocks=6)

    def test_a_policy_that_schedules_nothing_is_reported(self) -> None:
        class Idle(Policy):
            name = "idle"
            config_type = type(None)

            def schedule(self, view: SchedulerView) -> Plan:
                return Plan()

        with pytest.raises(SchedulingStallError, match="idle"):
            simulate([make_request()], Idle(None, PolicyContext(EngineLimits())))


LINEAR_PROFILE = tuple(
    TimedBatch(shape, LinearTimer().sample_time(shape))
    for shape in random_batch_shapes(200, np.random.default_rng(0))
)
"""Timed batches of the default LinearTimer, for policies that fit their own model."""


request_specs = st.lists(
    st.tuples(
        st.floats(0, 2.0),  # arrival
        st.integers(1, 1500),  # prompt
        st.integers(1, 60),  # output
        st.floats(0.05, 3.0),  # TTFT SLO: deadline-ordering policies reorder the queue
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=120, deadline=None)
@given(
    specs=request_specs,
    policy_name=st.sampled_from(sorted(POLICIES)),
    budget=st.integers(8, 1024),
    max_seqs=st.integers(1, 16),
    spare_blocks=st.one_of(st.integers(0, 8), st.integers(0, 200)),  # often a tight cache
    fast_forward=st.booleans(),
)
def test_simulator_invariants(
    specs: list[tuple[float, int, int, float]],
    policy_name: str,
    budget: int,
    max_seqs: int,
    spare_blocks: int,
    fast_forward: bool,
) -> None:
    requests = [
        make_request(f"r{i}", arrival=a, prompt=p, output=o, ttft=t)
        for i, (a, p, o, t) in enumerate(specs)
    ]
    limits = EngineLimits(max_num_batched_tokens=budget, max_num_seqs=max_seqs)
    biggest = max(blocks_for_tokens(r.prompt_len + r.output_len, 16) for r in requests)
    option = {
        "vllm": "max_num_batched_tokens",
        "vllm-priority": "max_num_batched_tokens",
        "sarathi": "chunk_size",
        "sarathi-edf": "chunk_size",
        "random-chunk": "max_budget",
    }.get(policy_name, "max_batch_tokens")
    context = PolicyContext(limits, TokenLinearModel(0.01, 1e-4), LINEAR_PROFILE)
    policy = CheckingPolicy(make_policy(policy_name, context, {option: budget}), budget)
    run = simulate(
        requests, policy, limits=limits, kv_blocks=biggest + spare_blocks, fast_forward=fast_forward
    )
    assert run.blocks_in_use_at_end == 0  # every block came back
    assert run.num_preemptions <= 20 * len(requests)  # no thrashing
    for request in requests:
        times = request.token_times
        if request.refused:  # admission control (scorpio's rejection): no token, ever
            assert not times
            continue
        assert len(times) == request.output_len  # completed, never more tokens than asked
        assert times[0] > request.arrival
        assert all(a < b for a, b in itertools.pairwise(times))


def test_fast_forward_is_exact_on_the_noisy_ground_truth() -> None:
    from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig
    from slidingserve.workloads import WorkloadConfig, generate_requests

    def run(fast_forward: bool) -> list[Request]:
        requests = generate_requests(WorkloadConfig("sharegpt", 60), 1.5, 3, 8192)
        latency = GroundTruthLatency(HardwareConfig(noise=0.05), seed=3)
        policy = make_policy("sarathi", PolicyContext(EngineLimits()))
        options = SimulatorOptions(fast_forward=fast_forward)
        Simulator(policy, latency, latency.kv_capacity_blocks(16), options).run(requests)
        return requests

    stepped, forwarded = run(False), run(True)
    for a, b in zip(stepped, forwarded, strict=True):
        assert a.token_times == pytest.approx(b.token_times, rel=1e-12)


def test_fast_forwarded_iterations_are_logged() -> None:
    requests = [make_request("a", prompt=100, output=50), make_request("b", prompt=80, output=30)]
    run = simulate(requests)
    assert run.num_fast_forwarded > 0
    assert len(run.iterations) == run.num_iterations + run.num_fast_forwarded
    starts = [log.start for log in run.iterations]
    assert starts == sorted(starts)
    assert run.iterations[-1].start + run.iterations[-1].duration == pytest.approx(run.end_time)


def test_a_reordering_policy_on_a_full_cache_makes_progress() -> None:
    # Two 180-token prompts in 12 blocks with 64-token chunks: the later arrival has the
    # earlier deadline, so EDF keeps wanting it first. It must not be re-admitted in the
    # iteration that preempted it (which livelocked).
    a = make_request("a", arrival=0.0, prompt=180, output=4, ttft=5.0)
    b = make_request("b", arrival=0.001, prompt=180, output=4, ttft=0.5)
    limits = EngineLimits()
    policy = make_policy("sarathi-edf", PolicyContext(limits), {"chunk_size": 64})
    run = simulate([a, b], policy, kv_blocks=12)
    assert len(a.token_times) == 4 and len(b.token_times) == 4
    assert run.num_preemptions <= 2
