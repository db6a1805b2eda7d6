"""Linear experts per scenario and the predictor that chooses among them (docs/design.md §3)."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import mul
from typing import TYPE_CHECKING, Protocol

from slidingserve.predictor.features import (
    NUM_RICH_FEATURES,
    PAPER,
    Scenario,
    batch_features,
    feature_set,
)

if TYPE_CHECKING:
    from slidingserve.core.batch import BatchShape
    from slidingserve.predictor.features import Features


class LatencyModel(Protocol):
    """Anything that predicts a batch's time from its features (the predictor, or a stub)."""

    def predict_features(self, scenario: Scenario, x: Features) -> float:
        """Predicted iteration time of a batch with features `x`, seconds."""
        ...


@dataclass(frozen=True, slots=True)
class LinearModel:
    """T̂ = intercept + Σ_j w_j x_j, seconds; weights are non-negative, the intercept free.

    It weighs the first len(weights) features: 7 for the paper's set, more for a richer one.
    """

    intercept: float  # seconds
    weights: tuple[float, ...]  # seconds per unit of x1, x2, ..., each ≥ 0

    def __post_init__(self) -> None:
        if not 1 <= len(self.weights) <= NUM_RICH_FEATURES:
            raise ValueError(f"expected 1 to {NUM_RICH_FEATURES} weights, got {len(self.weights)}")
        if not math.isfinite(self.intercept):
            raise ValueError(f"intercept must be finite, got {self.intercept!r}")
        for j, w in enumerate(self.weights):
            if not (math.isfinite(w) and w >= 0):
                raise ValueError(f"weight x{j + 1} must be finite and ≥ 0, got {w!r}")

    def predict(self, x: Features) -> float:
        """Predicted time of a batch with features `x`, seconds."""
        # map stops at the shorter: the features after the weights are not weighed.
        return sum(map(mul, self.weights, x), self.intercept)


class ModelChoice(enum.Enum):
    """Which model predicts a scenario."""

    EXPERT = "expert"
    GLOBAL = "global"


@dataclass(frozen=True, slots=True)
class BatchLatencyPredictor:
    """One linear expert per scenario plus a global model, chosen per scenario at fit time.

    A scenario uses its expert when `choice` says EXPERT (and the expert exists), otherwise
    the global model. Every model weighs the features of the set `features` (`paper` or
    `rich`, see `features.py`). Immutable: online refits build a new predictor and swap it in.
    """

    global_model: LinearModel
    experts: Mapping[Scenario, LinearModel] = field(default_factory=dict)
    choice: Mapping[Scenario, ModelChoice] = field(default_factory=dict)
    features: str = PAPER.name  # the feature set of its models
    _active: dict[Scenario, LinearModel] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._check_widths()
        for scenario, chosen in self.choice.items():
            if chosen is ModelChoice.EXPERT and scenario not in self.experts:
                raise ValueError(f"{scenario.value} chooses its expert, but it has none")
        object.__setattr__(self, "experts", dict(self.experts))
        object.__setattr__(self, "choice", dict(self.choice))
        active = {scenario: self.model_for(scenario) for scenario in Scenario}
        object.__setattr__(self, "_active", active)

    def _check_widths(self) -> None:
        width = feature_set(self.features).width
        models = {"global": self.global_model, **{s.value: m for s, m in self.experts.items()}}
        for name, model in models.items():
            if len(model.weights) != width:
                raise ValueError(
                    f"{name}: expected {width} weights for the {self.features} features, "
                    f"got {len(model.weights)}"
                )

    @classmethod
    def single(cls, model: LinearModel, features: str = PAPER.name) -> BatchLatencyPredictor:
        """A predictor that uses `model`, of the feature set `features`, for every scenario."""
        return cls(global_model=model, features=features)

    def model_for(self, scenario: Scenario) -> LinearModel:
        """The model that predicts `scenario`."""
        if self.choice.get(scenario) is ModelChoice.EXPERT:
            return self.experts[scenario]
        return self.global_model

    def predict(self, shape: BatchShape) -> float:
        """Predicted time of the batch `shape`, seconds; ValueError if it is empty."""
        scenario, x = batch_features(shape)
        return self._active[scenario].predict(x)

    def predict_features(self, scenario: Scenario, x: Features) -> float:
        """Predicted time of a `scenario` batch with features `x`, seconds (hot path)."""
        return self._active[scenario].predict(x)

    def linear_model(self, scenario: Scenario) -> LinearModel:
        """The linear model that predicts `scenario` (`model_for`, precomputed): callers
        that evaluate features inline weigh them with it (`budget.queue_time_function`)."""
        return self._active[scenario]
