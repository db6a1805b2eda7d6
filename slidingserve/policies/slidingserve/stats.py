"""Instrumentation: what the scheduler decided at each iteration and what it cost."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from slidingserve.predictor import batch_features

if TYPE_CHECKING:
    from slidingserve.core.batch import BatchShape
    from slidingserve.predictor import Features, LatencyModel, Scenario
    from slidingserve.predictor.model import LinearModel

T = TypeVar("T")


class DecisionRecord(NamedTuple):
    """One call of `schedule`. CPU times in seconds; chunker and constructor exclude the
    predictor calls they make through the model (those are under `predictor_s`; the ones
    made inline along the prefill queue, `TimedModel.linear_model`, are in theirs)."""

    now: float  # engine time, seconds
    # "constructor" or "chunker:<reason>"; "chunker:<reason>:constructor-fallback" when the
    # knapsack's selection could not be granted in full and the chunker planned instead
    path: str
    predicted_time: float | None  # seconds, the predictor's time for the chosen batch
    total_tokens: int  # tokens planned, decodes included
    num_decodes: int
    order_s: float  # ordering (and triaging) the prefill queue
    predictor_s: float  # every predictor call
    predictor_calls: int
    chunker_s: float  # SlidingChunker and the plan it fills
    constructor_s: float  # candidate batch, violation checker and BatchConstructor
    total_s: float  # the whole call


class TimedModel:
    """A latency model that counts its calls and the CPU time they take."""

    def __init__(self, model: LatencyModel) -> None:
        self.model = model
        self.seconds = 0.0
        self.calls = 0

    def predict_features(self, scenario: Scenario, x: Features) -> float:
        started = time.perf_counter()
        value = self.model.predict_features(scenario, x)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        return value

    def predict_shape(self, shape: BatchShape) -> float:
        return self.predict_features(*batch_features(shape))

    def linear_model(self, scenario: Scenario) -> LinearModel | None:
        """The wrapped model's linear model of `scenario`, if it tells it: predictions made
        with it inline along the prefill queue (`budget.queue_time_function`) are neither
        timed nor counted here; their time is their component's."""
        linear_model = getattr(self.model, "linear_model", None)
        return linear_model(scenario) if linear_model is not None else None


class Stopwatch:
    """CPU time per component within one `schedule` call, predictor time kept apart; with
    `timing` off (no record will be made) it only runs the steps."""

    def __init__(self, model: TimedModel, timing: bool = True) -> None:
        self.model = model
        self.timing = timing
        self.started = time.perf_counter()
        self.spent: dict[str, float] = {}
        self._predictor_seconds = model.seconds
        self._predictor_calls = model.calls

    def run(self, component: str, step: Callable[[], T]) -> T:
        """Run `step`, charging its time (less predictor calls inside) to `component`."""
        if not self.timing:
            return step()
        started, predictor_before = time.perf_counter(), self.model.seconds
        result = step()
        elapsed = time.perf_counter() - started - (self.model.seconds - predictor_before)
        self.spent[component] = self.spent.get(component, 0.0) + elapsed
        return result

    def record(
        self, now: float, path: str, predicted: float | None, tokens: int, decodes: int
    ) -> DecisionRecord:
        return DecisionRecord(
            now,
            path,
            predicted,
            tokens,
            decodes,
            self.spent.get("order", 0.0),
            self.model.seconds - self._predictor_seconds,
            self.model.calls - self._predictor_calls,
            self.spent.get("chunker", 0.0),
            self.spent.get("constructor", 0.0),
            time.perf_counter() - self.started,
        )
