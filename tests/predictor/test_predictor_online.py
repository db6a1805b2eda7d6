from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from slidingserve.core.batch import BatchShape
from slidingserve.predictor import (
    BatchLatencyPredictor,
    LinearModel,
    OnlineConfig,
    OnlineLearner,
    batch_features,
    random_batch_shapes,
)
from slidingserve.predictor.fit import fit_predictor

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from slidingserve.predictor import FitResult, Sample

TRUE_MODEL = LinearModel(0.004, (2e-10, 1e-10, 1e-8, 2e-5, 3e-8, 1.5e-5, 1e-6))
TRUTH = BatchLatencyPredictor.single(TRUE_MODEL)
STALE = BatchLatencyPredictor.single(LinearModel(1.0, (0.0,) * 7))
FIT_TARGET = "slidingserve.predictor.online.fit_predictor"  # what the learner calls


def feed(learner: OnlineLearner, n: int, seed: int = 0) -> None:
    for shape in random_batch_shapes(n, np.random.default_rng(seed)):
        learner.record(shape, TRUTH.predict(shape))


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll `condition` until it holds or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


class TestRefitNow:
    def test_swaps_in_a_fitted_predictor(self) -> None:
        learner = OnlineLearner(STALE, OnlineConfig(min_samples=100))
        before = learner.predictor
        feed(learner, 300)
        result = learner.refit_now()
        assert result is not None
        assert learner.predictor is result.predictor is not before
        assert learner.num_fits == 1
        shape = BatchShape((100, 200), ((50, 10),))
        assert learner.predictor.predict(shape) == pytest.approx(TRUTH.predict(shape), rel=1e-3)
        assert before.predict(shape) == 1.0  # a reader's old reference is untouched

    @pytest.mark.parametrize("features", ["paper", "rich"])
    def test_refits_keep_the_feature_set(self, features: str) -> None:
        width = 7 if features == "paper" else 13
        start = BatchLatencyPredictor.single(LinearModel(1.0, (0.0,) * width), features)
        learner = OnlineLearner(start, OnlineConfig(min_samples=100))
        feed(learner, 300)
        assert learner.refit_now() is not None
        assert learner.predictor.features == features
        assert len(learner.predictor.global_model.weights) == width

    def test_too_few_samples_keeps_the_predictor(self) -> None:
        learner = OnlineLearner(STALE, OnlineConfig(min_samples=100))
        feed(learner, 99)
        assert learner.refit_now() is None
        assert learner.predictor is STALE

    def test_a_failed_fit_is_logged_and_harmless(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        def broken(*args: object, **kwargs: object) -> FitResult:
            raise RuntimeError("singular")

        monkeypatch.setattr(FIT_TARGET, broken)
        learner = OnlineLearner(STALE, OnlineConfig(min_samples=10))
        feed(learner, 20)
        with caplog.at_level(logging.ERROR):
            assert learner.refit_now() is None
        assert learner.predictor is STALE
        assert learner.num_failures == 1
        assert "refit on 20 samples failed" in caplog.text


class TestRecord:
    def test_buffer_is_bounded(self) -> None:
        learner = OnlineLearner(STALE, OnlineConfig(buffer_size=50))
        feed(learner, 120)
        assert learner.num_samples == 50

    @pytest.mark.parametrize("seconds", [float("nan"), float("inf"), 0.0, -0.01])
    def test_drops_bad_measurements(self, seconds: float) -> None:
        learner = OnlineLearner(STALE)
        learner.record(BatchShape((5,), ()), seconds)
        assert learner.num_samples == 0
        assert learner.num_dropped == 1

    def test_accepts_features(self) -> None:
        learner = OnlineLearner(STALE)
        learner.record(batch_features(BatchShape((5,), ())), 0.01)
        assert learner.num_samples == 1

    def test_readers_never_wait_on_a_fit(self, monkeypatch: pytest.MonkeyPatch) -> None:
        release = threading.Event()
        started = threading.Event()

        def slow_fit(samples: list[Sample], **kwargs: Any) -> FitResult:
            started.set()
            release.wait(10)
            return fit_predictor(samples, **kwargs)

        monkeypatch.setattr(FIT_TARGET, slow_fit)
        learner = OnlineLearner(STALE, OnlineConfig(min_samples=50))
        feed(learner, 100)
        fitting = threading.Thread(target=learner.refit_now)
        fitting.start()
        assert started.wait(10)
        begin = time.perf_counter()
        assert learner.predictor is STALE
        feed(learner, 10, seed=1)
        assert time.perf_counter() - begin < 1.0
        release.set()
        fitting.join(10)
        assert learner.predictor is not STALE


class TestBackgroundThread:
    def test_refits_after_enough_new_samples(self) -> None:
        config = OnlineConfig(refit_every=200, refit_interval=3600.0, min_samples=100)
        with OnlineLearner(STALE, config) as learner:
            feed(learner, 150)
            time.sleep(0.05)
            assert learner.num_fits == 0
            feed(learner, 100, seed=1)
            assert wait_for(lambda: learner.num_fits >= 1)
        assert learner.predictor is not STALE

    def test_refits_after_the_interval(self) -> None:
        config = OnlineConfig(refit_every=10**6, refit_interval=0.05, min_samples=100)
        learner = OnlineLearner(STALE, config)
        learner.start()
        try:
            feed(learner, 150)
            assert wait_for(lambda: learner.num_fits >= 1)
        finally:
            learner.stop(timeout=10)
        fits = learner.num_fits
        feed(learner, 150, seed=1)
        time.sleep(0.2)
        assert learner.num_fits == fits  # stopped: no more refits

    def test_start_twice_is_an_error(self) -> None:
        with OnlineLearner(STALE) as learner, pytest.raises(RuntimeError, match="already"):
            learner.start()

    def test_config_validation(self) -> None:
        with pytest.raises(ValueError, match="refit_interval"):
            OnlineConfig(refit_interval=0.0)


class Listener:
    """Records every sample snapshot it is handed, and the thread that handed it."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[list[Sample]] = []
        self.threads: list[str] = []
        self.error = error

    def __call__(self, samples: Sequence[Sample]) -> None:
        self.calls.append(list(samples))
        self.threads.append(threading.current_thread().name)
        if self.error is not None:
            raise self.error


class TestRefitListener:
    def test_gets_the_very_samples_of_each_refit(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fitted: list[list[Sample]] = []

        def recording_fit(samples: list[Sample], **kwargs: Any) -> FitResult:
            fitted.append(list(samples))
            return fit_predictor(samples, **kwargs)

        monkeypatch.setattr(FIT_TARGET, recording_fit)
        listener = Listener()
        learner = OnlineLearner(STALE, OnlineConfig(min_samples=100), on_refit=listener)
        feed(learner, 150)
        learner.refit_now()
        feed(learner, 50, seed=1)
        learner.refit_now()
        assert learner.num_fits == 2
        assert [len(c) for c in listener.calls] == [150, 200]
        assert listener.calls == fitted  # same samples, same order, as often

    def test_not_called_without_enough_samples(self) -> None:
        listener = Listener()
        learner = OnlineLearner(STALE, OnlineConfig(min_samples=100), on_refit=listener)
        feed(learner, 99)
        learner.refit_now()
        assert listener.calls == []

    def test_a_failing_listener_is_counted_logged_and_harmless(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        listener = Listener(RuntimeError("cannot fit"))
        learner = OnlineLearner(STALE, OnlineConfig(min_samples=100), on_refit=listener)
        feed(learner, 120)
        with caplog.at_level(logging.ERROR):
            result = learner.refit_now()
            learner.refit_now()
        assert result is not None and learner.predictor is not STALE  # ours still swapped in
        assert learner.num_listener_failures == 2
        assert learner.num_failures == 0
        assert "refit listener failed on 120 samples" in caplog.text

    def test_called_even_when_the_shared_fit_fails(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def broken(*args: object, **kwargs: object) -> FitResult:
            raise RuntimeError("singular")

        monkeypatch.setattr(FIT_TARGET, broken)
        listener = Listener()
        learner = OnlineLearner(STALE, OnlineConfig(min_samples=10), on_refit=listener)
        feed(learner, 20)
        assert learner.refit_now() is None
        assert learner.num_failures == 1
        assert [len(c) for c in listener.calls] == [20]

    def test_the_background_thread_calls_it(self) -> None:
        listener = Listener()
        config = OnlineConfig(refit_every=100, refit_interval=3600.0, min_samples=100)
        with OnlineLearner(STALE, config, on_refit=listener) as learner:
            feed(learner, 100)
            assert wait_for(lambda: len(listener.calls) >= 1)
        assert listener.threads[0] == "predictor-refit"
        assert len(listener.calls[0]) == 100
