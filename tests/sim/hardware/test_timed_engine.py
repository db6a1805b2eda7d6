"""A profiled engine as the simulator's GPU: the steps file and `ProfiledLatency`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import linear_engine_steps, linear_step_time

from slidingserve.core.batch import BatchShape, TimedBatch
from slidingserve.core.view import EngineLimits
from slidingserve.predictor.steps import load_engine_steps, save_engine_steps
from slidingserve.sim.hardware.noise import NoiseStream
from slidingserve.sim.hardware.timed_engine import ProfiledLatency, calibrate_profiled

make_steps = linear_engine_steps


def test_the_fitted_engine_reproduces_a_noise_free_profile() -> None:
    latency = ProfiledLatency(make_steps())
    for shape in (
        BatchShape((5,) * 8, ()),
        BatchShape((), ((128, 0),)),
        BatchShape((7,), ((64, 32),)),
    ):
        assert latency.expected_time(shape) == pytest.approx(linear_step_time(shape), rel=0.02)
    assert np.allclose(latency.ratios, 1.0, atol=0.02)


def test_noise_factors_are_the_profile_s_own_ratios() -> None:
    latency = ProfiledLatency(make_steps(noise=0.2), seed=3)
    shape = BatchShape((100,) * 4, ((32, 0),))
    factors = {latency.sample_time(shape) / latency.expected_time(shape) for _ in range(200)}
    ratios = latency.ratios.tolist()
    assert all(min(abs(f - r) for r in ratios) < 1e-9 for f in factors)
    assert len(factors) > 50  # resampled, not one repeated value


def test_a_slow_tail_keeps_its_spread_but_slows_no_step_on_average() -> None:
    steps = make_steps(count=400, noise=0.05, seed=2)
    slowed = tuple(  # one step in twenty three times as slow, as a stall makes it
        TimedBatch(batch.shape, batch.seconds * 3) if i % 20 == 0 else batch
        for i, batch in enumerate(steps.batches)
    )
    latency = ProfiledLatency(dataclasses.replace(steps, batches=slowed), seed=4)
    raw = np.array([b.seconds / latency.expected_time(b.shape) for b in slowed])
    assert raw.mean() > 1.05  # drawn as measured, every step would run this much slower
    assert latency.ratios == pytest.approx(raw / raw.mean())
    assert latency.ratios.mean() == pytest.approx(1.0)
    assert latency.ratios.max() > 2.5  # the stalls are still drawn
    shape = BatchShape((100,) * 4, ((32, 0),))
    drawn = [latency.sample_time(shape) / latency.expected_time(shape) for _ in range(4000)]
    assert float(np.mean(drawn)) == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("num_decodes", [6, 200])  # 200: past a 128-token tile (rich set)
def test_decode_runs_draw_the_noise_stepwise_calls_would(num_decodes: int) -> None:
    steps = make_steps(noise=0.2)
    stepwise, vectorised = ProfiledLatency(steps, seed=5), ProfiledLatency(steps, seed=5)
    kv = 100 * num_decodes
    expected = [
        stepwise.sample_time(BatchShape((kv // num_decodes + j,) * num_decodes, ()))
        for j in range(40)
    ]
    run = vectorised.decode_run_times(num_decodes, kv, 40)
    vectorised.consume_noise(40)
    assert np.allclose(run, expected, rtol=1e-9)
    after = BatchShape((), ((50, 0),))
    assert vectorised.sample_time(after) == stepwise.sample_time(after)


def test_same_seed_same_times_and_a_floor_under_every_step() -> None:
    steps = make_steps(noise=0.3)
    first, second = ProfiledLatency(steps, seed=1), ProfiledLatency(steps, seed=1)
    shape = BatchShape((1,), ())
    times = [first.sample_time(shape) for _ in range(50)]
    assert times == [second.sample_time(shape) for _ in range(50)]
    fastest = min(batch.seconds for batch in steps.batches)
    assert first.expected_time(shape) >= 0.5 * fastest


def test_kv_capacity_keeps_the_engine_s_tokens_in_any_block_size() -> None:
    latency = ProfiledLatency(make_steps())
    assert latency.kv_capacity_blocks(16) == 1000
    assert latency.kv_capacity_blocks(32) == 500
    with pytest.raises(ValueError, match="block_size"):
        latency.kv_capacity_blocks(0)


def test_steps_survive_a_round_trip(tmp_path: Path) -> None:
    steps = make_steps(count=60)
    save_engine_steps(tmp_path / "steps.json", steps)
    assert load_engine_steps(tmp_path / "steps.json") == steps


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kv_blocks": 0}, "kv_blocks must be at least 1"),
        ({"max_model_len": 1.5}, "max_model_len must be an integer"),
        ({"batches": ()}, "at least 50 timed steps"),
    ],
)
def test_bad_facts_are_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(make_steps(count=60), **change)


def test_a_step_with_no_time_is_refused() -> None:
    steps = make_steps(count=60)
    broken = (TimedBatch(BatchShape((1,), ()), 0.0), *steps.batches[1:])
    with pytest.raises(ValueError, match=r"step 0: time 0\.0"):
        dataclasses.replace(steps, batches=broken)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ('{"format": "other"}', "format is not 'slidingserve-engine-steps'"),
        ('{"format": "slidingserve-engine-steps", "version": 9}', "version 9"),
        ('{"format": "slidingserve-engine-steps", "version": 1}', "missing field"),
    ],
)
def test_malformed_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "steps.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_engine_steps(path)


def test_a_file_with_a_bad_step_names_it(tmp_path: Path) -> None:
    path = tmp_path / "steps.json"
    save_engine_steps(path, make_steps(count=60))
    data = json.loads(path.read_text())
    data["steps"][4]["seconds"] = -1.0
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"steps\[4\]\.seconds: expected a positive time"):
        load_engine_steps(path)


def test_noise_stream_peek_and_consume_read_what_next_reads() -> None:
    def draw(rng: np.random.Generator, count: int) -> np.ndarray:
        return rng.random(count)

    one_by_one, looking = NoiseStream(draw, 7), NoiseStream(draw, 7)
    expected = [one_by_one.next() for _ in range(5000)]
    seen = looking.peek(4500).tolist()
    looking.consume(4000)
    rest = [looking.next() for _ in range(1000)]
    assert seen == expected[:4500] and rest == expected[4000:]
    with pytest.raises(ValueError, match="cannot consume"):
        looking.consume(10_000)


def test_a_reseeded_engine_is_a_fresh_one_without_a_refit() -> None:
    steps = make_steps(noise=0.2)
    fitted = ProfiledLatency(steps, seed=0)
    shape = BatchShape((3,) * 5, ())
    fitted.sample_time(shape)  # the original's stream moves on; the twin's starts afresh
    twin = fitted.with_seed(9)
    fresh = ProfiledLatency(steps, seed=9)
    assert twin.predictor is fitted.predictor
    assert [twin.sample_time(shape) for _ in range(20)] == [
        fresh.sample_time(shape) for _ in range(20)
    ]


LIMITS = EngineLimits(max_num_batched_tokens=256, max_num_seqs=64, block_size=16)


def _factors(latency: ProfiledLatency, batches: Sequence[TimedBatch]) -> list[float]:
    """Each batch's time over the engine's expected time: the noise it was timed with."""
    return [batch.seconds / latency.expected_time(batch.shape) for batch in batches]


def test_calibration_times_random_batches_within_the_limits_with_the_engine_s_noise() -> None:
    latency = ProfiledLatency(make_steps(noise=0.2))
    calibration = calibrate_profiled(latency, LIMITS, seed=2, num_samples=400)
    shapes = [batch.shape for batch in calibration.batches]
    assert len(shapes) == 400 and len(set(shapes)) > 350  # random batches, not the steps
    assert all(s.num_tokens <= 256 and len(s.decode_contexts) <= 64 for s in shapes)
    assert max(u for s in shapes for u in s.decode_contexts) <= 512  # the engine's context
    factors = _factors(latency, calibration.batches)
    ratios = latency.ratios.tolist()
    assert all(min(abs(f - r) for r in ratios) < 1e-9 for f in factors)
    assert len(set(factors)) > 100  # noisy, drawn afresh for every batch


def test_the_calibrated_predictor_is_fitted_not_the_engine_s_own() -> None:
    latency = ProfiledLatency(make_steps(noise=0.2))
    predictor = calibrate_profiled(latency, LIMITS).predictor
    assert predictor is not latency.predictor
    shapes = [BatchShape((5,) * 8, ()), BatchShape((), ((128, 0),)), BatchShape((7,), ((64, 32),))]
    errors = [predictor.predict(s) / latency.expected_time(s) - 1 for s in shapes]
    assert all(abs(error) < 0.05 for error in errors)  # a good fit...
    assert any(abs(error) > 1e-4 for error in errors)  # ...of noisy timings


def test_calibration_is_seeded_and_draws_no_trial_s_noise() -> None:
    latency = ProfiledLatency(make_steps(noise=0.2))
    first = calibrate_profiled(latency, LIMITS, seed=4, num_samples=100)
    assert first == calibrate_profiled(latency, LIMITS, seed=4, num_samples=100)
    assert first.batches != calibrate_profiled(latency, LIMITS, seed=5, num_samples=100).batches
    # the trial of the same seed times the same shapes with other factors
    trial = latency.with_seed(4)
    trial_factors = [
        trial.sample_time(b.shape) / latency.expected_time(b.shape) for b in first.batches
    ]
    assert trial_factors != _factors(latency, first.batches)
    with pytest.raises(ValueError, match="at least 50 samples"):
        calibrate_profiled(latency, LIMITS, num_samples=49)
