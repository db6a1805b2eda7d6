"""What a profiler hands the policies: timed batches and the predictor fitted to them.

Built by whichever engine profiles (the simulator's modelled GPU, a simulated copy of a real
engine, a real vLLM engine); every policy of a run gets the same calibration.
"""

from __future__ import annotations

from dataclasses import dataclass

from slidingserve.core.batch import TimedBatch
from slidingserve.predictor.features import Sample
from slidingserve.predictor.fit import FitResult, fit_predictor
from slidingserve.predictor.model import BatchLatencyPredictor

DEFAULT_SAMPLES = 4000  # timed batches a profiler draws


@dataclass(frozen=True)
class Calibration:
    """Timed batches of one GPU and the predictor fitted to them."""

    batches: tuple[TimedBatch, ...]
    predictor: BatchLatencyPredictor


def fit_batches(
    batches: list[TimedBatch], seed: int = 0, validation_fraction: float = 0.25
) -> FitResult:
    """Fit the predictor; its validation report is measured on held-out batches."""
    samples = [Sample.from_shape(batch.shape, batch.seconds) for batch in batches]
    return fit_predictor(samples, validation_fraction, seed)
