"""Step periods of a busy engine (`PeriodRecorder`), without vLLM."""

from __future__ import annotations

from pathlib import Path

from slidingserve.core.batch import BatchShape
from slidingserve.core.view import EngineLimits
from slidingserve.engines.vllm.periods import PeriodRecorder
from slidingserve.predictor.steps import load_engine_steps

ONE_DECODE = BatchShape((10,), ())
PREFILL = BatchShape((), ((64, 0),))


def test_a_period_runs_from_one_step_start_to_the_next() -> None:
    recorder = PeriodRecorder(100)
    recorder.step_started(1.0)
    recorder.step_scheduled(ONE_DECODE, 1.0)
    recorder.step_started(1.004)
    recorder.step_scheduled(PREFILL, 1.004)
    recorder.step_started(1.020)
    assert [(b.shape, round(b.seconds, 6)) for b in recorder.periods] == [
        (ONE_DECODE, 0.004),
        (PREFILL, 0.016),
    ]
    assert recorder.unsaved == 2


def test_idle_time_and_empty_steps_are_not_periods() -> None:
    recorder = PeriodRecorder(100)
    recorder.step_started(0.0)
    recorder.step_scheduled(ONE_DECODE, 0.0)
    recorder.engine_idle()  # nothing left: the engine waits for requests
    recorder.step_started(5.0)
    recorder.step_scheduled(BatchShape((), ()), 5.0)  # an empty step
    recorder.step_started(5.001)
    assert list(recorder.periods) == []


def test_saved_periods_read_back_as_engine_steps(tmp_path: Path) -> None:
    recorder = PeriodRecorder(1000)
    now = 0.0
    for i in range(60):
        recorder.step_started(now)
        recorder.step_scheduled(ONE_DECODE if i % 2 else PREFILL, now)
        now += 0.003 + 0.001 * (i % 2)
    recorder.step_started(now)
    path = tmp_path / "steps.json"
    recorder.save(path, "test engine", 512, 8192, EngineLimits(256, 64, 32))
    steps = load_engine_steps(path)
    assert recorder.unsaved == 0 and not (tmp_path / "steps.json.partial").exists()
    assert (steps.engine, steps.max_model_len, steps.kv_blocks, steps.block_size) == (
        "test engine", 512, 8192, 32,
    )  # fmt: skip
    assert (steps.max_num_batched_tokens, steps.max_num_seqs) == (256, 64)
    assert [b.shape for b in steps.batches] == [b.shape for b in recorder.periods]
    assert len(steps.batches) == 60
