"""The adapter on vLLM's real `AsyncScheduler`, built without a model (docs/vllm.md §10):
step t+1 is scheduled before step t's output is handled, as vLLM's engine core does under
async scheduling (its batch queue of two)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

vllm = pytest.importorskip("vllm")

from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.engine import FinishReason  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm_schedulers import EOS, FakeTime, engine_request, make_scheduler  # noqa: E402

from slidingserve.core.batch import BatchShape  # noqa: E402
from slidingserve.core.request import Phase  # noqa: E402
from slidingserve.engines.vllm.adapter import (  # noqa: E402
    SlidingServeAsyncScheduler,
    SlidingServeScheduler,
)


def law(tokens: int) -> float:
    """The fake model's step time: 10 ms + 0.2 ms a token."""
    return 0.01 + 2e-4 * tokens


class AsyncEngine:
    """Drives a scheduler as vLLM's engine core does with async scheduling: a step is
    scheduled while the one before it runs, and outputs are handled in order. The fake
    model samples token 7 (EOS for the requests of `eos`) for each request whose prompt
    the step completes; steps run back to back, each `law(tokens)` seconds on `clock`."""

    def __init__(
        self, scheduler: SlidingServeScheduler, clock: FakeTime, eos: Iterable[str] = ()
    ) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.eos = set(eos)
        self.in_flight: deque[tuple[Any, ModelRunnerOutput]] = deque()

    def schedule(self) -> Any:
        output = self.scheduler.schedule()
        self.in_flight.append((output, self._sampled(output)))
        return output

    def _sampled(self, output: Any) -> ModelRunnerOutput:
        """What the model will return for `output`, decided as it is scheduled."""
        ids = list(output.num_scheduled_tokens)
        requests = self.scheduler.requests
        tokens = [
            [] if requests[i].is_prefill_chunk else [EOS if i in self.eos else 7] for i in ids
        ]
        index = {request_id: k for k, request_id in enumerate(ids)}
        return ModelRunnerOutput(req_ids=ids, req_id_to_index=index, sampled_token_ids=tokens)

    def update(self) -> Any:
        """The oldest step's output arrives (its model time elapses) and is handled."""
        output, sampled = self.in_flight.popleft()
        self.clock.now += law(output.total_num_scheduled_tokens)
        return self.scheduler.update_from_output(output, sampled)

    def run(self, limit: int = 200) -> None:
        """Steps until nothing is left, as vLLM's engine core loops with a batch queue of
        two: schedule when there is work; handle the oldest output when two steps are in
        flight, or when nothing more could be scheduled."""
        for _ in range(limit):  # bounded: a stall fails the test instead of hanging it
            if self.scheduler.has_requests():
                self.schedule()
                if len(self.in_flight) < 2 and self.scheduler.has_requests():
                    continue
            elif not self.in_flight:
                return
            self.update()
        raise AssertionError(f"still busy after {limit} steps")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr("slidingserve.engines.vllm.timing.time", fake)
    return fake


def test_the_adapter_follows_the_engine_s_async_setting(tmp_path: Path) -> None:
    on = make_scheduler(tmp_path, "slidingserve", async_scheduling=True)
    off = make_scheduler(tmp_path, "slidingserve")
    assert isinstance(on, SlidingServeAsyncScheduler) and isinstance(on, AsyncScheduler)
    assert type(off) is SlidingServeScheduler and not isinstance(off, AsyncScheduler)
    assert on.timer._overlapped and not off.timer._overlapped


@pytest.mark.parametrize("policy", ["vllm", "sarathi", "slidingserve", "qoserve"])
def test_step_t_plus_1_is_planned_while_step_t_runs_and_each_is_timed_as_itself(
    tmp_path: Path, clock: FakeTime, policy: str
) -> None:
    scheduler = make_scheduler(tmp_path, policy, async_scheduling=True)
    scheduler.add_request(engine_request("a", 40, max_tokens=4))
    engine = AsyncEngine(scheduler, clock)
    first = engine.schedule()
    second = engine.schedule()  # before the first step's output
    assert dict(first.num_scheduled_tokens) == {"a": 40}
    assert dict(second.num_scheduled_tokens) == {"a": 1}  # the planned decode
    mirror = scheduler.mirror.get("a")
    assert mirror is not None
    assert (mirror.phase, mirror.num_computed, mirror.num_generated) == (Phase.DECODING, 40, 1)
    assert scheduler.timer.num_in_flight == 2
    engine.update()
    engine.run()
    assert not scheduler.has_requests() and len(scheduler.mirror) == 0
    counts = scheduler.health.counts
    assert (counts.empty_plans, counts.plan_mismatches) == (0, 0)  # vLLM ran every plan
    samples = list(scheduler.timer.samples)
    # The prefill, then three decodes (the fourth token is sampled by the third decode); a
    # fifth step is never planned: vLLM would not run it, the adapter does not ask.
    assert [s.shape for s in samples] == [
        BatchShape((), ((40, 0),)),
        BatchShape((40,), ()),
        BatchShape((41,), ()),
        BatchShape((42,), ()),
    ]
    # Each step is charged its own model time, not its neighbour's.
    assert [s.seconds for s in samples] == pytest.approx([law(40), law(1), law(1), law(1)])
    assert scheduler.timer.num_in_flight == 0


