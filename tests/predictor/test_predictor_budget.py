from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slidingserve.predictor import (
    NUM_RICH_FEATURES,
    BatchLatencyPredictor,
    Budget,
    Features,
    LinearModel,
    ModelChoice,
    PrefillQueueProfile,
    Scenario,
    predicted_time_at,
    queue_time_function,
    time_to_budget,
)


def make_predictor(
    intercept: float = 0.005,
    weights: tuple[float, ...] = (1e-9, 1e-9, 1e-8, 1e-4, 1e-8, 2e-5, 1e-6),
) -> BatchLatencyPredictor:
    return BatchLatencyPredictor.single(LinearModel(intercept, weights))


class CountingModel:
    """Wraps a predictor and counts its predictions."""

    def __init__(self, inner: BatchLatencyPredictor) -> None:
        self.inner = inner
        self.calls = 0

    def predict_features(self, scenario: Scenario, x: Features) -> float:
        self.calls += 1
        return self.inner.predict_features(scenario, x)


def brute_force(
    model: BatchLatencyPredictor, profile: PrefillQueueProfile, limit: float, max_tokens: int
) -> int:
    """Largest fitting b by trying every b (b = 0 must fit)."""
    b_max = max(0, min(profile.capacity, max_tokens - profile.num_decodes))
    fitting = [b for b in range(b_max + 1) if predicted_time_at(model, profile, b) <= limit]
    return max(fitting)


weights_strategy = st.tuples(*[st.floats(0, 1e-3) for _ in range(7)])
profile_strategy = st.builds(
    PrefillQueueProfile,
    st.lists(st.integers(0, 500), max_size=5),
    st.lists(st.tuples(st.integers(1, 30), st.integers(0, 300)), max_size=6),
)


class TestTimeToBudget:
    @given(
        profile=profile_strategy,
        intercept=st.floats(-0.01, 0.01),
        weights=weights_strategy,
        limit=st.floats(-0.01, 2.0),
        max_tokens=st.integers(1, 200),
    )
    def test_boundary_matches_brute_force(
        self,
        profile: PrefillQueueProfile,
        intercept: float,
        weights: tuple[float, ...],
        limit: float,
        max_tokens: int,
    ) -> None:
        model = make_predictor(intercept, weights)
        budget = time_to_budget(model, profile, limit, max_tokens)
        base = predicted_time_at(model, profile, 0)
        if base > limit:
            assert budget == Budget(profile.num_decodes, 0, base, False)
            return
        b = brute_force(model, profile, limit, max_tokens)
        assert budget.prefill_tokens == b
        assert budget.total_tokens == profile.num_decodes + b
        assert budget.fits
        assert budget.predicted_time == predicted_time_at(model, profile, b) <= limit
        b_max = min(profile.capacity, max_tokens - profile.num_decodes)
        if b < b_max:
            assert predicted_time_at(model, profile, b + 1) > limit

    @given(profile=profile_strategy, weights=weights_strategy, data=st.data())
    def test_limit_exactly_equal_to_a_prediction(
        self, profile: PrefillQueueProfile, weights: tuple[float, ...], data: st.DataObject
    ) -> None:
        model = make_predictor(0.001, weights)
        first = 0 if profile.num_decodes else 1
        if profile.capacity < first:
            return
        b = data.draw(st.integers(first, profile.capacity))
        limit = predicted_time_at(model, profile, b)
        budget = time_to_budget(model, profile, limit, max_tokens=10_000)
        # Equal predictions (zero weights) may extend the budget past b, never stop short.
        assert budget.prefill_tokens >= b
        assert budget.predicted_time == limit

    def test_exact_boundary_by_hand(self) -> None:
        # 1 ms per prefill token, 10 ms fixed, 2 decodes at 1 ms each: T(b) = 12 ms + b ms.
        model = make_predictor(0.010, (0, 0, 0, 0.001, 0, 0.001, 0))
        profile = PrefillQueueProfile([5, 5], [(10, 0), (10, 0)])
        budget = time_to_budget(model, profile, 0.0175, 100)
        assert budget[:2] == (7, 5)
        assert budget.predicted_time == pytest.approx(0.017)
        assert budget.fits
        exact = predicted_time_at(model, profile, 5)
        assert time_to_budget(model, profile, exact, 100).prefill_tokens == 5

    def test_below_the_decodes_alone(self) -> None:
        model = make_predictor(0.010, (0, 0, 0, 0.001, 0, 0.001, 0))
        profile = PrefillQueueProfile([5, 5], [(10, 0)])
        budget = time_to_budget(model, profile, 0.011, 100)
        assert budget[:2] == (2, 0)
        assert budget.predicted_time == pytest.approx(0.012)
        assert not budget.fits

    def test_only_the_decodes_fit(self) -> None:
        model = make_predictor(0.010, (0, 0, 0, 0.001, 0, 0.001, 0))
        profile = PrefillQueueProfile([5, 5], [(10, 0)])
        budget = time_to_budget(model, profile, 0.0125, 100)
        assert budget[:2] == (2, 0)
        assert budget.predicted_time == pytest.approx(0.012)
        assert budget.fits

    @pytest.mark.parametrize(("max_tokens", "expected"), [(10_000, 60), (50, 48), (2, 0), (1, 0)])
    def test_huge_limit_takes_capacity_or_max_tokens(self, max_tokens: int, expected: int) -> None:
        profile = PrefillQueueProfile([5, 5], [(20, 0), (40, 7)])
        budget = time_to_budget(make_predictor(), profile, 1e9, max_tokens)
        assert budget.prefill_tokens == expected
        assert budget.fits

    def test_no_decodes_empty_batch_takes_no_time(self) -> None:
        profile = PrefillQueueProfile([], [(20, 0)])
        budget = time_to_budget(make_predictor(intercept=0.5), profile, 0.1, 100)
        assert budget == Budget(0, 0, 0.0, True)
        assert predicted_time_at(make_predictor(), profile, 0) == 0.0

    def test_decode_only_prediction_uses_its_own_model(self) -> None:
        """A slower decode-only expert can refuse b = 0 though a mixed batch predicts less."""
        cheap = LinearModel(0.001, (0,) * 7)
        slow = LinearModel(0.050, (0,) * 7)
        model = BatchLatencyPredictor(
            cheap, {Scenario.DECODE_ONLY: slow}, {Scenario.DECODE_ONLY: ModelChoice.EXPERT}
        )
        profile = PrefillQueueProfile([3], [(10, 0)])
        assert not time_to_budget(model, profile, 0.01, 100).fits

    @pytest.mark.parametrize("capacity", [1, 2, 3, 100, 1000, 2047, 5000])
    @pytest.mark.parametrize("fraction", [0.0, 0.3, 0.999, 2.0])
    def test_prediction_count_is_logarithmic(self, capacity: int, fraction: float) -> None:
        inner = make_predictor(0.0, (0, 0, 0, 0, 0, 1e-5, 0))
        profile = PrefillQueueProfile([1], [(capacity, 0)])
        counter = CountingModel(inner)
        time_to_budget(counter, profile, fraction * capacity * 1e-5, max_tokens=10_000)
        assert counter.calls <= 1 + math.ceil(math.log2(capacity + 1))

    def test_prediction_count_with_max_tokens_2048(self) -> None:
        profile = PrefillQueueProfile([100] * 64, [(300, 50)] * 128)
        counter = CountingModel(make_predictor())
        time_to_budget(counter, profile, 0.03, max_tokens=2048)
        assert counter.calls <= math.log2(2048) + 2


