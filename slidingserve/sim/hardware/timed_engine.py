"""A real engine as the simulator's GPU, from the steps it was timed running.

`slidingserve profile --steps-out FILE` records every step a real engine ran (its batch
shape and measured seconds) with the engine facts a simulation needs: context length, KV
blocks, block size and limits. `ProfiledLatency` times a batch as the 7-feature predictor
fitted to those steps predicts it, times a factor drawn (seeded) from the steps' own
measured/predicted ratios divided by their mean, so the simulated engine has the real one's
mean behaviour and its spread, slow outliers included. The mean is taken out because a
ratio's mean is above 1 wherever the timings have a right tail, even when the fit is right
on average: drawn as they are, the ratios of a live CPU profile (mean 1.035) made every
simulated step 3.5% slower than the fit, and the twin's capacity as much below the live
one (docs/results.md §9). `calibrate_profiled` profiles that simulated engine as
`sim.calibration.calibrate` profiles the modelled GPU, so that the policies plan with a
predictor fitted to noisy timings, never with the engine's own expected-time model.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np

from slidingserve.core.batch import BatchShape, TimedBatch
from slidingserve.core.view import EngineLimits
from slidingserve.predictor import BatchLatencyPredictor
from slidingserve.predictor.calibration import (
    DEFAULT_SAMPLES,
    Calibration,
    calibration_of,
    fit_batches,
    profiling_shapes,
)
from slidingserve.predictor.steps import EngineSteps
from slidingserve.sim.hardware.noise import FloatArray, NoiseStream, Seed, profiling_seed

MIN_TIME_SHARE = 0.5  # a step never runs in under this share of the fastest measured step


KV_PROBE = 1_000_000  # tokens of KV in the probe that measures the cost of reading KV


class ProfiledLatency:
    """Iteration times of a profiled engine: fitted predictor × measured relative noise.

    Implements the simulator's `IterationTimer`. The predictor is fitted once to all the
    steps (with the profiler's held-out split); the noise factors are the steps' own
    measured/predicted ratios over their mean (so a step takes the fitted time on average),
    resampled with the seed.
    """

    def __init__(self, steps: EngineSteps, seed: int = 0) -> None:
        self.steps = steps
        self.predictor: BatchLatencyPredictor = fit_batches(list(steps.batches)).predictor
        self._floor = MIN_TIME_SHARE * min(batch.seconds for batch in steps.batches)
        predicted = np.array([self.expected_time(batch.shape) for batch in steps.batches])
        measured = np.array([batch.seconds for batch in steps.batches])
        ratios = measured / predicted
        self.ratios: FloatArray = ratios / ratios.mean()  # noise of mean 1
        self._noise = NoiseStream(self._draw_factors, seed)

    def with_seed(self, seed: Seed) -> ProfiledLatency:
        """The same engine (no refit) with the noise stream of `seed`."""
        twin = copy.copy(self)
        twin._noise = NoiseStream(twin._draw_factors, seed)
        return twin

    def expected_time(self, shape: BatchShape) -> float:
        """Noise-free time (s) of one step running `shape`."""
        return max(self._floor, self.predictor.predict(shape))

    def sample_time(self, shape: BatchShape) -> float:
        return self.expected_time(shape) * self._noise.next()

    def time_batches(
        self, shapes: Sequence[BatchShape], rng: np.random.Generator
    ) -> list[TimedBatch]:
        """`shapes` as the engine runs them: each expected time × a measured ratio drawn
        from `rng` (this engine's noise, from a stream of the caller's)."""
        factors = self._draw_factors(rng, len(shapes)).tolist()
        return [
            TimedBatch(shape, self.expected_time(shape) * factor)
            for shape, factor in zip(shapes, factors, strict=True)
        ]

    def decode_run_times(self, num_decodes: int, decode_kv: int, steps: int) -> FloatArray:
        """Noisy times (s) of up to `steps` decode-only steps; see `GroundTruthLatency`."""
        if num_decodes < 1 or decode_kv < 0 or steps < 0:
            raise ValueError(
                f"need num_decodes >= 1, decode_kv >= 0, steps >= 0; "
                f"got {num_decodes}, {decode_kv}, {steps}"
            )
        kv = decode_kv + num_decodes * np.arange(steps, dtype=np.float64)
        # With |D| fixed, every feature set's decode-only prediction is affine in Σu (the
        # KV the decodes read): two predictions give it for the whole run.
        empty = self.predictor.predict(BatchShape((0,) * num_decodes, ()))
        read = self.predictor.predict(BatchShape((KV_PROBE,) + (0,) * (num_decodes - 1), ()))
        per_kv = (read - empty) / KV_PROBE
        expected = np.maximum(self._floor, empty + per_kv * kv)
        return expected * self._noise.peek(steps)

    def consume_noise(self, count: int) -> None:
        self._noise.consume(count)

    def kv_capacity_blocks(self, block_size: int) -> int:
        """Blocks of `block_size` tokens that hold the engine's KV capacity."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        return self.steps.kv_blocks * self.steps.block_size // block_size

    def _draw_factors(self, rng: np.random.Generator, count: int) -> FloatArray:
        return rng.choice(self.ratios, size=count)


def calibrate_profiled(
    latency: ProfiledLatency,
    limits: EngineLimits,
    seed: int = 0,
    num_samples: int = DEFAULT_SAMPLES,
) -> Calibration:
    """Profile the simulated engine as `sim.calibration.calibrate` profiles the modelled GPU:
    `num_samples` random batches within `limits` and the engine's context length, timed
    with the engine's noise, and the predictor fitted to them.

    Its random stream is `profiling_seed(seed)`, which no `with_seed(s)` trial
    ever draws, so the noise a policy is calibrated on is not the noise it is judged on.
    """
    rng = np.random.default_rng(profiling_seed(seed))
    shapes = profiling_shapes(num_samples, rng, limits, latency.steps.max_model_len)
    return calibration_of(latency.time_batches(shapes, rng), seed)
