"""Why requests miss their SLO: each cause on hand-made traces and on hand-built runs, and
on real runs the causes add up to the violating requests."""

from __future__ import annotations

import math

import numpy as np
import pytest
from factories import LinearTimer, finished_request, make_request

from slidingserve.core import EngineLimits, Request, TimedBatch
from slidingserve.eval.diagnose import (
    FULL,
    PREEMPTION_COLUMNS,
    Cause,
    attribute,
    best_prefill_rate,
    cause_of,
    diagnose,
    diagnosis_table,
)
from slidingserve.metrics import TbtReading
from slidingserve.policies import PolicyContext, make_policy
from slidingserve.predictor import random_batch_shapes
from slidingserve.sim.engine import Simulator, SimulatorOptions
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig
from slidingserve.sim.runner import SimulationSpec
from slidingserve.sim.tracing import RequestTrace
from slidingserve.workloads import WorkloadConfig

CUMULATIVE, PER_GAP = TbtReading.CUMULATIVE, TbtReading.PER_GAP


class TestCauseOfOneRequest:
    """A 10-token prompt, TTFT 1 s, TBT 0.1 s (deadlines 1.0, 1.1, 1.2, ...), ρ* = 100
    tokens/s: its prefill takes at least 0.1 s, so a first chunk after 0.9 s is too late."""

    RATE = 100.0

    def cause(
        self,
        times: list[float],
        start: float,
        preemptions: tuple[float, ...] = (),
        relegated: float | None = None,
        reading: TbtReading = CUMULATIVE,
    ) -> Cause | None:
        request = finished_request("r", 0.0, times, ttft=1.0, tbt=0.1)
        trace = RequestTrace(start, list(preemptions), relegated)
        violation = cause_of(request, trace, reading, self.RATE)
        return None if violation is None else violation.cause

    def test_in_time_has_no_cause(self) -> None:
        assert self.cause([0.5, 0.6, 0.7], start=0.1) is None

    @pytest.mark.parametrize(
        ("start", "cause"), [(0.95, Cause.QUEUEING), (0.9, Cause.SLOW_PREFILL)]
    )
    def test_a_late_first_token_is_queueing_only_if_it_started_too_late(
        self, start: float, cause: Cause
    ) -> None:
        assert self.cause([1.2, 1.25], start=start) is cause

    def test_a_late_later_token_is_a_decode_stall(self) -> None:
        assert self.cause([0.9, 1.0, 1.4], start=0.1) is Cause.DECODE_STALL

    def test_a_preemption_before_the_first_late_token_takes_precedence(self) -> None:
        assert self.cause([0.9, 1.0, 1.4], 0.1, preemptions=(0.95,)) is Cause.PREEMPTED
        assert self.cause([1.2, 1.25], 0.5, (0.6,), relegated=0.5) is Cause.PREEMPTED

    def test_a_relegation_before_the_first_late_token_takes_precedence(self) -> None:
        assert self.cause([1.2, 1.25], start=0.95, relegated=0.5) is Cause.RELEGATED

    def test_events_after_the_first_late_token_do_not_count(self) -> None:
        # The first token, due at 1.0, came at 1.2: a preemption or relegation at 1.3 came
        # after the damage.
        late = [1.2, 1.25, 1.5]
        assert self.cause(late, 0.95, preemptions=(1.3,), relegated=1.3) is Cause.QUEUEING

    def test_the_reading_decides_which_token_is_late(self) -> None:
        # A 0.4 s pause before the third token: covered by banked slack cumulatively.
        times = [0.2, 0.3, 0.7, 0.75]
        assert self.cause(times, start=0.1) is None
        assert self.cause(times, start=0.1, reading=PER_GAP) is Cause.DECODE_STALL

    def test_wait_and_prefill_are_measured_from_the_trace(self) -> None:
        request = finished_request("r", 0.2, [1.4, 1.45], ttft=1.0)
        violation = cause_of(request, RequestTrace(0.5), CUMULATIVE, self.RATE)
        assert violation is not None
        assert (violation.wait, violation.prefill) == pytest.approx((0.3, 0.9))
        assert violation.first_late_token == 0


