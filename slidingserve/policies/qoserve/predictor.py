"""QoServe's own batch-time predictor: two linear models over five features (docs/baselines.md).

Batches of at most `split` tokens (decodes included) use the small model, larger ones the
large model. Both are fitted, like the project's predictor, by `fit_linear`: robust
non-negative least squares with a free intercept, so that a prediction never decreases
when tokens are added within one model.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from slidingserve.predictor import NUM_FEATURES, Features, Sample, fit_linear

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import NDArray

    from slidingserve.core.batch import BatchShape, TimedBatch

NUM_QOSERVE_FEATURES = 5


class QoServeFeatures(NamedTuple):
    """What QoServe's predictor sees of a batch, in tokens."""

    total_tokens: float  # prefill tokens plus decodes
    prefill_tokens: float  # Σ_P c_i
    decode_tokens: float  # |D|: one token per decode
    decode_context: float  # Σ_D u_i: KV tokens the decodes read
    prefill_context: float  # tokens already cached for the prefill (see `shape_features`)


def shape_features(shape: BatchShape) -> QoServeFeatures:
    """Features of a timed or planned batch.

    The prefill context of a batch is Σ_P u_i over its prefill chunks. A candidate batch
    is predicted with the context of the head of the prefill queue instead
    (`batch_features`); the two agree whenever only the head has a cached prefix, which is
    the common case (every other prefill in a batch is new).
    """
    prefill = shape.num_prefill_tokens
    decodes = shape.num_decodes
    return QoServeFeatures(
        total_tokens=prefill + decodes,
        prefill_tokens=prefill,
        decode_tokens=decodes,
        decode_context=shape.decode_kv,
        prefill_context=sum(u for _, u in shape.prefill_chunks),
    )


def from_project_features(x: Features) -> QoServeFeatures:
    """QoServe's five features from the project's seven (docs/design.md §3): each is a sum of those,
    so a measured `Sample` serves both predictors without keeping the batch's shape."""
    prefill, decodes = x.prefill_tokens, x.num_decodes
    return QoServeFeatures(
        total_tokens=prefill + decodes,
        prefill_tokens=prefill,
        decode_tokens=decodes,
        decode_context=x.decode_kv,
        prefill_context=x.cached_tokens - x.decode_kv,
    )


def batch_features(
    total_tokens: int, num_decodes: int, decode_context: int, prefill_context: int
) -> QoServeFeatures:
    """Features of a candidate batch of `total_tokens` (never fewer than its decodes)."""
    total = max(total_tokens, num_decodes)
    return QoServeFeatures(total, total - num_decodes, num_decodes, decode_context, prefill_context)


@dataclass(frozen=True, slots=True)
class QoServeLinear:
    """T̂ = intercept + Σ_j w_j x_j over the five features, seconds."""

    intercept: float  # seconds
    weights: tuple[float, ...]  # seconds per token of each feature, in QoServeFeatures order

    def __post_init__(self) -> None:
        if len(self.weights) != NUM_QOSERVE_FEATURES:
            raise ValueError(f"expected {NUM_QOSERVE_FEATURES} weights, got {len(self.weights)}")

    def predict(self, x: QoServeFeatures) -> float:
        """Predicted time of a batch with features `x`, seconds."""
        w = self.weights
        return self.intercept + w[0] * x[0] + w[1] * x[1] + w[2] * x[2] + w[3] * x[3] + w[4] * x[4]


@dataclass(frozen=True, slots=True)
class QoServePredictor:
    """The two models and where they split."""

    small: QoServeLinear  # batches of at most `split` tokens
    large: QoServeLinear  # batches of more than `split` tokens
    split: int = 512  # tokens, decodes included

    def predict(self, x: QoServeFeatures) -> float:
        """Predicted time of a batch with features `x`, seconds."""
        model = self.small if x.total_tokens <= self.split else self.large
        return model.predict(x)

    def predict_shape(self, shape: BatchShape) -> float:
        """Predicted time of the batch `shape`, seconds."""
        return self.predict(shape_features(shape))


def fit_qoserve_predictor(batches: Sequence[TimedBatch], split: int = 512) -> QoServePredictor:
    """Fit the small and the large model to timed batches (seconds); see `fit_from_samples`.

    A tuple of batches fitted before in this process (every simulation of a goodput search
    builds QoServe from the same calibration) gets the same predictor again, without the
    66 ms fit: the fit is deterministic and the predictor immutable."""
    if not batches:
        raise ValueError("qoserve fits its predictor to timed batches, but the profile is empty")
    if not isinstance(batches, tuple):
        return _fit_batches(batches, split)
    key = (id(batches), split)  # the entry holds the tuple: its id is not reused meanwhile
    fitted = _FITTED.get(key)
    if fitted is None:
        fitted = (batches, _fit_batches(batches, split))
        _FITTED[key] = fitted
        while len(_FITTED) > FITS_KEPT:
            _FITTED.popitem(last=False)
    else:
        _FITTED.move_to_end(key)
    return fitted[1]


FITS_KEPT = 8  # predictors `fit_qoserve_predictor` keeps (the latest used), each with its batches
_FITTED: OrderedDict[tuple[int, int], tuple[tuple[TimedBatch, ...], QoServePredictor]] = (
    OrderedDict()
)


def _fit_batches(batches: Sequence[TimedBatch], split: int) -> QoServePredictor:
    return fit_from_samples([Sample.from_shape(b.shape, b.seconds) for b in batches], split)


def fit_from_samples(samples: Sequence[Sample], split: int = 512) -> QoServePredictor:
    """Fit the small and the large model to measured samples (seconds).

    A side of the split without any sample borrows the other side's model. Raises
    ValueError without samples or with a time that is not finite.
    """
    if not samples:
        raise ValueError("qoserve fits its predictor to measured batches, but none were given")
    for i, sample in enumerate(samples):
        if not math.isfinite(sample.seconds):
            raise ValueError(f"timed batch {i}: time {sample.seconds!r} is not finite")
    features = [from_project_features(sample.x) for sample in samples]
    small = [i for i, x in enumerate(features) if x.total_tokens <= split] or list(
        range(len(samples))
    )
    large = [i for i, x in enumerate(features) if x.total_tokens > split] or small
    x = np.array(features, dtype=float).reshape(-1, NUM_QOSERVE_FEATURES)
    y = np.array([sample.seconds for sample in samples], dtype=float)
    return QoServePredictor(_fit(x[small], y[small]), _fit(x[large], y[large]), split)


def _fit(x: NDArray[np.float64], y: NDArray[np.float64]) -> QoServeLinear:
    """`fit_linear` on the five features, padded with all-zero columns to its seven.

    `fit_linear` gives a constant column weight zero, so the padding changes nothing.
    """
    padded = np.zeros((x.shape[0], NUM_FEATURES))
    padded[:, :NUM_QOSERVE_FEATURES] = x
    model = fit_linear(padded, y)
    return QoServeLinear(model.intercept, model.weights[:NUM_QOSERVE_FEATURES])
