"""Calibrate on the simulated GPU, as a profiler would on a real one: time random batches,
fit the batch-latency predictor, and hand both to the policies that need them."""

from __future__ import annotations

import numpy as np

from slidingserve.core.batch import TimedBatch
from slidingserve.core.view import EngineLimits
from slidingserve.predictor.calibration import (
    DEFAULT_SAMPLES,
    Calibration,
    calibration_of,
    profiling_shapes,
)
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig, load_model
from slidingserve.sim.hardware.noise import profiling_seed


def time_batches(
    hardware: HardwareConfig,
    limits: EngineLimits,
    num_samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
) -> list[TimedBatch]:
    """Time `num_samples` random batches on the ground truth, noise included.

    The batches respect the engine's limits and the model's context length. Shapes and
    noise come from `profiling_seed(seed)`, a stream no trial draws.
    """
    noise_seed, shape_seed = profiling_seed(seed).spawn(2)
    rng = np.random.default_rng(shape_seed)
    max_context = load_model(hardware.model).max_model_len
    shapes = profiling_shapes(num_samples, rng, limits, max_context)
    latency = GroundTruthLatency(hardware, noise_seed)
    return [TimedBatch(shape, latency.sample_time(shape)) for shape in shapes]


def calibrate(hardware: HardwareConfig, limits: EngineLimits, seed: int = 0) -> Calibration:
    """The timed batches and the fitted predictor, for every policy of a run to share."""
    return calibration_of(time_batches(hardware, limits, seed=seed), seed)