def test_best_prefill_rate_is_the_fastest_chunk() -> None:
    # 0.01 + 1e-4·c seconds for c tokens: the rate grows with c, best at the budget.
    assert best_prefill_rate(LinearTimer().sample_time, 2048) == pytest.approx(2048 / 0.2148)


LIMITS = EngineLimits()
BEST_RATE = best_prefill_rate(LinearTimer().sample_time, LIMITS.max_num_batched_tokens)
PROFILE = tuple(
    TimedBatch(shape, LinearTimer().sample_time(shape))
    for shape in random_batch_shapes(200, np.random.default_rng(0))
)


def causes_of_run(
    requests: list[Request], policy: str, kv_blocks: int = 10_000, **options: object
) -> dict[str, Cause]:
    """Simulate `requests` on the LinearTimer GPU, recorded; each violator's cause."""
    scheduler = make_policy(policy, PolicyContext(LIMITS, profile=PROFILE), options)
    recording = SimulatorOptions(limits=LIMITS, record_iterations=True, trace_requests=True)
    run = Simulator(scheduler, LinearTimer(), kv_blocks, recording).run(requests)
    violations = attribute(run.requests, run.traces, CUMULATIVE, BEST_RATE)
    return {violation.request_id: violation.cause for violation in violations}


class TestHandBuiltRuns:
    def test_a_short_request_behind_a_burst_waits(self) -> None:
        # Ten 2,000-token prompts first (FCFS, 512-token chunks: ~2.4 s of work); the short
        # request behind them starts long after 0.5 s: nothing could have saved it then.
        burst = [make_request(f"b{i}", prompt=2000, output=1, ttft=100.0) for i in range(10)]
        victim = make_request("victim", arrival=0.001, prompt=100, output=1, ttft=0.5)
        assert causes_of_run([*burst, victim], "sarathi") == {"victim": Cause.QUEUEING}

    def test_small_chunks_make_a_prefill_that_started_at_once_too_slow(self) -> None:
        # 2,000 tokens in 128-token chunks: 15 × 0.0228 + 0.018 = 0.36 s > 0.3 s, though at ρ*
        # (9,534 tokens/s) they would take 0.21 s from its start at 0.
        request = make_request("slow", prompt=2000, output=1, ttft=0.3)
        assert causes_of_run([request], "sarathi", chunk_size=128) == {"slow": Cause.SLOW_PREFILL}

    def test_a_big_prefill_stalls_a_decode(self) -> None:
        # a: first token at 0.02 (due 0.03), tokens due every 15 ms. b's 2,000-token prefill
        # joins a's decode in one 0.21 s iteration (vLLM's 2,048-token budget): a's fourth
        # token, due 0.075, comes at 0.25.
        a = make_request("a", prompt=100, output=10, ttft=0.03, tbt=0.015)
        b = make_request("b", arrival=0.035, prompt=2000, output=1, ttft=10.0)
        assert causes_of_run([a, b], "vllm") == {"a": Cause.DECODE_STALL}

    def test_a_preempted_request_is_late_because_of_it(self) -> None:
        # Three KV blocks: both 16-token prompts fit, both decodes cannot grow. The newer is
        # preempted after its first token and waits until the older one finishes.
        old = make_request("old", prompt=16, output=20, ttft=0.05, tbt=0.015)
        new = make_request("new", arrival=0.001, prompt=16, output=20, ttft=0.05, tbt=0.015)
        assert causes_of_run([old, new], "sarathi", kv_blocks=3) == {"new": Cause.PREEMPTED}

    def test_a_relegated_request_is_blamed_on_its_relegation(self) -> None:
        # Hopeless (2,000 tokens in 0.05 s): QoServe relegates it in the first iteration.
        # It would have been `queueing` otherwise: 2,000 / ρ* = 0.21 s > 0.05 s.
        hopeless = make_request("hopeless", prompt=2000, output=2, ttft=0.05)
        fine = make_request("fine", prompt=100, output=2, ttft=1.0)
        assert causes_of_run([hopeless, fine], "qoserve") == {"hopeless": Cause.RELEGATED}


