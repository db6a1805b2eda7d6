"""The adapter on a vLLM Scheduler built without a model (docs/vllm.md §10): no weights, no
worker."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

vllm = pytest.importorskip("vllm")

from prometheus_client import CollectorRegistry  # noqa: E402
from vllm.v1.engine import FinishReason  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import RequestStatus  # noqa: E402
from vllm_schedulers import FakeTime, engine_request, make_scheduler  # noqa: E402

from slidingserve.core import SLO  # noqa: E402
from slidingserve.core.batch import BatchShape, TimedBatch  # noqa: E402
from slidingserve.core.plan import Plan, ScheduledChunk  # noqa: E402
from slidingserve.core.view import SchedulerView  # noqa: E402
from slidingserve.engines.vllm.adapter import (  # noqa: E402
    ANSWERS_ONLY_PATH,
    SlidingServeScheduler,
)
from slidingserve.engines.vllm.context import STARTING_GUESS  # noqa: E402
from slidingserve.engines.vllm.health import (  # noqa: E402
    STATE_HELP,
    AdapterHealth,
    PrometheusCounts,
)
from slidingserve.engines.vllm.load_record import (  # noqa: E402
    ADMITTED_MARK,
    LoadRecord,
    read_record,
    record_path,
)
from slidingserve.engines.vllm.refusals import REFUSED_REASON  # noqa: E402
from slidingserve.engines.vllm.timing import MAX_SAMPLES  # noqa: E402
from slidingserve.policies.qoserve import QoServePolicy  # noqa: E402
from slidingserve.predictor import (  # noqa: E402
    BatchLatencyPredictor,
    PredictorMetadata,
    Sample,
    random_batch_shapes,
    save_predictor,
)
from slidingserve.predictor.calibration import fit_batches  # noqa: E402

HEALTH_LOGGER = "slidingserve.engines.vllm.health"


def law(tokens: int) -> float:
    """The measured step time of the tests below: 10 ms + 0.2 ms a token."""
    return 0.01 + 2e-4 * tokens


def run_step(scheduler: SlidingServeScheduler, clock: FakeTime | None = None) -> Any:
    """One step with a fake model: a token for each request whose prompt is complete; with a
    `clock` (patched in as the adapter's time), the step takes `law(tokens)` seconds."""
    output = scheduler.schedule()
    if clock is not None:
        clock.now += law(output.total_num_scheduled_tokens)
    ids = list(output.num_scheduled_tokens)
    sampled = [
        [7] if scheduler.requests[i].num_computed_tokens >= scheduler.requests[i].num_tokens else []
        for i in ids
    ]
    runner = ModelRunnerOutput(
        req_ids=ids, req_id_to_index={r: k for k, r in enumerate(ids)}, sampled_token_ids=sampled
    )
    scheduler.update_from_output(output, runner)
    return output


def steps(scheduler: SlidingServeScheduler, limit: int = 100) -> Iterator[Any]:
    for _ in range(limit):
        if not scheduler.has_requests():
            return
        yield run_step(scheduler)


@pytest.mark.parametrize(
    ("policy", "options"),
    [
        ("sarathi-edf", {"chunk_size": 48}),
        ("sarathi", {"chunk_size": 40}),
        ("vllm", {}),
        ("slidingserve", {}),
        ("qoserve", {}),
    ],
)
def test_vllm_runs_exactly_the_plan_in_order(
    tmp_path: Path, policy: str, options: dict[str, Any]
) -> None:
    scheduler = make_scheduler(tmp_path, policy, options)
    # Deadlines against the arrival: "c" is due first, then "a", then "b".
    scheduler.add_request(engine_request("a", 100, arrival=0.0, ttft_ms=3000))
    scheduler.add_request(engine_request("b", 20, arrival=0.0, ttft_ms=9000))
    scheduler.add_request(engine_request("c", 60, arrival=0.0, ttft_ms=1000))
    checked = 0
    for output in steps(scheduler):
        plan = scheduler.last_plan
        assert plan is not None
        wanted = {c.request.request_id: c.tokens for c in plan.chunks}
        assert dict(output.num_scheduled_tokens) == wanted
        assert output.total_num_scheduled_tokens <= scheduler.limits.max_num_batched_tokens
        new = {d.req_id for d in output.scheduled_new_reqs}
        planned_order = [c.request.request_id for c in plan.chunks]
        got_order = list(output.num_scheduled_tokens)
        assert [r for r in got_order if r not in new] == [r for r in planned_order if r not in new]
        assert [r for r in got_order if r in new] == [r for r in planned_order if r in new]
        checked += 1
    assert checked >= 3
    assert scheduler.health.counts[:3] == (checked, 0, 0)  # steps, fallbacks, mismatches
    assert len(scheduler.mirror) == 0  # every finished request was forgotten


def test_edf_plan_follows_the_slos_from_extra_args(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi-edf", {"chunk_size": 48})
    scheduler.add_request(engine_request("late", 30, ttft_ms=5000, tbt_ms=80, tier="std"))
    scheduler.add_request(engine_request("soon", 30, ttft_ms=500, protected="true"))
    assert scheduler.mirror.get("late").slo == SLO(5.0, 0.08, False, "std")  # type: ignore[union-attr]
    assert scheduler.mirror.get("soon").slo == SLO(0.5, 0.05, True, None)  # type: ignore[union-attr]
    output = run_step(scheduler)
    assert list(output.num_scheduled_tokens) == ["soon", "late"]  # earliest deadline first
    assert dict(output.num_scheduled_tokens) == {"soon": 30, "late": 18}


def test_a_bad_slo_never_breaks_the_engine_loop(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi")
    scheduler.add_request(engine_request("bad", 10, ttft_ms=-5))  # front end would say 400
    assert scheduler.invalid_slo_requests == 1
    assert scheduler.mirror.get("bad").slo == SLO(2.0, 0.05)  # type: ignore[union-attr]
    assert len(list(steps(scheduler))) >= 1 and not scheduler.has_requests()


def test_aborted_requests_are_forgotten(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "qoserve")
    scheduler.add_request(engine_request("stay", 40, max_tokens=20))
    scheduler.add_request(engine_request("gone", 300, max_tokens=20))
    run_step(scheduler)
    scheduler.finish_requests("gone", RequestStatus.FINISHED_ABORTED)
    assert scheduler.mirror.get("gone") is None and len(scheduler.mirror) == 1
    for output in steps(scheduler):
        assert "gone" not in output.num_scheduled_tokens
    assert len(scheduler.mirror) == 0


def test_each_step_is_timed_and_its_overhead_counted(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "slidingserve")
    scheduler.add_request(engine_request("a", 50, max_tokens=3))
    outputs = list(steps(scheduler))
    working = [o for o in outputs if o.total_num_scheduled_tokens > 0]
    assert len(scheduler.timer.samples) == len(working) == 3  # prefill + two decodes
    assert len(scheduler.timer.step_overhead) == len(outputs)
    first = scheduler.timer.samples[0]
    assert first.shape.num_prefill_tokens == 50 and first.seconds >= 0
    assert all(s.shape.num_decodes == 1 for s in list(scheduler.timer.samples)[1:])


# -- what QoServe (a policy with a model of its own) learns from ----------------------------


def qoserve_prediction(scheduler: SlidingServeScheduler, shape: BatchShape) -> float:
    policy = scheduler.policy
    assert isinstance(policy, QoServePolicy)
    return policy.predictor.predict_shape(shape)


PROBE = BatchShape((30, 40), ((60, 0),))  # 62 tokens: the law says 22.4 ms


def test_qoserve_refits_to_the_measured_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeTime()
    monkeypatch.setattr("slidingserve.engines.vllm.timing.time", clock)
    scheduler = make_scheduler(tmp_path, "qoserve")
    before = qoserve_prediction(scheduler, PROBE)
    for wave in range(20):
        for k in range(6):
            scheduler.add_request(engine_request(f"{wave}-{k}", 20 + 37 * k, max_tokens=6))
        for _ in range(200):  # bounded: a stall fails the test instead of hanging it
            if not scheduler.has_requests():
                break
            run_step(scheduler, clock)
        if scheduler.learner.num_samples >= 150:
            break
    assert scheduler.learner.num_samples >= 150
    assert scheduler.learner.refit_now() is not None  # what the refit thread does, here
    after = qoserve_prediction(scheduler, PROBE)
    assert before == pytest.approx(0.008, rel=0.1)  # synthesized from the starting guess
    assert after == pytest.approx(law(62), rel=0.02)  # fitted to the measured steps
    assert scheduler.learner.predictor.predict(PROBE) == pytest.approx(law(62), rel=0.02)
    assert scheduler.health.counts.failed_policy_refits == 0


def test_a_failing_policy_refit_is_counted_and_its_model_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = make_scheduler(tmp_path, "qoserve")
    policy = scheduler.policy
    assert isinstance(policy, QoServePolicy)
    model = policy.predictor

    def broken(samples: Sequence[Sample]) -> None:
        raise ValueError("cannot fit")

    monkeypatch.setattr(policy, "refit", broken)
    for shape in random_batch_shapes(150, np.random.default_rng(0), max_tokens=128):
        scheduler.learner.record(shape, law(shape.num_tokens))
    assert scheduler.learner.refit_now() is not None  # the shared predictor still refits
    assert policy.predictor is model
    assert scheduler.health.counts.failed_policy_refits == 1


def save_profile_file(path: Path, batches: Sequence[TimedBatch]) -> Path:
    fit = fit_batches(list(batches)) if batches else None
    predictor = fit.predictor if fit else BatchLatencyPredictor.single(STARTING_GUESS)
    save_predictor(path, predictor, PredictorMetadata("m", "h", len(batches), "now"), batches)
    return path


def test_the_profile_s_measured_batches_reach_qoserve(tmp_path: Path) -> None:
    shapes = random_batch_shapes(300, np.random.default_rng(1), max_tokens=128, max_decodes=16)
    batches = tuple(TimedBatch(shape, law(shape.num_tokens)) for shape in shapes)
    path = save_profile_file(tmp_path / "predictor.json", batches)
    scheduler = make_scheduler(tmp_path, "qoserve", predictor=str(path))
    assert tuple(scheduler.policy.context.profile) == batches
    assert qoserve_prediction(scheduler, PROBE) == pytest.approx(law(62), rel=0.02)


def test_without_measured_batches_qoserve_starts_from_synthetic_ones_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = save_profile_file(tmp_path / "predictor.json", ())
    scheduler = make_scheduler(tmp_path, "qoserve", predictor=str(path))
    assert len(scheduler.policy.context.profile) == 2000
    assert "qoserve fits its model to batches synthesized from" in caplog.text


# -- departures from the plan, counted -------------------------------------------------------


def test_an_empty_plan_filled_by_vllm_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi")
    scheduler.add_request(engine_request("a", 30))
    monkeypatch.setattr(scheduler.policy, "schedule", lambda view: Plan())
    output = run_step(scheduler)
    assert dict(output.num_scheduled_tokens) == {"a": 30}  # vLLM's own choice
    assert scheduler.health.counts[:3] == (1, 1, 0)


def test_a_plan_vllm_departs_from_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi")
    scheduler.add_request(engine_request("a", 20))

    def too_many(view: SchedulerView) -> Plan:
        return Plan([ScheduledChunk(view.waiting[0], 50)])  # the prompt has only 20

    monkeypatch.setattr(scheduler.policy, "schedule", too_many)
    output = run_step(scheduler)
    assert dict(output.num_scheduled_tokens) == {"a": 20}
    assert scheduler.health.counts[:3] == (1, 0, 1)


def test_the_first_token_s_time_reaches_the_mirror(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi")
    scheduler.add_request(engine_request("a", 40, max_tokens=4))
    mirror = scheduler.mirror.get("a")
    assert mirror is not None
    before = time.time()
    run_step(scheduler)  # the whole prompt, and the first token
    after = time.time()
    run_step(scheduler)
    run_step(scheduler)
    assert len(mirror.token_times) == 1
    assert before <= mirror.token_times[0] <= after


def test_a_violated_decode_yields_to_a_live_prefill_and_vllm_runs_that_plan(
    tmp_path: Path,
) -> None:
    scheduler = make_scheduler(tmp_path, "slidingserve", {"yield_violated": True})
    now = time.time()
    # "late" missed its first token long ago; alone, it still runs.
    scheduler.add_request(engine_request("late", 40, max_tokens=6, arrival=now - 3600))
    assert dict(run_step(scheduler).num_scheduled_tokens) == {"late": 40}
    # A live request of two steps' prefill: the violated decode waits for both.
    scheduler.add_request(engine_request("fine", 200, arrival=now, ttft_ms=60_000))
    assert dict(run_step(scheduler).num_scheduled_tokens) == {"fine": 128}
    assert dict(run_step(scheduler).num_scheduled_tokens) == {"fine": 72}
    # Nothing live waits now: both decode, and both finish.
    assert set(run_step(scheduler).num_scheduled_tokens) == {"late", "fine"}
    assert len(list(steps(scheduler))) >= 1 and not scheduler.has_requests()
    assert scheduler.health.counts[1:3] == (0, 0)  # no fallback, no departure from a plan


@pytest.mark.parametrize("whole", [True, False])
def test_with_whole_prefills_a_prompt_that_cannot_fit_whole_waits_for_the_decode(
    tmp_path: Path, whole: bool
) -> None:
    # 19 usable blocks of 16 tokens; "d" decodes in 3 to 4 of them, "long" needs 18.
    options = {"whole_prefills": whole, "kv_forecast": 0.0}  # the forecast would hold "long"
    scheduler = make_scheduler(tmp_path, "slidingserve", options, blocks=20)
    now = time.time()
    scheduler.add_request(engine_request("d", 40, max_tokens=20, arrival=now))
    assert dict(run_step(scheduler).num_scheduled_tokens) == {"d": 40}
    scheduler.add_request(engine_request("long", 280, arrival=now, ttft_ms=60_000))
    scheduled = dict(run_step(scheduler).num_scheduled_tokens)
    if whole:
        assert scheduled == {"d": 1}  # the prompt waits for room for all of it
    else:
        assert scheduled["d"] == 1 and scheduled["long"] > 0  # a first chunk starts
    outputs = list(steps(scheduler, limit=200))
    assert not scheduler.has_requests()
    if whole:
        assert not any(o.preempted_req_ids for o in outputs)
    assert scheduler.health.counts[1:3] == (0, 0)


@pytest.mark.parametrize("forecast", [1.0, 0.0])
def test_with_the_kv_forecast_a_request_that_fits_now_waits_for_the_decode(
    tmp_path: Path, forecast: float
) -> None:
    # 19 usable blocks of 16 tokens. Before any request has left, each is expected to emit
    # 439 tokens: "d" alone is forecast to outgrow the cache, so "short" (3 blocks, which
    # fit today) waits for it to finish.
    scheduler = make_scheduler(tmp_path, "slidingserve", {"kv_forecast": forecast}, blocks=20)
    assert scheduler.kv_view.num_blocks == 19  # vLLM's pool less its null block
    now = time.time()
    scheduler.add_request(engine_request("d", 40, max_tokens=20, arrival=now))
    assert dict(run_step(scheduler).num_scheduled_tokens) == {"d": 40}
    scheduler.add_request(engine_request("short", 40, arrival=now, ttft_ms=60_000))
    scheduled = dict(run_step(scheduler).num_scheduled_tokens)
    assert scheduled == ({"d": 1} if forecast else {"d": 1, "short": 40})
    list(steps(scheduler, limit=200))
    assert not scheduler.has_requests()
    assert scheduler.health.counts[1:3] == (0, 0)


# -- admission control -------------------------------------------------------------------


def test_a_refused_request_is_answered_by_an_empty_step_and_the_next_runs_the_plan(
    tmp_path: Path,
) -> None:
    scheduler = make_scheduler(tmp_path, "slidingserve", {"admission": True})
    now = time.time()
    scheduler.add_request(engine_request("fine", 40, arrival=now, ttft_ms=60_000))
    first = run_step(scheduler)
    assert dict(first.num_scheduled_tokens) == {"fine": 40}
    # "late" arrived long ago: its first-token deadline has passed, nothing can save it.
    scheduler.add_request(engine_request("late", 40, arrival=now - 3600, ttft_ms=1000))
    output = scheduler.schedule()
    # The step that refuses runs no token, "fine"'s decode included: its answer leaves
    # without waiting for a model step.
    assert output.total_num_scheduled_tokens == 0
    assert "late" in output.finished_req_ids
    assert "late" not in scheduler.requests
    assert scheduler.last_plan is not None and scheduler.last_plan.path == ANSWERS_ONLY_PATH
    nothing = ModelRunnerOutput(req_ids=[], req_id_to_index={})
    outputs = scheduler.update_from_output(output, nothing)
    told = {o.request_id: o for batch in outputs.values() for o in batch.outputs}
    assert set(told) == {"late"}
    assert told["late"].finish_reason == FinishReason.ABORT
    assert told["late"].stop_reason == REFUSED_REASON
    assert told["late"].new_token_ids == []
    assert scheduler.refusals.count == 1 and not scheduler.refusals
    assert dict(run_step(scheduler).num_scheduled_tokens) == {"fine": 1}  # the plan, anew
    assert scheduler.health.counts[1:3] == (0, 0)  # the empty step is no departure


def test_refusals_at_every_step_hold_back_one_step_at_most(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "slidingserve", {"admission": True})
    now = time.time()
    scheduler.add_request(engine_request("fine", 40, max_tokens=20, arrival=now, ttft_ms=60_000))
    run_step(scheduler)
    ran = []
    for k in range(4):  # a hopeless arrival before every step
        scheduler.add_request(engine_request(f"late{k}", 40, arrival=now - 3600, ttft_ms=1000))
        ran.append(run_step(scheduler).total_num_scheduled_tokens)
    # An empty step answers the first refusal; the next one runs the decode beside its
    # refusal, and so on: the decode waits one empty step (milliseconds) at most.
    assert ran == [0, 1, 0, 1]
    assert scheduler.refusals.count == 4


def test_without_admission_control_nothing_is_refused(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "slidingserve")
    scheduler.add_request(engine_request("late", 40, arrival=time.time() - 3600, ttft_ms=1000))
    output = run_step(scheduler)
    assert dict(output.num_scheduled_tokens) == {"late": 40}
    assert scheduler.refusals.count == 0


def latest_record(path: Path, written: LoadRecord, wait: float = 2.0) -> LoadRecord:
    """The record at `path` once it holds the figures of `written`, or the last one read
    after `wait` seconds. The publisher's thread may have read the figures before they
    changed and write them after `written` was: its next writing, 50 ms on, has the new
    ones."""
    deadline = time.monotonic() + wait
    while True:
        read = read_record(path, time.time())
        assert read is not None
        if replace(read, written=written.written) == written or time.monotonic() > deadline:
            return read
        time.sleep(0.01)


def test_the_engine_publishes_the_rate_it_refuses_by_and_its_queue(tmp_path: Path) -> None:
    folder = tmp_path / "load"
    folder.mkdir()
    scheduler = make_scheduler(tmp_path, "slidingserve", {"admission": True}, load_dir=folder)
    try:
        rate = scheduler.policy.admission_rate()  # type: ignore[attr-defined]
        assert rate is not None and rate > 0
        scheduler.add_request(engine_request("long", 600, arrival=time.time(), ttft_ms=60_000))
        run_step(scheduler)  # 128 of its 600 tokens run
        run_step(scheduler)  # which starts with 472 left
        assert scheduler.load is not None
        record = scheduler.load.publish()
        assert record is not None
        read = latest_record(record_path(folder, 0), record)
        # The publisher's thread may have written again since: the same record, later.
        assert replace(read, written=record.written) == record and read.written >= record.written
        assert record.prefill_rate == rate
        assert record.queued_prefill_s == pytest.approx(472 / rate)
    finally:
        scheduler.shutdown()
    assert not record_path(folder, 0).exists()


@pytest.mark.parametrize(
    ("api_server", "engines", "marked"),
    [(True, 1, True), (True, 1, False), (False, 1, True), (True, 2, True)],
    ids=["marked", "unmarked", "no-api-server", "data-parallel"],
)
def test_a_sole_engine_behind_the_api_server_admits_what_the_api_server_marked(
    tmp_path: Path, api_server: bool, engines: int, marked: bool
) -> None:
    # Two prompts of 900 tokens with a TTFT of 80 ms: together they do not fit the queue
    # test at their first step; alone, each could make its first token.
    options = {"admission": True, "admission_test": "queue"}
    folder = tmp_path / "load"
    folder.mkdir()
    load_dir = folder if api_server else None
    scheduler = make_scheduler(
        tmp_path, "slidingserve", options, 2048, load_dir=load_dir, data_parallel_size=engines
    )
    try:
        now = time.time()
        for name in ("a", "b"):
            request_id = f"cmpl-{ADMITTED_MARK}-{name}-0-1a2b3c4d" if marked else name
            scheduler.add_request(engine_request(request_id, 900, arrival=now, ttft_ms=80))
        output = scheduler.schedule()
        if api_server and engines == 1 and marked:  # its answer stands: both admitted
            assert not output.finished_req_ids and scheduler.refusals.count == 0
            assert len(output.num_scheduled_tokens) == 2
        else:  # the engine tests them itself: one is refused at once
            assert scheduler.refusals.count == 1 and len(output.finished_req_ids) == 1
    finally:
        scheduler.shutdown()


@pytest.mark.parametrize(("policy", "options"), [("slidingserve", {}), ("sarathi-edf", {})])
def test_without_admission_control_nothing_is_published(
    tmp_path: Path, policy: str, options: dict[str, Any]
) -> None:
    scheduler = make_scheduler(tmp_path, policy, options, load_dir=tmp_path)
    assert scheduler.load is None
    run_step(scheduler)
    assert list(tmp_path.glob("engine-*.json")) == []


# -- faults: a policy that raises, KV that runs short, garbage step times ------------------


def raising(message: str) -> Any:
    def schedule(view: SchedulerView) -> Plan:
        raise RuntimeError(message)

    return schedule


def error_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == HEALTH_LOGGER and r.levelno >= logging.ERROR]


def test_a_policy_that_raises_falls_back_to_vllm_for_that_step_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi", {"chunk_size": 16})
    scheduler.add_request(engine_request("a", 100, max_tokens=3))
    scheduler.add_request(engine_request("b", 100, max_tokens=3))
    plan_of_the_policy = scheduler.policy.schedule
    calls: list[float] = []

    def flaky(view: SchedulerView) -> Plan:
        calls.append(view.now)
        if len(calls) == 1:
            raise RuntimeError("policy bug")
        return plan_of_the_policy(view)

    monkeypatch.setattr(scheduler.policy, "schedule", flaky)
    with caplog.at_level(logging.INFO, logger=HEALTH_LOGGER):
        first = run_step(scheduler)
        assert scheduler.last_plan is not None and scheduler.last_plan.path == "policy-error"
        second = run_step(scheduler)
    assert dict(first.num_scheduled_tokens) == {"a": 100, "b": 28}  # vLLM's own, budget 128
    assert second.total_num_scheduled_tokens == 16  # the policy's chunk again
    assert dict(second.num_scheduled_tokens) == {
        c.request.request_id: c.tokens for c in scheduler.last_plan.chunks
    }
    assert len(calls) == 2
    counts = scheduler.health.counts
    assert (counts.steps, counts.empty_plans, counts.policy_errors) == (2, 1, 1)
    (logged,) = error_records(caplog)
    assert logged.exc_info is not None and "raised in schedule" in logged.getMessage()
    assert scheduler.imposer.num_caps == 0


def test_a_policy_failing_every_step_never_stops_the_engine_and_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = make_scheduler(tmp_path, "slidingserve")
    monkeypatch.setattr(scheduler.policy, "schedule", raising("always"))
    for k in range(4):
        scheduler.add_request(engine_request(f"r{k}", 30 + 20 * k, max_tokens=4))
    with caplog.at_level(logging.INFO, logger=HEALTH_LOGGER):
        ran = list(steps(scheduler))
        scheduler.health.log_now()
    assert not scheduler.has_requests() and len(scheduler.mirror) == 0  # all served by vLLM
    assert scheduler.health.counts.policy_errors == len(ran) == scheduler.health.counts.steps
    first, line = error_records(caplog)  # one traceback, then the health line, an ERROR
    assert first.exc_info is not None
    assert f"the policy raised {len(ran)} times since the last line" in line.getMessage()
    assert f"{len(ran)} policy errors" in line.getMessage()


def test_a_policy_raising_at_the_step_s_end_is_counted_and_the_step_still_timed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = make_scheduler(tmp_path, "qoserve")

    def broken(record: Any) -> None:
        raise ValueError("bookkeeping")

    monkeypatch.setattr(scheduler.policy, "on_iteration_end", broken)
    scheduler.add_request(engine_request("a", 50, max_tokens=3))
    outputs = list(steps(scheduler))
    busy = [o for o in outputs if o.total_num_scheduled_tokens > 0]
    assert scheduler.health.counts.policy_errors == len(busy) == len(scheduler.timer.samples)
    assert scheduler.learner.num_samples == len(busy)  # the learner was fed all the same


def test_preemptions_are_counted_when_kv_runs_short(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "vllm", blocks=12)  # 11 usable blocks: 176 tokens
    for k in range(4):  # 4 prompts of 3 blocks fit; growing past 48 tokens each does not
        scheduler.add_request(engine_request(f"r{k}", 40, max_tokens=30))
    preempted = sum(len(o.preempted_req_ids or ()) for o in steps(scheduler, limit=500))
    counts = scheduler.health.counts
    assert counts.preemptions == preempted > 0
    assert not scheduler.has_requests() and len(scheduler.mirror) == 0
    assert f"{preempted} preemptions" in counts.line()


def test_garbage_step_times_are_dropped_and_shown(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi")
    for seconds in (float("nan"), -1.0, 0.0, 1e6):
        scheduler.learner.record(BatchShape((5,), ()), seconds)
    scheduler.learner.record(BatchShape((), ()), 0.01)  # an empty batch
    assert scheduler.health.counts.dropped_samples == 5
    assert "5 dropped samples" in scheduler.health.counts.line()
    assert scheduler.learner.num_samples == 0


PER_REQUEST = ("tracked_requests", "imposer_caps", "refusals_pending", "remembered_hits")


def test_an_abort_storm_leaves_no_request_state_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = make_scheduler(tmp_path, "slidingserve", {"admission": True}, blocks=40)
    registry = CollectorRegistry()
    scheduler.health = AdapterHealth(
        scheduler.learner, 60.0, metrics=PrometheusCounts(registry), sizes=scheduler.state_sizes
    )
    plan_of_the_policy, calls = scheduler.policy.schedule, [0]

    def sometimes_broken(view: SchedulerView) -> Plan:
        calls[0] += 1
        if calls[0] % 7 == 0:
            raise RuntimeError("now and then")
        return plan_of_the_policy(view)

    monkeypatch.setattr(scheduler.policy, "schedule", sometimes_broken)
    rng, now, aborted, tracked = random.Random(0), time.time(), 0, []
    for wave in range(250):  # 2000 requests
        for k in range(8):  # the last of each wave is hopeless: refused at once
            arrival = now - 3600 if k == 7 else now
            prompt, output = rng.randint(5, 120), rng.randint(1, 10)
            request = engine_request(f"{wave}-{k}", prompt, output, arrival, ttft_ms=60_000)
            scheduler.add_request(request)
        run_step(scheduler)
        tracked.append(registry.get_sample_value("slidingserve:tracked_requests") or 0.0)
        victims = rng.sample(sorted(scheduler.requests), k=min(3, len(scheduler.requests)))
        aborted += len(scheduler.finish_requests(victims, RequestStatus.FINISHED_ABORTED))
        for _ in steps(scheduler, limit=2):
            pass
    for _ in steps(scheduler, limit=1000):
        pass
    assert not scheduler.has_requests()
    counts = scheduler.health.counts
    assert aborted > 500 and scheduler.refusals.count > 200 and counts.policy_errors > 50
    assert max(tracked) > 5  # requests were tracked while in the engine...
    sizes = scheduler.state_sizes()
    assert set(sizes) == set(STATE_HELP)
    assert {name: sizes[name] for name in PER_REQUEST} == dict.fromkeys(PER_REQUEST, 0)
    gauges = {name: registry.get_sample_value(f"slidingserve:{name}") for name in PER_REQUEST}
    assert gauges == dict.fromkeys(PER_REQUEST, 0.0)  # ...and none is, once it is idle
    assert 0 < sizes["timed_steps"] == sizes["learner_samples"] <= MAX_SAMPLES
    assert sizes["step_timings"] == counts.steps and sizes["step_periods"] == 0  # no file
    assert sizes["policy_decisions"] == 0  # a served policy records no decisions


@pytest.mark.parametrize("most_slack", [True, False])
def test_vllm_preempts_the_request_with_the_most_slack(tmp_path: Path, most_slack: bool) -> None:
    # 11 usable blocks of 16 tokens: three 40-token prompts fit (3 blocks each) until they
    # grow past 48 tokens. "banked" comes first in the plans (added first, the same first
    # deadline), but its 10-second TBT puts its next token last once it decodes: the
    # victim with the rule. Without it, vLLM's tail: the plans' last request.
    # The forecast off: it would keep the three from running together.
    options = {"preempt_most_slack": most_slack, "kv_headroom": 0, "kv_forecast": 0.0}
    scheduler = make_scheduler(tmp_path, "slidingserve", options, blocks=12)
    now = time.time()
    for name in ("banked", "r0", "r1"):
        tbt_ms = 10_000 if name == "banked" else 50
        request = engine_request(name, 40, 30, now, ttft_ms=60_000, tbt_ms=tbt_ms)
        scheduler.add_request(request)
    preempted = [r for o in steps(scheduler, limit=500) for r in (o.preempted_req_ids or ())]
    assert preempted, "the cache never ran short"
    assert preempted[0] == ("banked" if most_slack else "r1")
    assert not scheduler.has_requests() and len(scheduler.mirror) == 0
