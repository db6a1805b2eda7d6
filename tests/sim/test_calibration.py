"""Calibration on the simulated GPU: seeded, and apart from the trials' noise."""

from __future__ import annotations

import numpy as np

from slidingserve.core import EngineLimits
from slidingserve.sim.calibration import time_batches
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig


def factors(seconds: list[float], expected: list[float]) -> np.ndarray:
    ratio: np.ndarray = np.array(seconds) / np.array(expected)
    return ratio


def test_calibration_noise_is_not_the_noise_of_the_trial_with_the_same_seed() -> None:
    hardware = HardwareConfig()
    batches = time_batches(hardware, EngineLimits(), num_samples=60, seed=0)
    truth = GroundTruthLatency(hardware, 0)
    expected = [truth.expected_time(b.shape) for b in batches]
    calibrated = factors([b.seconds for b in batches], expected)
    trial = GroundTruthLatency(hardware, 0)  # what simulate(spec, rate, seed=0) draws
    judged = factors([trial.sample_time(b.shape) for b in batches], expected)
    assert np.abs(calibrated - 1).max() > 0  # noisy ...
    assert not np.allclose(calibrated, judged)  # ... but not with the trial's factors


def test_calibration_is_seeded() -> None:
    first, again, other = (
        time_batches(HardwareConfig(), EngineLimits(), num_samples=50, seed=seed)
        for seed in (3, 3, 4)
    )
    assert first == again
    assert first != other
