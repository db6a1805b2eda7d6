"""The two feature sets: `paper` is exactly the paper's predictor, `rich` meets the accuracy
targets on the simulated GPU, and both predict a time that never falls as tokens are added."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slidingserve.core.batch import BatchShape, TimedBatch
from slidingserve.core.view import EngineLimits
from slidingserve.predictor import (
    NUM_FEATURES,
    NUM_RICH_FEATURES,
    BatchLatencyPredictor,
    LinearModel,
    PrefillQueueProfile,
    Sample,
    batch_features,
    feature_set,
    fit_predictor,
    predicted_time_at,
    random_batch_shapes,
    time_to_budget,
)
from slidingserve.predictor.calibration import calibration_of, fit_batches
from slidingserve.sim.calibration import time_batches
from slidingserve.sim.hardware import HardwareConfig

RICH_WIDTH = feature_set("rich").width


def spec_features(shape: BatchShape) -> tuple[int, ...]:
    """x1..x7 straight from docs/design.md §3's table, the reference the paper set must equal."""
    chunks, decodes = shape.prefill_chunks, shape.decode_contexts
    return (
        sum(c * (u + c) for c, u in chunks),
        sum(c * c for c, _ in chunks),
        sum(decodes) + sum(u for _, u in chunks),
        len(decodes),
        sum(decodes),
        sum(c for c, _ in chunks),
        max((c for c, _ in chunks), default=0),
    )


shape_strategy = st.builds(
    BatchShape,
    st.lists(st.integers(0, 9000), max_size=300).map(tuple),
    st.lists(st.tuples(st.integers(1, 3000), st.integers(0, 9000)), max_size=8).map(tuple),
).filter(lambda shape: shape.num_tokens > 0)
queue_strategy = st.builds(
    PrefillQueueProfile,
    st.lists(st.integers(0, 5000), max_size=300),
    st.lists(st.tuples(st.integers(1, 1500), st.integers(0, 5000)), min_size=1, max_size=8),
)


class TestPaperIsUnchanged:
    @given(shape=shape_strategy)
    def test_first_seven_features_are_the_spec_s(self, shape: BatchShape) -> None:
        assert tuple(batch_features(shape).x[:NUM_FEATURES]) == spec_features(shape)

    def test_the_paper_set_weighs_exactly_x1_to_x7(self) -> None:
        paper = feature_set("paper")
        assert paper.columns == tuple(range(7)) and paper.width == 7

    def test_a_paper_fit_never_looks_past_x7(self) -> None:
        rng = np.random.default_rng(0)
        truth = BatchLatencyPredictor.single(
            LinearModel(0.004, (2e-10, 1e-10, 1e-8, 2e-5, 3e-8, 1.5e-5, 1e-6))
        )
        samples = [
            Sample.from_shape(s, truth.predict(s) * (1 + rng.normal(0, 0.02)))
            for s in random_batch_shapes(800, rng)
        ]
        scrambled = [
            s._replace(x=s.x._replace(num_prefills=int(rng.integers(1000)), token_tiles=-5))
            for s in samples
        ]
        fitted = fit_predictor(samples, features="paper").predictor
        assert fitted == fit_predictor(scrambled, features="paper").predictor
        assert fitted.features == "paper"
        assert len(fitted.global_model.weights) == 7

    @given(shape=shape_strategy, weights=st.tuples(*[st.floats(0, 1e-3)] * 7))
    def test_a_paper_prediction_is_the_seven_term_sum(
        self, shape: BatchShape, weights: tuple[float, ...]
    ) -> None:
        x = spec_features(shape)
        expected = 0.004
        for w, value in zip(weights, x, strict=True):
            expected += w * value
        model = BatchLatencyPredictor.single(LinearModel(0.004, weights))
        assert model.predict(shape) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def simulated_batches(hardware: HardwareConfig, seed: int = 0) -> list[TimedBatch]:
    """2,000 batches timed on the simulated GPU (2% noise), as a profiler draws them."""
    return time_batches(hardware, EngineLimits(), 2000, seed)


@pytest.fixture(scope="module")
def fitted_rich() -> BatchLatencyPredictor:
    """The rich predictor of the simulated A100 TP1 (Llama-3-8B)."""
    return fit_batches(simulated_batches(HardwareConfig()), features="rich").predictor


GPUS = [HardwareConfig(), HardwareConfig(tp=2), HardwareConfig(model="llama-2-7b")]


