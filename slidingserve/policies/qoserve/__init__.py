"""The QoServe baseline: priority, eager relegation, dynamic chunking and its own predictor."""

from __future__ import annotations

from slidingserve.policies.qoserve.config import QoServeConfig
from slidingserve.policies.qoserve.policy import QoServePolicy
from slidingserve.policies.qoserve.predictor import (
    QoServePredictor,
    fit_from_samples,
    fit_qoserve_predictor,
)

__all__ = [
    "QoServeConfig",
    "QoServePolicy",
    "QoServePredictor",
    "fit_from_samples",
    "fit_qoserve_predictor",
]
