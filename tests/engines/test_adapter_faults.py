"""The adapter's structures under faults and load, without vLLM: a step vLLM never finished
leaves no caps behind, and thousands of requests (finished, aborted) through the mirror, the
imposer, the clocks and the learner leave no request's state and stay under every bound."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest
from factories import make_request

from slidingserve.core.kv_blocks import KVBlockManager
from slidingserve.core.plan import Plan, ScheduledChunk
from slidingserve.core.request import SLO
from slidingserve.core.view import EngineLimits
from slidingserve.engines.vllm.imposer import PlanImposer
from slidingserve.engines.vllm.mirror import RequestMirror
from slidingserve.engines.vllm.timing import StepTimer
from slidingserve.policies import PolicyContext, get_policy_class
from slidingserve.predictor import BatchLatencyPredictor, LinearModel, OnlineConfig, OnlineLearner

BUDGET = 128
LIMITS = EngineLimits(BUDGET, 16, 16)


@dataclass
class FakeRequest:
    """What the mirror and the imposer read of a vLLM request."""

    request_id: str
    num_prompt_tokens: int
    max_tokens: int
    arrival_time: float = 0.0
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_output_placeholders: int = 0  # tokens in flight: none, synchronous scheduling

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def wants(self) -> int:
        """Tokens to compute next: the rest of the prompt, or one to decode."""
        return max(1, self.num_tokens - self.num_computed_tokens)


@dataclass
class FakeEngine:
    """vLLM's queues, budget and request table, as the imposer and the mirror see them;
    `run` schedules as vLLM does under the imposer's caps, `advance` runs the model."""

    running: list[Any] = field(default_factory=list)
    waiting: deque[Any] = field(default_factory=deque)
    kv_holding_waiting: deque[Any] = field(default_factory=deque)
    max_num_scheduled_tokens: int = BUDGET
    requests: dict[str, FakeRequest] = field(default_factory=dict)

    def add(self, request: FakeRequest) -> None:
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def run(self, imposer: PlanImposer) -> dict[str, int]:
        left, scheduled = self.max_num_scheduled_tokens, {}
        for request in [*self.running, *self.waiting]:
            tokens = imposer.cap(request.request_id, min(request.wants, left))
            if tokens > 0:
                scheduled[request.request_id] = tokens
                left -= tokens
        for request in [r for r in self.waiting if r.request_id in scheduled]:
            self.waiting.remove(request)
            self.running.append(request)
        return scheduled

    def advance(self, scheduled: dict[str, int]) -> None:
        for request_id, tokens in scheduled.items():
            request = self.requests[request_id]
            request.num_computed_tokens += tokens
            if request.num_computed_tokens >= request.num_tokens:
                request.num_output_tokens += 1
            if request.num_output_tokens >= request.max_tokens:  # finished by length
                self.drop([request_id])

    def drop(self, request_ids: list[str]) -> None:
        """Finish (or abort) these requests: they leave every queue and the table."""
        gone = {i for i in request_ids if self.requests.pop(i, None) is not None}
        self.running = [r for r in self.running if r.request_id not in gone]
        for queue in (self.waiting, self.kv_holding_waiting):
            kept = [r for r in queue if r.request_id not in gone]
            queue.clear()
            queue.extend(kept)


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


def test_a_step_vllm_never_finished_leaves_no_caps_behind() -> None:
    engine = FakeEngine()
    imposer = PlanImposer(engine, BUDGET)
    plan = Plan([ScheduledChunk(make_request("a", prompt=80), 40)])
    imposer.impose(plan)  # then vLLM's schedule() raised: no release
    assert imposer.num_caps == 1 and engine.max_num_scheduled_tokens == 40
    imposer.impose(Plan())  # the next step's plan is empty: vLLM's own scheduling
    assert imposer.num_caps == 0 and imposer.cap("b", 60) == 60
    assert engine.max_num_scheduled_tokens == BUDGET


def test_caps_are_held_only_while_a_plan_is_imposed() -> None:
    engine = FakeEngine()
    imposer = PlanImposer(engine, BUDGET)
    chunks = [ScheduledChunk(make_request(f"r{i}", prompt=30), 8) for i in range(5)]
    plan = Plan(chunks)
    imposer.impose(plan)
    assert imposer.num_caps == 5
    imposer.release(plan, {f"r{i}": 8 for i in range(5)})
    assert imposer.num_caps == 0


def test_thousands_of_requests_leave_no_state_and_stay_under_every_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeTime()
    monkeypatch.setattr("slidingserve.engines.vllm.timing.time", clock)
    rng = random.Random(0)
    start = BatchLatencyPredictor.single(LinearModel(0.005, (0.0, 0.0, 0.0, 2e-5, 0.0, 5e-5, 0.0)))
    learner = OnlineLearner(start, OnlineConfig(buffer_size=500))
    policy = get_policy_class("sarathi").from_options(PolicyContext(LIMITS), {"chunk_size": 64})
    engine, mirror = FakeEngine(), RequestMirror()
    imposer, timer = PlanImposer(engine, BUDGET), StepTimer(learner, policy, 300, 200)
    kv = KVBlockManager(100_000, 16)
    added = aborted = most_tracked = 0
    while added < 3000 or engine.requests:
        for _ in range(rng.randint(0, 6) if added < 3000 else 0):
            request = FakeRequest(f"r{added}", rng.randint(1, 200), rng.randint(1, 12))
            engine.add(request)
            mirror.add(request, SLO(1.0, 0.05))
            added += 1
        if rng.random() < 0.3:  # an abort storm: clients hang up, queued or running
            victims = rng.sample(sorted(engine.requests), k=min(len(engine.requests), 4))
            engine.drop(victims)
            mirror.forget_all_but(set(engine.requests))
            aborted += len(victims)
        if not engine.requests:
            continue
        # One step, as the adapter runs it (adapter.schedule, then update_from_output).
        now = timer.step_started()
        plan = policy.schedule(mirror.view(now, engine.waiting, engine.running, LIMITS, kv))
        imposer.impose(plan)
        timer.vllm_started()
        scheduled = engine.run(imposer)
        timer.vllm_done()
        imposer.release(plan, scheduled)
        timer.step_scheduled(plan, mirror.batch(scheduled))
        clock.now += 0.001 + 1e-5 * sum(scheduled.values())
        timer.model_done()
        engine.advance(scheduled)
        timer.step_done(busy=bool(scheduled))
        mirror.forget_all_but(set(engine.requests))
        most_tracked = max(most_tracked, len(mirror))
        assert imposer.num_caps == 0
    assert aborted > 300 and len(timer.step_overhead) == 300  # many aborts, many steps
    assert most_tracked > 20  # requests were tracked while they ran...
    assert len(mirror) == 0  # ...and none is left once the engine is idle
    assert timer.sizes() == {"timed_steps": 300, "step_periods": 200, "step_timings": 300}
    assert learner.num_samples == 500 and learner.num_dropped == 0
