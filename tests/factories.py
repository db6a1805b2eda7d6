"""Small builders shared by the tests."""

from __future__ import annotations

import dataclasses
import runpy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slidingserve.core import (
    SLO,
    BatchShape,
    EngineLimits,
    KVBlockManager,
    Phase,
    Plan,
    Request,
    SchedulerView,
    TimedBatch,
    blocks_for_tokens,
)
from slidingserve.metrics import Outcome, Percentiles, RunMetrics, Timeline, ViolationRates
from slidingserve.policies import Policy, PolicyContext, make_policy
from slidingserve.policies.slidingserve import SlidingServePolicy
from slidingserve.predictor import Features, Scenario
from slidingserve.predictor.steps import EngineSteps


def make_request(
    request_id: str = "r0",
    *,
    arrival: float = 0.0,
    prompt: int = 100,
    output: int = 10,
    ttft: float = 1.0,
    tbt: float = 0.05,
    protected: bool = False,
    computed: int = 0,
    generated: int = 0,
    phase: Phase | None = None,
) -> Request:
    """A request; `phase` defaults to what `computed`/`generated` imply."""
    if phase is None:
        phase = Phase.DECODING if generated else Phase.PREFILLING if computed else Phase.WAITING
    return Request(
        request_id,
        arrival,
        prompt,
        output,
        SLO(ttft, tbt, protected),
        phase=phase,
        num_computed=computed,
        num_generated=generated,
    )


def finished_request(
    request_id: str,
    arrival: float,
    times: Sequence[float],
    *,
    ttft: float = 1.0,
    tbt: float = 0.1,
    tier: str | None = None,
) -> Request:
    """A simulated request that emitted its tokens at `times`."""
    request = Request(request_id, arrival, 10, len(times), SLO(ttft, tbt, tier=tier))
    request.token_times = list(times)
    return request


def make_timeline(
    times: Sequence[float],
    *,
    arrival: float = 0.0,
    sent: float | None = None,
    ttft: float = 1.0,
    tbt: float = 0.1,
    tier: str | None = None,
    outcome: Outcome = Outcome.COMPLETED,
    tokens: Sequence[int] | None = None,
    usage: int | None = None,
) -> Timeline:
    """Chunks of output at `times`, one token each unless `tokens` says."""
    return Timeline(
        arrival=arrival,
        slo=SLO(ttft, tbt, tier=tier),
        chunk_times=tuple(times),
        chunk_tokens=tuple(tokens) if tokens is not None else (1,) * len(times),
        outcome=outcome,
        output_tokens=usage,
        sent=sent,
    )


def make_decoding(
    request_id: str,
    *,
    prompt: int = 100,
    generated: int = 1,
    output: int = 10,
    arrival: float = 0.0,
    ttft: float = 1.0,
    tbt: float = 0.05,
) -> Request:
    """A request in decode: its prompt and all but its last generated token are cached."""
    return make_request(
        request_id,
        arrival=arrival,
        prompt=prompt,
        output=output,
        ttft=ttft,
        tbt=tbt,
        computed=prompt + generated - 1,
        generated=generated,
    )


def make_view(
    *,
    now: float = 0.0,
    waiting: Sequence[Request] = (),
    running: Sequence[Request] = (),
    limits: EngineLimits = EngineLimits(),
    kv_blocks: int = 100_000,
) -> tuple[SchedulerView, KVBlockManager]:
    """A view over the given queues, with the running requests' blocks already allocated."""
    kv = KVBlockManager(kv_blocks, limits.block_size)
    for request in running:
        saved, request.num_computed = request.num_computed, 0
        kv.grow(request, saved)
        request.num_computed = saved
    view = SchedulerView.from_queues(now, list(waiting), list(running), limits, kv)
    return view, kv


class LinearTimer:
    """A GPU whose batch time is `fixed + per_token · tokens`, seconds, no noise."""

    def __init__(self, fixed: float = 0.01, per_token: float = 1e-4) -> None:
        self.fixed = fixed
        self.per_token = per_token

    def sample_time(self, shape: BatchShape) -> float:
        return self.fixed + self.per_token * shape.num_tokens

    def decode_run_times(self, num_decodes: int, decode_kv: int, steps: int) -> np.ndarray:
        return np.full(steps, self.fixed + self.per_token * num_decodes)

    def consume_noise(self, count: int) -> None:
        """No noise to consume."""


class TokenLinearModel:
    """A latency model: `fixed + per_token · tokens + square · tokens²` (decodes + prefill)."""

    def __init__(self, fixed: float, per_token: float, square: float = 0.0) -> None:
        self.fixed = fixed
        self.per_token = per_token
        self.square = square

    def predict_features(self, scenario: Scenario, x: Features) -> float:
        tokens = x.num_decodes + x.prefill_tokens
        return self.fixed + self.per_token * tokens + self.square * tokens**2