@pytest.mark.parametrize(
    ("policy", "reading"),
    [
        ("sarathi-edf", CUMULATIVE),
        ("slidingserve", CUMULATIVE),
        ("qoserve", CUMULATIVE),
        ("sarathi-edf", PER_GAP),
    ],
)
def test_causes_add_up_to_the_violating_requests_of_a_real_run(
    policy: str, reading: TbtReading
) -> None:
    spec = SimulationSpec(policy, WorkloadConfig("sharegpt", 150), tbt_reading=reading)
    diagnosis = diagnose(spec, 4.0, 1)
    result = diagnosis.result
    violating = round(result.violations.overall * result.violations.judged)
    assert violating > 0
    assert len(diagnosis.violations) == violating
    assert sum(diagnosis.counts.values()) == violating
    row = diagnosis.row()
    assert sum(row[f"{cause.key}_share"] for cause in Cause) == pytest.approx(1.0)
    assert diagnosis.waits.size == diagnosis.prefills.size == 150
    assert (diagnosis.waits >= 0).all() and (diagnosis.prefills > 0).all()
    arrivals = [v.arrival for v in diagnosis.violations]
    assert arrivals == sorted(arrivals)
    assert not math.isnan(row["wait_p50_violating_ms"])
    table = diagnosis_table([diagnosis])
    assert policy in table and f"{violating} ({result.violations.overall:.1%})" in table


def test_preemptions_per_request_and_kv_use_match_the_engine() -> None:
    # Llama-2-7B on an A40 holds ~58k tokens of KV: ShareGPT at 2 req/s fills it.
    hardware = HardwareConfig(gpu="a40", model="llama-2-7b", tp=1)
    spec = SimulationSpec("vllm", WorkloadConfig("sharegpt", 150), hardware)
    diagnosis = diagnose(spec, 2.0, 0)
    preempted = diagnosis.preempted
    assert sum(preempted) == 150  # every request, by how often it was preempted
    total = diagnosis.result.num_preemptions
    assert total > 0 and sum(k * count for k, count in enumerate(preempted)) == total
    assert diagnosis.preemption_times.size == total
    row = diagnosis.row()
    assert [row[key] for key in PREEMPTION_COLUMNS[:3]] == list(preempted[:3])
    assert row["preempted_3_plus"] == sum(preempted[3:])
    occupancy = diagnosis.occupancy()
    assert 0 < occupancy.mean <= occupancy.peak <= 1
    assert occupancy.peak >= FULL and occupancy.full > 0  # it preempted: the cache was full
    blocks = GroundTruthLatency(hardware).kv_capacity_blocks(16)
    assert {log.kv_total for log in diagnosis.iterations} == {blocks}
    assert 0 <= occupancy.prefilling <= occupancy.mean
    assert all(0 <= log.kv_prefilling <= log.kv_used for log in diagnosis.iterations)
    table = diagnosis_table([diagnosis])
    assert "/".join(str(row[key]) for key in PREEMPTION_COLUMNS) in table
    assert f"{occupancy.mean:.0%}/{occupancy.peak:.0%}" in table
    assert f"), {occupancy.prefilling:.0%}" in table


def test_the_blocks_of_started_prefills_are_counted_apart() -> None:
    """The A100 with 40% of its memory, ShareGPT past the goodput: the design leaves
    prefills half done while the cache is full; `whole_prefills` starts none it cannot
    finish."""
    hardware = HardwareConfig(gpu="a100", model="llama-2-7b", gpu_memory_utilization=0.4)
    workload = WorkloadConfig("sharegpt", 300)
    shares = {}
    for whole in (False, True):
        options = {"whole_prefills": whole, "kv_forecast": 0.0}  # the forecast holds both back
        spec = SimulationSpec("slidingserve", workload, hardware, policy_options=options)
        diagnosis = diagnose(spec, 2.2, 0)
        started = [log for log in diagnosis.iterations if log.kv_prefilling]
        assert started  # every long prompt runs in chunks, either way
        shares[whole] = diagnosis.occupancy().prefilling
        assert diagnosis.row()["kv_prefilling_mean"] == shares[whole]
    assert shares[True] < shares[False] / 2
