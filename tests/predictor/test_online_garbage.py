"""The online learner fed garbage: bad measurements are dropped and counted, a refit that
raises leaves the last good predictor, and garbage never spoils a later refit."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pytest

from slidingserve.core.batch import BatchShape
from slidingserve.predictor import (
    BatchFeatures,
    BatchLatencyPredictor,
    LinearModel,
    OnlineConfig,
    OnlineLearner,
    batch_features,
    random_batch_shapes,
)

if TYPE_CHECKING:
    from slidingserve.predictor import FitResult

TRUTH = BatchLatencyPredictor.single(
    LinearModel(0.004, (2e-10, 1e-10, 1e-8, 2e-5, 3e-8, 1.5e-5, 1e-6))
)
STALE = BatchLatencyPredictor.single(LinearModel(1.0, (0.0,) * 7))
FIT_TARGET = "slidingserve.predictor.online.fit_predictor"
PROBE = BatchShape((100, 200), ((50, 10),))
GARBAGE_SECONDS = [float("nan"), float("inf"), float("-inf"), 0.0, -0.01, 1e6, 61.0]


def shapes(n: int, seed: int = 0) -> list[BatchShape]:
    return random_batch_shapes(n, np.random.default_rng(seed))


@pytest.mark.parametrize("seconds", GARBAGE_SECONDS)
def test_a_garbage_time_is_dropped_and_counted(seconds: float) -> None:
    learner = OnlineLearner(STALE)
    learner.record(BatchShape((5,), ()), seconds)
    assert (learner.num_samples, learner.num_dropped) == (0, 1)


def test_the_absurd_bound_is_configurable_and_inclusive() -> None:
    learner = OnlineLearner(STALE, OnlineConfig(max_step_seconds=2.0))
    learner.record(BatchShape((5,), ()), 2.0)
    learner.record(BatchShape((5,), ()), 2.000001)
    assert (learner.num_samples, learner.num_dropped) == (1, 1)
    with pytest.raises(ValueError, match="max_step_seconds"):
        OnlineConfig(max_step_seconds=0.0)


def test_an_empty_batch_is_dropped_not_raised() -> None:
    learner = OnlineLearner(STALE)
    learner.record(BatchShape((), ()), 0.01)  # batch_features would raise on it
    assert (learner.num_samples, learner.num_dropped) == (0, 1)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_features_that_are_not_finite_are_dropped(bad: float) -> None:
    good = batch_features(BatchShape((5,), ()))
    spoiled = BatchFeatures(good.scenario, good.x._replace(decode_kv=bad))
    learner = OnlineLearner(STALE)
    learner.record(spoiled, 0.01)
    learner.record(good, 0.01)
    assert (learner.num_samples, learner.num_dropped) == (1, 1)


def test_garbage_mixed_into_good_measurements_changes_nothing() -> None:
    clean, dirty = OnlineLearner(STALE), OnlineLearner(STALE)
    for k, shape in enumerate(shapes(300)):
        clean.record(shape, TRUTH.predict(shape))
        dirty.record(shape, TRUTH.predict(shape))
        dirty.record(shape, GARBAGE_SECONDS[k % len(GARBAGE_SECONDS)])
    assert dirty.num_samples == clean.num_samples == 300 and dirty.num_dropped == 300
    fitted_clean, fitted_dirty = clean.refit_now(), dirty.refit_now()
    assert fitted_clean is not None and fitted_dirty is not None
    assert dirty.predictor == clean.predictor  # the same fit, as if no garbage came
    assert dirty.predictor.predict(PROBE) == pytest.approx(TRUTH.predict(PROBE), rel=1e-3)


def test_a_refit_that_raises_keeps_the_last_good_predictor(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    learner = OnlineLearner(STALE, OnlineConfig(min_samples=100))
    for shape in shapes(200):
        learner.record(shape, TRUTH.predict(shape))
    assert learner.refit_now() is not None
    good = learner.predictor

    def broken(*args: object, **kwargs: object) -> FitResult:
        raise FloatingPointError("overflow in the fit")

    monkeypatch.setattr(FIT_TARGET, broken)
    for shape in shapes(200, seed=1):
        learner.record(shape, 1e3 * TRUTH.predict(shape))  # plausible times, a bad regime
    with caplog.at_level(logging.ERROR):
        assert learner.refit_now() is None
        assert learner.refit_now() is None
    assert learner.predictor is good
    assert (learner.num_fits, learner.num_failures) == (1, 2)
    assert "keeping the old predictor" in caplog.text


def test_garbage_never_reaches_a_refit(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []

    def recording(samples: list[object], **kwargs: object) -> FitResult:
        seen.extend(s.seconds for s in samples)  # type: ignore[attr-defined]
        raise RuntimeError("only looking")

    monkeypatch.setattr(FIT_TARGET, recording)
    learner = OnlineLearner(STALE, OnlineConfig(min_samples=10))
    for k, shape in enumerate(shapes(50)):
        learner.record(shape, GARBAGE_SECONDS[k % len(GARBAGE_SECONDS)])
        learner.record(shape, 0.01)
    learner.refit_now()
    assert len(seen) == 50 and set(seen) == {0.01}
    assert learner.num_dropped == 50 and learner.predictor is STALE