def test_a_request_preempted_with_a_token_in_flight_starts_over_with_that_token(
    tmp_path: Path, clock: FakeTime
) -> None:
    # 5 blocks of 16 tokens, one of them vLLM's null block: the two prompts fill the rest.
    scheduler = make_scheduler(tmp_path, "vllm", blocks=5, async_scheduling=True)
    scheduler.add_request(engine_request("a", 32, max_tokens=6))
    scheduler.add_request(engine_request("b", 32, max_tokens=6))
    engine = AsyncEngine(scheduler, clock)
    first = engine.schedule()
    assert dict(first.num_scheduled_tokens) == {"a": 32, "b": 32}
    second = engine.schedule()  # the decodes need a block each: vLLM preempts "b"
    assert set(second.preempted_req_ids) == {"b"} and dict(second.num_scheduled_tokens) == {"a": 1}
    b = scheduler.requests["b"]
    assert (b.num_computed_tokens, b.num_output_placeholders) == (0, 0)
    engine.update()  # "b"'s first token arrives all the same
    mirror = scheduler.mirror.sync(b, waiting=True)
    assert mirror is not None
    assert (mirror.phase, mirror.num_generated, mirror.remaining_prefill) == (
        Phase.WAITING,
        1,
        33,  # its prompt and the token that came while it was preempted
    )
    engine.run()
    assert not scheduler.has_requests() and len(scheduler.mirror) == 0
    assert scheduler.health.counts.preemptions == 1
    assert scheduler.timer.num_in_flight == 0


def test_a_request_finishing_while_its_next_step_is_planned_is_dropped_from_it(
    tmp_path: Path, clock: FakeTime
) -> None:
    scheduler = make_scheduler(tmp_path, "slidingserve", async_scheduling=True)
    scheduler.add_request(engine_request("a", 40, max_tokens=8, ignore_eos=False))
    engine = AsyncEngine(scheduler, clock, eos={"a"})  # its first token ends it
    engine.schedule()
    second = engine.schedule()  # its token may be its last: it is planned all the same
    assert dict(second.num_scheduled_tokens) == {"a": 1}
    outputs = engine.update()
    (told,) = (o for batch in outputs.values() for o in batch.outputs)
    assert told.request_id == "a" and told.new_token_ids == [EOS]
    assert told.finish_reason == FinishReason.STOP
    assert "a" not in scheduler.requests and len(scheduler.mirror) == 0
    assert not scheduler.has_unfinished_requests()
    late = engine.update()  # the planned step ran; vLLM drops its token
    assert not any(batch.outputs for batch in late.values())
    shapes = [s.shape for s in scheduler.timer.samples]
    assert shapes == [BatchShape((), ((40, 0),)), BatchShape((40,), ())]  # it ran: timed
    assert scheduler.timer.num_in_flight == 0 and not engine.in_flight


def test_a_request_whose_token_in_flight_is_its_last_is_not_planned_again(
    tmp_path: Path, clock: FakeTime
) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi", async_scheduling=True)
    scheduler.add_request(engine_request("done", 30, max_tokens=1))
    scheduler.add_request(engine_request("more", 30, max_tokens=3))
    engine = AsyncEngine(scheduler, clock)
    engine.schedule()
    second = engine.schedule()
    assert dict(second.num_scheduled_tokens) == {"more": 1}
    assert scheduler.last_plan is not None
    assert [c.request.request_id for c in scheduler.last_plan.chunks] == ["more"]
    engine.update()
    engine.run()
    counts = scheduler.health.counts
    assert (counts.empty_plans, counts.plan_mismatches) == (0, 0)
    assert not scheduler.has_requests() and len(scheduler.mirror) == 0


def test_under_async_scheduling_the_step_that_refuses_runs_its_plan_beside_the_answer(
    tmp_path: Path, clock: FakeTime
) -> None:
    scheduler = make_scheduler(tmp_path, "slidingserve", {"admission": True}, async_scheduling=True)
    now = clock.time()
    scheduler.add_request(engine_request("fine", 40, arrival=now, ttft_ms=60_000))
    # Arrived long ago: its first-token deadline has passed, nothing can save it.
    scheduler.add_request(engine_request("late", 40, arrival=now - 60, ttft_ms=1000))
    engine = AsyncEngine(scheduler, clock)
    output = engine.schedule()
    # Planned while the step before it runs: no empty step to answer the refusal early.
    assert dict(output.num_scheduled_tokens) == {"fine": 40}
    assert "late" in output.finished_req_ids
    outputs = engine.update()
    told = {o.request_id: o for batch in outputs.values() for o in batch.outputs}
    assert told["late"].finish_reason == FinishReason.ABORT and told["late"].new_token_ids == []
    assert scheduler.refusals.count == 1