class TestAccuracyOnTheSimulatedGpu:
    """Held-out targets: MAPE ≤ 5% and R² ≥ 0.995 overall, MAPE ≤ 5% in every scenario.

    Per scenario R² ≥ 0.995 is not asserted: with 2% noise on decode-only batches, whose
    times span little, even the noise-free ground truth scores about 0.995 at TP2.
    """

    @pytest.mark.parametrize("hardware", GPUS, ids=["llama3-tp1", "llama3-tp2", "llama2-tp1"])
    def test_rich_meets_the_targets(self, hardware: HardwareConfig) -> None:
        report = fit_batches(simulated_batches(hardware), features="rich").validation
        assert report.overall.n == 500
        assert report.overall.mape <= 0.05
        assert report.overall.r2 >= 0.995
        for stats in report.by_scenario.values():
            assert stats.mape <= 0.05
            assert stats.r2 >= 0.98

    @pytest.mark.parametrize("hardware", GPUS, ids=["llama3-tp1", "llama3-tp2", "llama2-tp1"])
    def test_paper_misses_them_on_mixed_batches(self, hardware: HardwareConfig) -> None:
        """The targets are not met by any fit: the paper's features miss them."""
        report = fit_batches(simulated_batches(hardware), features="paper").validation
        assert report.overall.mape > 0.05
        assert max(stats.mape for stats in report.by_scenario.values()) > 0.08

    def test_rich_is_the_default_of_new_fits_and_calibrations(self) -> None:
        batches = simulated_batches(HardwareConfig(), seed=1)
        assert fit_batches(batches).predictor.features == "rich"
        calibration = calibration_of(batches)
        assert calibration.predictor.features == "rich"
        assert calibration.predictor_for("paper").features == "paper"
        paper = fit_batches(batches, features="paper").predictor
        assert calibration.predictor_for("paper") == paper
        assert calibration_of(batches, features="paper").predictor.features == "paper"


def non_decreasing(values: list[float]) -> bool:
    return all(a <= b for a, b in pairwise(values))


class TestMonotoneAlongTheQueue:
    @given(profile=queue_strategy, data=st.data())
    def test_every_feature_grows_with_b(
        self, profile: PrefillQueueProfile, data: st.DataObject
    ) -> None:
        first = 0 if profile.num_decodes else 1
        bs = sorted(data.draw(st.lists(st.integers(first, profile.capacity), max_size=40)))
        rows = [profile.features_at(b).x for b in bs]
        for j in range(NUM_RICH_FEATURES):
            assert non_decreasing([row[j] for row in rows]), j

    @given(
        profile=queue_strategy,
        intercept=st.floats(-0.01, 0.01),
        weights=st.tuples(*[st.floats(0, 1e-3)] * RICH_WIDTH),
    )
    def test_any_non_negative_rich_model_never_falls(
        self, profile: PrefillQueueProfile, intercept: float, weights: tuple[float, ...]
    ) -> None:
        model = BatchLatencyPredictor.single(LinearModel(intercept, weights), "rich")
        step = max(1, profile.capacity // 200)
        times = [predicted_time_at(model, profile, b) for b in range(1, profile.capacity, step)]
        assert non_decreasing(times)

    @given(profile=queue_strategy, limit=st.floats(0.0, 0.3))
    def test_time_to_budget_with_the_fitted_rich_predictor_is_exact(
        self, fitted_rich: BatchLatencyPredictor, profile: PrefillQueueProfile, limit: float
    ) -> None:
        model = fitted_rich
        budget = time_to_budget(model, profile, limit, max_tokens=2048)
        if not budget.fits:
            assert predicted_time_at(model, profile, 0) > limit
            return
        b = budget.prefill_tokens
        assert predicted_time_at(model, profile, b) <= limit
        if b < min(profile.capacity, 2048 - profile.num_decodes):
            assert predicted_time_at(model, profile, b + 1) > limit


def test_the_fitted_rich_predictor_weighs_its_new_features(
    fitted_rich: BatchLatencyPredictor,
) -> None:
    """The accuracy comes from the new features: a per-chunk cost and whole tiles."""
    for model in (fitted_rich.global_model, *fitted_rich.experts.values()):
        assert model.weights[0] == 0.0  # x1 is left out of the rich set
        assert all(w >= 0 and math.isfinite(w) for w in model.weights)
    mixed = fitted_rich.model_for(batch_features(BatchShape((1,), ((1, 0),))).scenario)
    assert mixed.weights[7] > 0  # x8: a fixed cost per prefill chunk
    assert mixed.weights[9] > 0  # x10: whole tiles of tokens
