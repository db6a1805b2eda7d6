"""QoServe's two-model predictor: its features, its split and its fit."""

from __future__ import annotations

import numpy as np
import pytest

from slidingserve.core import BatchShape, TimedBatch
from slidingserve.policies.qoserve.predictor import (
    QoServeFeatures,
    QoServeLinear,
    QoServePredictor,
    batch_features,
    fit_qoserve_predictor,
    shape_features,
)
from slidingserve.predictor import random_batch_shapes

# Weights per (total, prefill, decode tokens, decode context, prefill context).
SMALL = QoServeLinear(0.012, (2e-5, 3e-5, 1e-4, 6e-8, 4e-7))
LARGE = QoServeLinear(0.004, (6e-5, 1e-5, 2e-5, 9e-8, 1e-6))
TRUE = QoServePredictor(SMALL, LARGE, 512)


def timed(shapes: list[BatchShape]) -> list[TimedBatch]:
    return [TimedBatch(shape, TRUE.predict_shape(shape)) for shape in shapes]


def test_features_of_a_batch() -> None:
    shape = BatchShape((100, 300), ((50, 1000), (70, 0)))
    assert shape_features(shape) == QoServeFeatures(122, 120, 2, 400, 1000)


def test_a_candidate_never_has_fewer_tokens_than_its_decodes() -> None:
    assert batch_features(128, 200, 5000, 7) == QoServeFeatures(200, 0, 200, 5000, 7)
    assert batch_features(512, 200, 5000, 7) == QoServeFeatures(512, 312, 200, 5000, 7)


def test_batches_up_to_the_split_use_the_small_model() -> None:
    at_split = QoServeFeatures(512, 512, 0, 0, 0)
    above = QoServeFeatures(513, 513, 0, 0, 0)
    assert TRUE.predict(at_split) == pytest.approx(0.012 + 512 * 5e-5)
    assert TRUE.predict(above) == pytest.approx(0.004 + 513 * 7e-5)


def test_the_fit_recovers_two_known_linear_models() -> None:
    rng = np.random.default_rng(7)
    fitted = fit_qoserve_predictor(timed(random_batch_shapes(1500, rng)))
    for model, truth in ((fitted.small, SMALL), (fitted.large, LARGE)):
        w, t = model.weights, truth.weights
        assert model.intercept == pytest.approx(truth.intercept, rel=1e-4)
        # Total = prefill + decode tokens: only these sums are identifiable.
        assert w[0] + w[1] == pytest.approx(t[0] + t[1], rel=1e-4)
        assert w[0] + w[2] == pytest.approx(t[0] + t[2], rel=1e-4)
        assert w[3:] == pytest.approx(t[3:], rel=1e-4)
    for batch in timed(random_batch_shapes(200, np.random.default_rng(8))):
        assert fitted.predict_shape(batch.shape) == pytest.approx(batch.seconds, rel=1e-6)


def test_a_side_without_batches_borrows_the_other_model() -> None:
    small_only = [
        s for s in random_batch_shapes(400, np.random.default_rng(3)) if s.num_tokens <= 512
    ]
    fitted = fit_qoserve_predictor(timed(small_only))
    assert fitted.large == fitted.small
    assert fitted.small.intercept == pytest.approx(SMALL.intercept, rel=1e-4)


def test_an_empty_profile_is_an_error() -> None:
    with pytest.raises(ValueError, match="profile is empty"):
        fit_qoserve_predictor([])


def test_a_non_finite_time_is_an_error() -> None:
    with pytest.raises(ValueError, match="timed batch 0"):
        fit_qoserve_predictor([TimedBatch(BatchShape((5,), ()), float("nan"))])


def test_a_tuple_fitted_before_gets_the_same_predictor() -> None:
    batches = tuple(timed(random_batch_shapes(300, np.random.default_rng(3))))
    first = fit_qoserve_predictor(batches)
    assert fit_qoserve_predictor(batches) is first
    assert fit_qoserve_predictor(list(batches)) == first  # a list is fitted anew: the same fit
    assert fit_qoserve_predictor(list(batches)) is not first
    other_split = fit_qoserve_predictor(batches, split=256)
    assert other_split.split == 256 and other_split is not first
