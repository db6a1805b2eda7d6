from __future__ import annotations

import math

import pytest

from slidingserve.predictor import (
    AccuracyReport,
    BatchLatencyPredictor,
    Features,
    LinearModel,
    Sample,
    Scenario,
    error_stats,
)

DECODE_X = Features(0, 0, 10, 1, 10, 0, 0, 0, 0, 1, 0, 0, 0)
PREFILL_X = Features(4, 4, 0, 0, 0, 2, 2, 1, 0, 1, 0, 0, 0)


def constant_predictor(seconds: float) -> BatchLatencyPredictor:
    return BatchLatencyPredictor.single(LinearModel(seconds, (0.0,) * 7))


def make_report() -> AccuracyReport:
    samples = [
        Sample(Scenario.DECODE_ONLY, DECODE_X, 0.008),
        Sample(Scenario.DECODE_ONLY, DECODE_X, 0.012),
        Sample(Scenario.PREFILL_ONLY, PREFILL_X, 0.010),
        Sample(Scenario.PREFILL_ONLY, PREFILL_X, 0.014),
    ]
    return AccuracyReport.evaluate(constant_predictor(0.010), samples)


class TestAccuracyReport:
    def test_decode_only_by_hand(self) -> None:
        stats = make_report().by_scenario[Scenario.DECODE_ONLY]
        assert stats.n == 2
        assert stats.mae == pytest.approx(0.002)
        assert stats.rmse == pytest.approx(0.002)
        assert stats.r2 == pytest.approx(0.0, abs=1e-9)
        assert stats.mape == pytest.approx((0.002 / 0.008 + 0.002 / 0.012) / 2)

    def test_prefill_only_by_hand(self) -> None:
        stats = make_report().by_scenario[Scenario.PREFILL_ONLY]
        assert stats.mae == pytest.approx(0.002)
        assert stats.rmse == pytest.approx(math.sqrt(8e-6))
        assert stats.r2 == pytest.approx(-1.0)
        assert stats.mape == pytest.approx(0.004 / 0.014 / 2)

    def test_overall_by_hand(self) -> None:
        overall = make_report().overall
        assert overall.n == 4
        assert overall.rmse == pytest.approx(math.sqrt(6e-6))
        assert overall.r2 == pytest.approx(1 - 24 / 20)

    def test_only_scenarios_with_samples(self) -> None:
        assert Scenario.MIXED not in make_report().by_scenario

    def test_table_shows_milliseconds_and_percent(self) -> None:
        lines = make_report().format_table().splitlines()
        assert "MAE ms" in lines[0]
        assert "MAPE %" in lines[0]
        decode = next(line for line in lines if line.startswith("decode_only"))
        assert decode.split() == ["decode_only", "2", "2.000", "2.000", "0.0000", "20.83"]
        assert lines[-1].startswith("overall")

    def test_empty_and_constant(self) -> None:
        assert error_stats([], []).n == 0
        assert math.isnan(error_stats([], []).mae)
        assert math.isnan(error_stats([1.0, 1.0], [2.0, 2.0]).r2)
        with pytest.raises(ValueError, match="2 predictions for 1"):
            error_stats([1.0, 2.0], [1.0])
