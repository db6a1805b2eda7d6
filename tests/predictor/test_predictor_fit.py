from __future__ import annotations

import numpy as np
import pytest

from slidingserve.predictor import (
    BatchLatencyPredictor,
    LinearModel,
    ModelChoice,
    RobustFitConfig,
    Sample,
    Scenario,
    fit_linear,
    fit_predictor,
    random_batch_shapes,
)

# Seconds per unit of each feature, and each feature's range: every term spans about 10 ms.
TRUE_WEIGHTS = np.array([2e-10, 1e-9, 1e-8, 4e-5, 3e-8, 1.5e-5, 2e-5])
RANGES = 0.01 / TRUE_WEIGHTS
TRUE_INTERCEPT = 0.003


def synthetic(
    n: int, seed: int, spike_share: float = 0.1, spike_factor: tuple[float, float] = (2.0, 2.0)
) -> tuple[np.ndarray, np.ndarray]:
    """Independent features, 1% multiplicative noise, `spike_share` of samples spiked."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(n, 7)) * RANGES
    y = (TRUE_INTERCEPT + x @ TRUE_WEIGHTS) * (1 + rng.normal(0, 0.01, n))
    spiked = rng.random(n) < spike_share
    y[spiked] *= rng.uniform(*spike_factor, size=int(spiked.sum()))
    return x, y


def relative_errors(model: LinearModel) -> np.ndarray:
    errors: np.ndarray = np.abs(np.asarray(model.weights) - TRUE_WEIGHTS) / TRUE_WEIGHTS
    return errors


class TestFitLinear:
    @pytest.mark.parametrize("spike_factor", [(2.0, 2.0), (1.5, 1.5), (1.5, 2.0)])
    def test_recovers_coefficients_despite_spikes(self, spike_factor: tuple[float, float]) -> None:
        x, y = synthetic(3000, seed=1, spike_factor=spike_factor)
        model = fit_linear(x, y)
        assert relative_errors(model).max() < 0.02
        assert model.intercept == pytest.approx(TRUE_INTERCEPT, abs=1e-4)

    def test_plain_least_squares_would_be_dragged(self) -> None:
        """The spikes matter: without reweighting the fit is off by far more than 3%."""
        x, y = synthetic(3000, seed=1)
        plain = fit_linear(x, y, RobustFitConfig(iterations=0))
        assert relative_errors(plain).max() > 0.05

    def test_noise_free_fit_is_exact(self) -> None:
        x, y = synthetic(200, seed=2, spike_share=0.0)
        y = TRUE_INTERCEPT + x @ TRUE_WEIGHTS
        model = fit_linear(x, y)
        assert relative_errors(model).max() < 1e-6

    def test_weights_never_negative_and_intercept_free(self) -> None:
        rng = np.random.default_rng(3)
        x = rng.uniform(0, 1, size=(500, 7)) * RANGES
        # Time falls with x3 in this data; the fit must clamp that weight at zero.
        y = -0.002 + x @ TRUE_WEIGHTS - 2e-8 * x[:, 2]
        model = fit_linear(x, y)
        assert min(model.weights) >= 0.0
        assert model.weights[2] == 0.0
        assert model.intercept < 0

    def test_constant_feature_gets_zero_weight(self) -> None:
        x, y = synthetic(300, seed=4, spike_share=0.0)
        x[:, 0] = 0.0
        assert fit_linear(x, y).weights[0] == 0.0

    def test_rejects_bad_shapes(self) -> None:
        with pytest.raises(ValueError, match="shape"):
            fit_linear(np.zeros((3, 7)), np.zeros(4))
        with pytest.raises(ValueError, match="shape"):
            fit_linear(np.zeros((3, 0)), np.zeros(3))
        with pytest.raises(ValueError, match="shape"):
            fit_linear(np.zeros(3), np.zeros(3))
        with pytest.raises(ValueError, match="without samples"):
            fit_linear(np.zeros((0, 7)), np.zeros(0))


TRUE_MODEL = LinearModel(0.004, (2e-10, 1e-10, 1e-8, 2e-5, 3e-8, 1.5e-5, 1e-6))


def shape_samples(n: int, seed: int, spike_share: float = 0.1) -> list[Sample]:
    """Random batches timed by TRUE_MODEL with 2% noise and 2× spikes."""
    rng = np.random.default_rng(seed)
    truth = BatchLatencyPredictor.single(TRUE_MODEL)
    samples = []
    for shape in random_batch_shapes(n, rng):
        seconds = truth.predict(shape) * (1 + rng.normal(0, 0.02))
        if rng.random() < spike_share:
            seconds *= 2
        samples.append(Sample.from_shape(shape, seconds))
    return samples


class TestFitPredictor:
    def test_predicts_the_true_time_of_fresh_batches(self) -> None:
        result = fit_predictor(shape_samples(3000, seed=5), validation_fraction=0.2, seed=0)
        truth = BatchLatencyPredictor.single(TRUE_MODEL)
        shapes = random_batch_shapes(500, np.random.default_rng(99))
        errors = [abs(result.predictor.predict(s) / truth.predict(s) - 1) for s in shapes]
        assert float(np.mean(errors)) < 0.005
        assert max(errors) < 0.03

    def test_all_weights_non_negative(self) -> None:
        predictor = fit_predictor(shape_samples(1000, seed=6)).predictor
        models = [predictor.global_model, *predictor.experts.values()]
        assert all(w >= 0 for model in models for w in model.weights)

    def test_scenario_with_few_samples_uses_the_global_model(self) -> None:
        samples = shape_samples(900, seed=7)
        mixed = [s for s in samples if s.scenario is Scenario.MIXED][:10]
        samples = [s for s in samples if s.scenario is not Scenario.MIXED] + mixed
        result = fit_predictor(samples, min_samples_per_scenario=30)
        predictor = result.predictor
        assert Scenario.MIXED not in predictor.experts
        assert predictor.model_for(Scenario.MIXED) is predictor.global_model
        assert Scenario.DECODE_ONLY in predictor.experts
        assert (
            result.selection[Scenario.MIXED].expert_mae
            != result.selection[Scenario.MIXED].expert_mae
        )

    def test_choice_follows_held_out_error(self) -> None:
        result = fit_predictor(shape_samples(1500, seed=8), validation_fraction=0.3, seed=1)
        for scenario, errors in result.selection.items():
            chosen = result.predictor.choice.get(scenario, ModelChoice.GLOBAL)
            better = errors.expert_mae <= errors.global_mae
            assert chosen is (ModelChoice.EXPERT if better else ModelChoice.GLOBAL)

    def test_global_model_wins_over_an_overfitted_expert(self) -> None:
        """Few, noisy mixed samples: the expert overfits and loses on held-out samples."""
        samples = shape_samples(1200, seed=9, spike_share=0.0)
        rng = np.random.default_rng(0)
        mixed = [
            s._replace(seconds=s.seconds * (1 + rng.normal(0, 0.3)))
            for s in samples
            if s.scenario is Scenario.MIXED
        ][:12]
        samples = [s for s in samples if s.scenario is not Scenario.MIXED] + mixed
        result = fit_predictor(samples, validation_fraction=0.5, min_samples_per_scenario=5)
        assert Scenario.MIXED in result.predictor.experts
        errors = result.selection[Scenario.MIXED]
        assert errors.global_mae < errors.expert_mae
        assert result.predictor.model_for(Scenario.MIXED) is result.predictor.global_model

    def test_scenario_specific_laws_choose_experts(self) -> None:
        samples = shape_samples(1500, seed=10, spike_share=0.0)
        # Decode-only batches get an extra fixed 5 ms: only the expert can capture it.
        samples = [
            s._replace(seconds=s.seconds + 0.005) if s.scenario is Scenario.DECODE_ONLY else s
            for s in samples
        ]
        result = fit_predictor(samples)
        assert result.predictor.choice[Scenario.DECODE_ONLY] is ModelChoice.EXPERT
        expert = result.predictor.experts[Scenario.DECODE_ONLY]
        assert expert.intercept == pytest.approx(0.009, rel=0.02)

    def test_reports_count_the_split(self) -> None:
        result = fit_predictor(shape_samples(1000, seed=11), validation_fraction=0.25)
        assert result.num_samples == 1000
        assert result.training.overall.n + result.validation.overall.n == 1000
        assert result.validation.overall.n == pytest.approx(250, abs=2)

    def test_without_validation_uses_experts(self) -> None:
        result = fit_predictor(shape_samples(600, seed=12), validation_fraction=0.0)
        assert result.validation.overall.n == 0
        assert set(result.predictor.choice) == set(Scenario)

    @pytest.mark.parametrize("fraction", [-0.1, 1.0])
    def test_rejects_bad_fraction(self, fraction: float) -> None:
        with pytest.raises(ValueError, match="validation_fraction"):
            fit_predictor(shape_samples(50, seed=13), validation_fraction=fraction)

    def test_rejects_non_finite_time(self) -> None:
        samples = shape_samples(50, seed=14)
        samples[3] = samples[3]._replace(seconds=float("nan"))
        with pytest.raises(ValueError, match="sample 3"):
            fit_predictor(samples)