class CheckingPolicy(Policy):
    """Wraps a policy and checks every plan against limits it computes on its own."""

    name = "checking"
    config_type = type(None)

    def __init__(self, inner: Policy, token_budget: int) -> None:
        super().__init__(None, inner.context)
        self.inner = inner
        self.token_budget = token_budget
        self.plans = 0

    def schedule(self, view: SchedulerView) -> Plan:
        plan = self.inner.schedule(view)
        limits = view.limits
        assert plan.total_tokens <= min(self.token_budget, limits.max_num_batched_tokens)
        assert len(plan.chunks) <= limits.max_num_seqs
        new_blocks = sum(
            blocks_for_tokens(r.num_computed + n, limits.block_size) - view.kv.held(r)
            for r, n in plan.chunks
        )
        assert new_blocks <= view.kv.num_free
        assert view.num_running + sum(1 for r, _ in plan.chunks if r in view.waiting) <= (
            limits.max_num_seqs
        )
        self.plans += 1
        return plan

    def schedules_all_decodes(self, num_decoding: int) -> bool:
        return self.inner.schedules_all_decodes(num_decoding)


STEP_BASE, STEP_PER_DECODE, STEP_PER_PREFILL_TOKEN = 0.003, 2e-4, 5e-5  # seconds


def linear_step_time(shape: BatchShape) -> float:
    """The step time of `linear_engine_steps`' engine."""
    return (
        STEP_BASE
        + STEP_PER_DECODE * shape.num_decodes
        + STEP_PER_PREFILL_TOKEN * shape.num_prefill_tokens
    )


def linear_engine_steps(count: int = 300, noise: float = 0.0, seed: int = 0) -> EngineSteps:
    """Profiled steps of an engine whose time is linear in decodes and prefill tokens (times
    a factor 1 + noise·N(0, 1), floored at 0.5): 512-token context, 1000 blocks of 16."""
    rng = np.random.default_rng(seed)
    batches = []
    for i in range(count):
        decodes = tuple(int(u) for u in rng.integers(1, 400, size=int(rng.integers(0, 20))))
        chunks = ((int(rng.integers(1, 200)), int(rng.integers(0, 200))),) if i % 3 else ()
        if not decodes and not chunks:
            decodes = (10,)
        shape = BatchShape(decodes, chunks)
        factor = max(0.5, 1.0 + noise * float(rng.standard_normal()))
        batches.append(TimedBatch(shape, linear_step_time(shape) * factor))
    return EngineSteps("linear engine", 512, 1000, 16, 256, 64, tuple(batches))


SEATS_NOW = 1.0  # seconds: the time of `seats_view`


def seats_view(max_num_seqs: int) -> tuple[SchedulerView, EngineLimits]:
    """No decodes (no TBT limit); EDF order a, b, c, d.

    a: r = 300, slack 15.255 ms; b: r = 1000; c, d: r = 50 each (slack about 1 s).
    With two seats the candidate is a + b = 1300 tokens, 10 + 13 = 23 ms > 15.255 ms: a is at
    risk. TimeToBudget(15.255 ms) = 525 tokens, so the knapsack has 525 − 300 = 225 for
    {b 1000, c 50, d 50}: it takes c and d. a + c + d = 400 tokens, 14 ms: in time.
    """
    limits = EngineLimits(max_num_batched_tokens=2048, max_num_seqs=max_num_seqs)
    waiting = [
        make_request("a", arrival=0.9, prompt=300, ttft=0.115255),
        make_request("b", arrival=0.0, prompt=1000, ttft=2.0),
        make_request("c", arrival=0.1, prompt=50, ttft=2.0),
        make_request("d", arrival=0.2, prompt=50, ttft=2.0),
    ]
    view, _ = make_view(now=SEATS_NOW, waiting=waiting, limits=limits)
    return view, limits


def run_metrics(violation: float, goodput: float = 5.0) -> RunMetrics:
    """A run whose requests missed their deadlines in share `violation`."""
    latency = Percentiles(0.01, 0.01, 0.02, 0.03)
    rates = ViolationRates(100, violation, violation / 2, violation)
    return RunMetrics(
        completed=100,
        failed=0,
        cancelled=0,
        duration=10.0,
        request_throughput=10.0,
        output_throughput=100.0,
        ttft=latency,
        tpot=latency,
        itl=latency,
        e2e=latency,
        cumulative=rates,
        per_gap=dataclasses.replace(rates, overall=min(1.0, 2 * violation)),
        goodput=goodput,
        goodput_per_gap=goodput,
        goodput_vllm=goodput,
    )


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`slidingserve ARGV...` in this process: its exit status, stdout and stderr."""
    from slidingserve.cli import main  # the command line: only the tests that run it

    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def make_slidingserve(**options: Any) -> SlidingServePolicy:
    """`slidingserve` with `options`, planning with an affine model (10 ms + 10 µs a token)
    and the default engine limits."""
    context = PolicyContext(EngineLimits(), TokenLinearModel(0.010, 1e-5))
    policy = make_policy("slidingserve", context, options)
    assert isinstance(policy, SlidingServePolicy)
    return policy


BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def run_benchmark(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str
) -> list[str]:
    """The output lines of `benchmarks/name` run as a script with the arguments `argv`."""
    script = BENCHMARKS / name
    monkeypatch.setattr("sys.argv", [str(script), *argv])
    runpy.run_path(str(script), run_name="__main__")
    return capsys.readouterr().out.splitlines()
