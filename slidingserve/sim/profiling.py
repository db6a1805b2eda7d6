"""Fit the batch-latency predictor to the simulated GPU, as a profiler would on a real one."""

from __future__ import annotations

import numpy as np

from slidingserve.core.view import EngineLimits
from slidingserve.predictor import FitResult, Sample, fit_predictor, random_batch_shapes
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig, load_model


def profile_ground_truth(
    hardware: HardwareConfig,
    limits: EngineLimits,
    num_samples: int = 4000,
    seed: int = 0,
    validation_fraction: float = 0.25,
) -> FitResult:
    """Time `num_samples` random batches on the ground truth (with its noise) and fit.

    The batches respect the engine's limits and the model's context; the fit's validation
    report is measured on held-out batches.
    """
    if num_samples < 50:
        raise ValueError(f"need at least 50 samples to fit and validate, got {num_samples}")
    latency = GroundTruthLatency(hardware, seed)
    shapes = random_batch_shapes(
        num_samples,
        np.random.default_rng(seed),
        max_tokens=limits.max_num_batched_tokens,
        max_context=load_model(hardware.model).max_model_len,
        max_decodes=min(limits.max_num_seqs, limits.max_num_batched_tokens),
    )
    samples = [Sample.from_shape(shape, latency.sample_time(shape)) for shape in shapes]
    return fit_predictor(samples, validation_fraction, seed)


def hardware_label(hardware: HardwareConfig) -> str:
    return f"{hardware.gpu}-tp{hardware.tp}"