rich_weights_strategy = st.tuples(*[st.floats(0, 1e-3) for _ in range(NUM_RICH_FEATURES)])


class TestInlineQueueTimes:
    """`PrefillQueueProfile.linear_time` and `queue_time_function`: the predictions along a
    queue made inline are the model's, bit for bit."""

    @given(
        profile=profile_strategy,
        intercept=st.floats(-0.01, 0.01),
        weights=st.one_of(weights_strategy, rich_weights_strategy),
    )
    def test_inline_time_is_the_model_s_bit_for_bit(
        self, profile: PrefillQueueProfile, intercept: float, weights: tuple[float, ...]
    ) -> None:
        model = LinearModel(intercept, weights)
        time_at = profile.linear_time(intercept, weights)
        for b in range(1, profile.capacity + 1):
            assert time_at(b) == model.predict(profile.features_at(b).x)

    @given(profile=profile_strategy, weights=rich_weights_strategy, limit=st.floats(0, 0.5))
    def test_time_to_budget_inline_equals_through_the_model(
        self, profile: PrefillQueueProfile, weights: tuple[float, ...], limit: float
    ) -> None:
        decode_only = LinearModel(0.002, tuple(w / 2 for w in weights))
        predictor = BatchLatencyPredictor(
            LinearModel(0.004, weights),
            {Scenario.DECODE_ONLY: decode_only},
            {Scenario.DECODE_ONLY: ModelChoice.EXPERT},
            features="rich",
        )
        inline = time_to_budget(predictor, profile, limit, max_tokens=150)
        counted = CountingModel(predictor)  # no `linear_model`: every probe through the model
        assert time_to_budget(counted, profile, limit, max_tokens=150) == inline
        time_at = queue_time_function(predictor, profile)
        for b in range(1, profile.capacity + 1):
            assert time_at(b) == predicted_time_at(predictor, profile, b)

    def test_a_model_without_linear_parts_is_asked(self) -> None:
        counted = CountingModel(make_predictor())
        profile = PrefillQueueProfile([10], [(50, 0)])
        assert queue_time_function(counted, profile)(20) == predicted_time_at(
            make_predictor(), profile, 20
        )
        assert counted.calls == 1
