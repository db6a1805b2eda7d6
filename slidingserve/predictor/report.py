"""Accuracy of a predictor on held-out samples: MAE, RMSE, R², MAPE per scenario
(docs/design.md §3)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from slidingserve.predictor.features import Scenario

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike

    from slidingserve.predictor.features import Sample
    from slidingserve.predictor.model import LatencyModel


class ErrorStats(NamedTuple):
    """Prediction errors over a set of samples; NaN where undefined (no samples, constant)."""

    n: int  # samples
    mae: float  # mean absolute error, seconds
    rmse: float  # root mean squared error, seconds
    r2: float  # coefficient of determination, 1 − SS_res / SS_tot
    mape: float  # mean absolute error relative to the measured time, fraction (0.05 = 5%)


NO_SAMPLES = ErrorStats(0, math.nan, math.nan, math.nan, math.nan)


def error_stats(predicted: ArrayLike, measured: ArrayLike) -> ErrorStats:
    """Errors of `predicted` against `measured` (both seconds, same length)."""
    p = np.asarray(predicted, dtype=float)
    y = np.asarray(measured, dtype=float)
    if p.shape != y.shape:
        raise ValueError(f"{p.size} predictions for {y.size} measurements")
    if y.size == 0:
        return NO_SAMPLES
    error = p - y
    ss_res = float(np.sum(error**2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    positive = y > 0
    mape = float(np.mean(np.abs(error[positive]) / y[positive])) if positive.any() else math.nan
    return ErrorStats(
        n=int(y.size),
        mae=float(np.mean(np.abs(error))),
        rmse=math.sqrt(ss_res / y.size),
        r2=1.0 - ss_res / ss_tot if ss_tot > 0 else math.nan,
        mape=mape,
    )


@dataclass(frozen=True, slots=True)
class AccuracyReport:
    """Errors of one predictor overall and per scenario (only scenarios with samples)."""

    overall: ErrorStats
    by_scenario: Mapping[Scenario, ErrorStats]

    @classmethod
    def evaluate(cls, model: LatencyModel, samples: Sequence[Sample]) -> AccuracyReport:
        """Errors of `model` on `samples`, which should be held out of its fit."""
        predicted = [model.predict_features(s.scenario, s.x) for s in samples]
        measured = [s.seconds for s in samples]
        by_scenario: dict[Scenario, ErrorStats] = {}
        for scenario in Scenario:
            rows = [i for i, s in enumerate(samples) if s.scenario is scenario]
            if rows:
                by_scenario[scenario] = error_stats(
                    [predicted[i] for i in rows], [measured[i] for i in rows]
                )
        return cls(error_stats(predicted, measured), by_scenario)

    def format_table(self) -> str:
        """A text table: one row per scenario and one overall; MAE/RMSE in ms, MAPE in %."""
        header = f"{'scenario':<13} {'n':>7} {'MAE ms':>9} {'RMSE ms':>9} {'R²':>8} {'MAPE %':>8}"
        rows = [header, "-" * len(header)]
        for scenario, stats in self.by_scenario.items():
            rows.append(_format_row(scenario.value, stats))
        rows.append(_format_row("overall", self.overall))
        return "\n".join(rows)


def _format_row(name: str, stats: ErrorStats) -> str:
    return (
        f"{name:<13} {stats.n:>7d} {stats.mae * 1e3:>9.3f} {stats.rmse * 1e3:>9.3f} "
        f"{stats.r2:>8.4f} {stats.mape * 100:>8.2f}"
    )
