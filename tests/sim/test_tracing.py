"""What the simulator records when asked: request traces and the iteration logs' queue and
decode slack, on hand-worked runs; and that recording changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from factories import LinearTimer, make_request

from slidingserve.core import EngineLimits, Request, TimedBatch
from slidingserve.policies import PolicyContext, make_policy
from slidingserve.policies.base import Policy, ReportsRelegations
from slidingserve.predictor import random_batch_shapes
from slidingserve.sim.engine import DECODE_RUN, SimulationRun, Simulator, SimulatorOptions

LIMITS = EngineLimits()
PROFILE = tuple(
    TimedBatch(shape, LinearTimer().sample_time(shape))
    for shape in random_batch_shapes(200, np.random.default_rng(0))
)
"""Timed batches of the default LinearTimer, for QoServe's own model."""


def policy(name: str, **options: object) -> Policy:
    return make_policy(name, PolicyContext(LIMITS, profile=PROFILE), options)


def run(
    requests: list[Request],
    scheduler: Policy | None = None,
    *,
    kv_blocks: int = 10_000,
    record: bool = True,
    fast_forward: bool = True,
) -> SimulationRun:
    options = SimulatorOptions(
        limits=LIMITS, fast_forward=fast_forward, record_iterations=record, trace_requests=record
    )
    return Simulator(scheduler or policy("sarathi"), LinearTimer(), kv_blocks, options).run(
        requests
    )


def test_nothing_is_traced_unless_asked() -> None:
    assert run([make_request()], record=False).traces == {}


def test_first_chunk_is_the_start_of_the_iteration_that_ran_it() -> None:
    # a's 100-token prefill runs over [0, 0.02); b arrives at 0.005 and starts at 0.02.
    a = make_request("a", prompt=100, output=2)
    b = make_request("b", arrival=0.005, prompt=100, output=1)
    traces = run([a, b]).traces
    assert traces["a"].first_chunk == 0.0
    assert traces["b"].first_chunk == pytest.approx(0.02)
    assert traces["a"].preemptions == [] and traces["b"].relegated is None


def test_preemptions_are_recorded_at_the_start_of_the_iteration() -> None:
    # Three blocks of 16: iteration 1 [0, 0.0116) prefills old; iteration 2 decodes old and
    # prefills new (0.01 + 17e-4 s); then both decodes need a fourth block: new is preempted.
    old = make_request("old", prompt=16, output=20)
    new = make_request("new", arrival=0.001, prompt=16, output=20)
    traces = run([old, new], kv_blocks=3).traces
    assert traces["old"].preemptions == []
    assert traces["new"].preemptions == pytest.approx([0.0116 + 0.0117])
    assert traces["new"].first_chunk == pytest.approx(0.0116)  # its first ever chunk


def test_iteration_logs_carry_the_kv_blocks_in_use() -> None:
    # 32 prompt tokens: 2 blocks of 16; decode 1 caches token 33 (a third block), decode 2
    # token 34. Stepped or fast-forwarded, the same blocks.
    for fast_forward in (False, True):
        logs = run([make_request(prompt=32, output=3)], fast_forward=fast_forward).iterations
        assert [log.kv_used for log in logs] == [2, 3, 3]
        assert {log.kv_total for log in logs} == {10_000}
    # The preemption above: old's prefill (1 block); old's decode (2) beside new's prefill
    # (1); new preempted, old decodes alone on its 2 blocks.
    old = make_request("old", prompt=16, output=20)
    new = make_request("new", arrival=0.001, prompt=16, output=20)
    logs = run([old, new], kv_blocks=3).iterations
    assert [log.kv_used for log in logs[:3]] == [1, 3, 2]
    assert all(log.kv_used <= log.kv_total == 3 for log in logs)


def test_qoserve_relegations_are_recorded() -> None:
    # 2,000 prompt tokens at QoServe's initial 8,500 tokens/s take 0.24 s: a 0.05 s TTFT is
    # hopeless and QoServe relegates the request in the first iteration; the other is fine.
    qoserve = policy("qoserve")
    assert isinstance(qoserve, ReportsRelegations)
    hopeless = make_request("hopeless", prompt=2000, output=2, ttft=0.05)
    fine = make_request("fine", prompt=100, output=2, ttft=1.0)
    traces = run([hopeless, fine], qoserve).traces
    assert traces["hopeless"].relegated == 0.0
    assert traces["fine"].relegated is None


def test_iteration_logs_carry_the_queue_and_the_tightest_decode_slack() -> None:
    # a (TTFT 1 s, TBT 0.05 s) emits its first token at 0.02; b waits for iteration 2.
    a = make_request("a", prompt=100, output=3, ttft=1.0, tbt=0.05)
    b = make_request("b", arrival=0.005, prompt=200, output=1, ttft=2.0)
    logs = run([a, b], fast_forward=False).iterations
    assert [log.queued for log in logs] == [1, 1, 0]
    assert logs[0].decode_slack is None
    # Iteration 2 starts at 0.02; a's second token is due at 1.0 + 0.05.
    assert logs[1].decode_slack == pytest.approx(1.05 - 0.02)
    assert logs[2].decode_slack == pytest.approx(1.10 - logs[2].start)


def test_fast_forwarded_logs_match_stepped_ones() -> None:
    def workload() -> list[Request]:
        return [
            make_request(f"r{i}", arrival=0.3 * i, prompt=200 + 50 * i, output=40 + 7 * i,
                         tbt=0.05 + 0.01 * (i % 2))
            for i in range(6)
        ]  # fmt: skip

    stepped, forwarded = run(workload(), fast_forward=False), run(workload())
    assert any(log.path == DECODE_RUN for log in forwarded.iterations)
    assert len(stepped.iterations) == len(forwarded.iterations)
    for a, b in zip(stepped.iterations, forwarded.iterations, strict=True):
        assert (a.start, a.queued) == pytest.approx((b.start, b.queued), rel=1e-12)
        assert (a.kv_used, a.kv_total) == (b.kv_used, b.kv_total)
        if a.decode_slack is None or b.decode_slack is None:
            assert a.decode_slack is b.decode_slack is None
        else:
            assert a.decode_slack == pytest.approx(b.decode_slack, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", ["sarathi-edf", "qoserve", "vllm"])
def test_recording_changes_no_token_time(name: str) -> None:
    def workload() -> list[Request]:
        rng = np.random.default_rng(7)
        return [
            make_request(
                f"r{i}",
                arrival=float(rng.uniform(0, 2)),
                prompt=int(rng.integers(10, 600)),
                output=int(rng.integers(1, 40)),
                ttft=float(rng.uniform(0.05, 1.0)),
            )
            for i in range(40)
        ]

    plain, recorded = workload(), workload()
    quiet = run(plain, policy(name), kv_blocks=60, record=False)
    loud = run(recorded, policy(name), kv_blocks=60)
    assert loud.num_preemptions == quiet.num_preemptions > 0  # the small cache preempts
    for a, b in zip(plain, recorded, strict=True):
        assert a.token_times == b.token_times
    assert set(loud.traces) == {r.request_id for r in recorded}
    assert sum(len(t.preemptions) for t in loud.traces.values()) == loud.num_preemptions
