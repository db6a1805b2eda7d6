"""The simulator and the load generator turn the same token times into the same figures.

A simulated run's finished requests go through the simulator's path (`sim.runner.run_figures`)
and, recorded as the load generator records a stream that sends one token per chunk, through
the load generator's (`bench.runner`'s records, `bench.summarize`). Every figure must agree,
overall and per tier.
"""

from __future__ import annotations

import dataclasses

import pytest

from slidingserve.bench import PlannedRequest, RequestRecord, summarize
from slidingserve.bench.client import StreamProgress
from slidingserve.bench.runner import _make_record
from slidingserve.core import SLO, EngineLimits, Request
from slidingserve.metrics import RunMetrics, TbtReading
from slidingserve.policies import PolicyContext, make_policy
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig
from slidingserve.sim.runner import run_figures, run_policy
from slidingserve.workloads import WorkloadConfig, generate_requests, get_tier_mix

RATE, SEED = 3.0, 4  # loaded enough that some requests miss deadlines, not all


def simulated_requests() -> list[Request]:
    workload = WorkloadConfig("mixed-v1", 150, tiers=get_tier_mix("premium-standard"))
    requests = generate_requests(workload, RATE, SEED, 8192)
    limits = EngineLimits()
    policy = make_policy("sarathi-edf", PolicyContext(limits))
    return run_policy(policy, GroundTruthLatency(HardwareConfig(), SEED), limits, requests).requests


def streamed(request: Request) -> RequestRecord:
    """`request` as the load generator records it: sent when due, a chunk per token, the
    usage event counting them."""
    count = len(request.token_times)
    planned = PlannedRequest(
        request.request_id, request.arrival, (10,) * request.prompt_len, count, request.slo
    )
    progress = StreamProgress(
        sent=request.arrival,
        responded=True,
        chunk_times=list(request.token_times),
        chunk_tokens=[1] * count,
        usage_tokens=count,
        done=True,
    )
    return _make_record(planned, progress, request.token_times[-1])


def figures(metrics: RunMetrics) -> dict[str, float]:
    """The figures the two paths must agree on, by name."""
    named: dict[str, float] = {}
    for reading in TbtReading:
        for field, value in dataclasses.asdict(metrics.violations(reading)).items():
            named[f"{reading.value} {field}"] = value
    for name in ("ttft", "tpot", "itl", "e2e"):
        for stat, value in dataclasses.asdict(getattr(metrics, name)).items():
            named[f"{name} {stat}"] = value
    named.update(goodput=metrics.goodput, goodput_vllm=metrics.goodput_vllm)
    return named


def test_the_simulator_and_the_load_generator_give_the_same_figures() -> None:
    requests = simulated_requests()
    simulated = run_figures(requests)
    records = [streamed(request) for request in requests]
    benched = summarize(records, planned=len(records), duration=simulated.metrics.duration)

    overall = simulated.metrics
    assert 0 < overall.cumulative.overall < overall.per_gap.overall < 1  # both readings matter
    assert sorted(simulated.tiers) == sorted(benched.tiers) == ["premium", "standard"]
    assert figures(benched.metrics) == pytest.approx(figures(overall), rel=0, abs=0)
    for name, tier in simulated.tiers.items():
        assert figures(benched.tiers[name]) == pytest.approx(figures(tier), rel=0, abs=0)
    assert benched.metrics == overall and benched.tiers == simulated.tiers  # every field


def test_a_request_that_never_finished_is_refused_by_the_simulator_s_path() -> None:
    unfinished = Request("r9", 0.0, 10, 3, SLO(1.0, 0.1))
    with pytest.raises(ValueError, match="r9 emitted no token"):
        run_figures([unfinished])
