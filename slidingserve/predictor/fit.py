"""Robust non-negative least squares, and fitting a predictor with held-out model choice.

Measured times on shared hosts have spikes of 1.5–2× (docs/design.md §3). The fit is an iteratively
reweighted NNLS: Huber weights on relative residuals, and samples far off the current fit
(more than `reject_sigmas` robust deviations and more than `reject_floor` of the prediction)
get weight zero, so a spike has no pull at all once it is recognised.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from scipy.optimize import nnls

from slidingserve.predictor.features import DEFAULT_FEATURES, Scenario, feature_set
from slidingserve.predictor.model import BatchLatencyPredictor, LinearModel, ModelChoice
from slidingserve.predictor.report import AccuracyReport, error_stats

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import NDArray

    from slidingserve.predictor.features import FeatureSet, Sample

    FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class RobustFitConfig:
    """Knobs of the robust NNLS fit."""

    iterations: int = 30  # most reweighting rounds
    huber_k: float = 1.345  # Huber threshold, in robust standard deviations
    reject_sigmas: float = 4.0  # weight 0 beyond this many robust standard deviations...
    reject_floor: float = 0.25  # ...and beyond this relative error (a 1.5× spike is 0.5)
    tolerance: float = 1e-6  # stop when no weight moves more than this


def fit_linear(x: FloatArray, y: FloatArray, config: RobustFitConfig | None = None) -> LinearModel:
    """Robust fit of y ≈ b + x·w with w ≥ 0 and b free; x is (n, k) features, y seconds."""
    config = config or RobustFitConfig()
    if x.ndim != 2 or x.shape[1] < 1 or y.shape != (x.shape[0],):
        raise ValueError("need x of shape (n, k ≥ 1) and y of shape (n,)")
    if x.shape[0] == 0:
        raise ValueError("cannot fit without samples")
    weights = np.ones_like(y)
    model = weighted_nnls(x, y, weights)
    for _ in range(config.iterations):
        new_weights = _robust_weights(y, _predict(model, x), config)
        if np.max(np.abs(new_weights - weights)) <= config.tolerance:
            break
        weights = new_weights
        model = weighted_nnls(x, y, weights)
    return model


def weighted_nnls(x: FloatArray, y: FloatArray, weights: FloatArray) -> LinearModel:
    """Weighted least squares with w ≥ 0 and a free intercept, by centering.

    For fixed w the best intercept is the weighted mean of y − x·w, so substituting it
    leaves an NNLS on centered columns; columns are scaled to unit norm for conditioning,
    and a column that is constant (after weighting) gets weight zero.
    """
    total = float(weights.sum())
    mean_x = weights @ x / total
    mean_y = float(weights @ y) / total
    root = np.sqrt(weights)
    a = (x - mean_x) * root[:, None]
    norms = np.linalg.norm(a, axis=0)
    usable = norms > 1e-12 * max(1.0, float(norms.max()))
    coef = np.zeros(x.shape[1])
    if usable.any():
        beta, _ = nnls(a[:, usable] / norms[usable], (y - mean_y) * root)
        coef[usable] = beta / norms[usable]
    intercept = mean_y - float(mean_x @ coef)
    return LinearModel(intercept, tuple(float(w) for w in coef))


def _predict(model: LinearModel, x: FloatArray) -> FloatArray:
    result: FloatArray = model.intercept + x @ np.asarray(model.weights)
    return result


def _robust_weights(y: FloatArray, predicted: FloatArray, config: RobustFitConfig) -> FloatArray:
    """Huber weights of the relative residuals, zero for recognised spikes."""
    floor = 1e-3 * float(np.median(np.abs(y))) + 1e-12
    relative = (y - predicted) / np.maximum(np.abs(predicted), floor)
    scale = max(1.4826 * float(np.median(np.abs(relative))), 1e-12)
    size = np.abs(relative) / scale
    weights = np.minimum(1.0, config.huber_k / np.maximum(size, 1e-300))
    spike = (size > config.reject_sigmas) & (np.abs(relative) > config.reject_floor)
    result: FloatArray = np.where(spike, 0.0, weights)
    return result


class CandidateErrors(NamedTuple):
    """Held-out MAE of the two candidate models of one scenario."""

    expert_mae: float  # seconds; NaN when the scenario has no expert or no held-out samples
    global_mae: float  # seconds; NaN when the scenario has no held-out samples

    @property
    def prefer_expert(self) -> bool:
        """Expert at least as good as global, or nothing held out to tell (NaN compares false)."""
        return not self.expert_mae > self.global_mae


class FitResult(NamedTuple):
    """A fitted predictor and how well it did."""

    predictor: BatchLatencyPredictor
    training: AccuracyReport  # errors on the samples it was fitted to
    validation: AccuracyReport  # errors on held-out samples (n = 0 when none were held out)
    selection: Mapping[Scenario, CandidateErrors]  # what the expert/global choice was based on
    num_samples: int  # training plus held-out samples


def fit_predictor(
    samples: Sequence[Sample],
    validation_fraction: float = 0.2,
    seed: int = 0,
    min_samples_per_scenario: int = 30,
    config: RobustFitConfig | None = None,
    features: str = DEFAULT_FEATURES,
) -> FitResult:
    """Fit the global model and one expert per scenario; choose per scenario by held-out MAE.

    Every model weighs the feature set `features` ("paper" or "rich"). Samples are split
    per scenario (a `validation_fraction` of each is held out, chosen with `seed`). A
    scenario with fewer than `min_samples_per_scenario` training samples has no expert and
    uses the global model; with no held-out samples of a scenario, its expert is used when
    it has one. The returned models are fitted on the training part only, so the validation
    report describes exactly the predictor returned.
    """
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    chosen = feature_set(features)
    _check_samples(samples)
    train, held_out = _split(samples, validation_fraction, seed)
    global_model = _fit_model(train, chosen, config)
    experts: dict[Scenario, LinearModel] = {}
    choice: dict[Scenario, ModelChoice] = {}
    selection: dict[Scenario, CandidateErrors] = {}
    for scenario in Scenario:
        own_train = [s for s in train if s.scenario is scenario]
        own_held_out = [s for s in held_out if s.scenario is scenario]
        if len(own_train) >= max(1, min_samples_per_scenario):
            experts[scenario] = _fit_model(own_train, chosen, config)
        errors = _candidate_errors(experts.get(scenario), global_model, own_held_out)
        selection[scenario] = errors
        if scenario in experts and errors.prefer_expert:
            choice[scenario] = ModelChoice.EXPERT
    predictor = BatchLatencyPredictor(global_model, experts, choice, chosen.name)
    return FitResult(
        predictor=predictor,
        training=AccuracyReport.evaluate(predictor, train),
        validation=AccuracyReport.evaluate(predictor, held_out),
        selection=selection,
        num_samples=len(samples),
    )


def _fit_model(
    samples: Sequence[Sample], chosen: FeatureSet, config: RobustFitConfig | None
) -> LinearModel:
    """`fit_linear` on the columns of `chosen`; the other weights of its width are zero."""
    x, y = _arrays(samples, chosen.width)
    fitted = fit_linear(x[:, list(chosen.columns)], y, config)
    weights = [0.0] * chosen.width
    for column, weight in zip(chosen.columns, fitted.weights, strict=True):
        weights[column] = weight
    return LinearModel(fitted.intercept, tuple(weights))


def _check_samples(samples: Sequence[Sample]) -> None:
    if not samples:
        raise ValueError("cannot fit without samples")
    for i, sample in enumerate(samples):
        if not math.isfinite(sample.seconds):
            raise ValueError(f"sample {i}: measured time {sample.seconds!r} is not finite")


def _split(
    samples: Sequence[Sample], fraction: float, seed: int
) -> tuple[list[Sample], list[Sample]]:
    """(training, held out), `fraction` of each scenario held out at random."""
    rng = np.random.default_rng(seed)
    train: list[Sample] = []
    held_out: list[Sample] = []
    for scenario in Scenario:
        group = [s for s in samples if s.scenario is scenario]
        order = rng.permutation(len(group))
        cut = round(fraction * len(group))
        held_out.extend(group[i] for i in order[:cut])
        train.extend(group[i] for i in order[cut:])
    if not train:
        raise ValueError("every sample was held out: too few samples")
    return train, held_out


def _arrays(samples: Sequence[Sample], width: int) -> tuple[FloatArray, FloatArray]:
    """The first `width` features of `samples` as an (n, width) array, and their times."""
    x = np.array([s.x[:width] for s in samples], dtype=float).reshape(-1, width)
    y = np.array([s.seconds for s in samples], dtype=float)
    return x, y


def _candidate_errors(
    expert: LinearModel | None, global_model: LinearModel, held_out: Sequence[Sample]
) -> CandidateErrors:
    if not held_out:
        return CandidateErrors(math.nan, math.nan)
    x, y = _arrays(held_out, len(global_model.weights))
    global_mae = error_stats(_predict(global_model, x), y).mae
    expert_mae = math.nan if expert is None else error_stats(_predict(expert, x), y).mae
    return CandidateErrors(expert_mae, global_mae)
