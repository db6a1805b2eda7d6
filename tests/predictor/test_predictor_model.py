from __future__ import annotations

import dataclasses
import math

import pytest

from slidingserve.core.batch import BatchShape
from slidingserve.predictor import (
    BatchLatencyPredictor,
    Features,
    LinearModel,
    ModelChoice,
    Scenario,
    batch_features,
)

GLOBAL = LinearModel(0.001, (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0))
MIXED = LinearModel(0.5, (0.0,) * 7)


class TestLinearModel:
    def test_predict_by_hand(self) -> None:
        x = Features(1, 1, 1, 1, 1, 1, 2, 100, 100, 100, 100, 100, 100)
        assert GLOBAL.predict(x) == pytest.approx(0.001 + 28 + 7)  # x8.. are not weighed
        rich = LinearModel(0.001, (0.0, 1.0, 0, 0, 0, 0, 0, 2.0, 0, 0, 0, 0, 3.0))
        assert rich.predict(x) == pytest.approx(0.001 + 1 + 200 + 300)

    @pytest.mark.parametrize(
        ("intercept", "weights", "message"),
        [
            (0.0, (), "expected 1 to 13 weights"),
            (0.0, (0.0,) * 14, "expected 1 to 13 weights"),
            (0.0, (0.0, -1e-9, 0.0, 0.0, 0.0, 0.0, 0.0), "x2 must be finite and ≥ 0"),
            (0.0, (math.inf,) + (0.0,) * 6, "x1 must be finite"),
            (math.nan, (0.0,) * 7, "intercept must be finite"),
        ],
    )
    def test_rejects(self, intercept: float, weights: tuple[float, ...], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            LinearModel(intercept, weights)

    def test_negative_intercept_is_allowed(self) -> None:
        assert LinearModel(-0.002, (0.0,) * 7).intercept == -0.002


class TestBatchLatencyPredictor:
    def make(self) -> BatchLatencyPredictor:
        return BatchLatencyPredictor(
            GLOBAL,
            {Scenario.MIXED: MIXED, Scenario.DECODE_ONLY: MIXED},
            {Scenario.MIXED: ModelChoice.EXPERT, Scenario.DECODE_ONLY: ModelChoice.GLOBAL},
        )

    def test_uses_the_chosen_model(self) -> None:
        predictor = self.make()
        assert predictor.model_for(Scenario.MIXED) is MIXED
        assert predictor.model_for(Scenario.DECODE_ONLY) is GLOBAL
        assert predictor.model_for(Scenario.PREFILL_ONLY) is GLOBAL

    def test_predict_matches_predict_features(self) -> None:
        predictor = self.make()
        mixed = BatchShape((5,), ((3, 2),))
        assert predictor.predict(mixed) == 0.5
        decode = BatchShape((5, 6), ())
        assert predictor.predict(decode) == predictor.predict_features(*batch_features(decode))
        assert predictor.predict(decode) == pytest.approx(0.001 + 3 * 11 + 4 * 2 + 5 * 11)

    @pytest.mark.parametrize(
        ("weights", "features", "message"),
        [
            (6, "paper", "global: expected 7 weights for the paper features, got 6"),
            (7, "rich", "global: expected 13 weights for the rich features, got 7"),
        ],
    )
    def test_models_must_weigh_the_feature_set(
        self, weights: int, features: str, message: str
    ) -> None:
        with pytest.raises(ValueError, match=message):
            BatchLatencyPredictor.single(LinearModel(0.0, (0.0,) * weights), features)

    def test_an_expert_must_weigh_the_feature_set_too(self) -> None:
        rich = LinearModel(0.0, (0.0,) * 13)
        with pytest.raises(ValueError, match="mixed: expected 13 weights"):
            BatchLatencyPredictor(rich, {Scenario.MIXED: MIXED}, {}, "rich")

    def test_unknown_feature_set(self) -> None:
        with pytest.raises(ValueError, match="unknown feature set 'fancy'"):
            BatchLatencyPredictor.single(GLOBAL, "fancy")

    def test_expert_choice_needs_an_expert(self) -> None:
        with pytest.raises(ValueError, match="prefill_only chooses its expert"):
            BatchLatencyPredictor(GLOBAL, {}, {Scenario.PREFILL_ONLY: ModelChoice.EXPERT})

    def test_frozen(self) -> None:
        predictor = BatchLatencyPredictor.single(GLOBAL)
        with pytest.raises(dataclasses.FrozenInstanceError):
            predictor.global_model = MIXED  # type: ignore[misc]

    def test_caller_mappings_are_copied(self) -> None:
        experts = {Scenario.MIXED: MIXED}
        choice = {Scenario.MIXED: ModelChoice.EXPERT}
        predictor = BatchLatencyPredictor(GLOBAL, experts, choice)
        choice[Scenario.MIXED] = ModelChoice.GLOBAL
        assert predictor.model_for(Scenario.MIXED) is MIXED
