"""Batch-latency predictor (docs/design.md §3): features (the paper's seven or a richer set), linear
experts, robust fit, online refit, TimeToBudget, accuracy reports and a JSON file format.

Times are seconds everywhere; token counts are ints.
"""

from __future__ import annotations

from slidingserve.predictor.budget import (
    Budget,
    predicted_time_at,
    queue_time_function,
    time_to_budget,
)
from slidingserve.predictor.features import (
    DEFAULT_FEATURES,
    FEATURE_SETS,
    NUM_FEATURES,
    NUM_RICH_FEATURES,
    BatchFeatures,
    Features,
    FeatureSet,
    PrefillCandidate,
    PrefillQueueProfile,
    Sample,
    Scenario,
    batch_features,
    feature_set,
    scenario_of,
)
from slidingserve.predictor.fit import (
    CandidateErrors,
    FitResult,
    RobustFitConfig,
    fit_linear,
    fit_predictor,
)
from slidingserve.predictor.io import (
    LoadedPredictor,
    PredictorMetadata,
    load_predictor,
    predictor_from_dict,
    predictor_to_dict,
    save_predictor,
)
from slidingserve.predictor.model import (
    BatchLatencyPredictor,
    LatencyModel,
    LinearModel,
    ModelChoice,
)
from slidingserve.predictor.online import OnlineConfig, OnlineLearner
from slidingserve.predictor.report import AccuracyReport, ErrorStats, error_stats
from slidingserve.predictor.sampling import fit_from_timer, random_batch_shapes

__all__ = [
    "DEFAULT_FEATURES",
    "FEATURE_SETS",
    "NUM_FEATURES",
    "NUM_RICH_FEATURES",
    "AccuracyReport",
    "BatchFeatures",
    "BatchLatencyPredictor",
    "Budget",
    "CandidateErrors",
    "ErrorStats",
    "FeatureSet",
    "Features",
    "FitResult",
    "LatencyModel",
    "LinearModel",
    "LoadedPredictor",
    "ModelChoice",
    "OnlineConfig",
    "OnlineLearner",
    "PredictorMetadata",
    "PrefillCandidate",
    "PrefillQueueProfile",
    "RobustFitConfig",
    "Sample",
    "Scenario",
    "batch_features",
    "error_stats",
    "feature_set",
    "fit_from_timer",
    "fit_linear",
    "fit_predictor",
    "load_predictor",
    "predicted_time_at",
    "predictor_from_dict",
    "predictor_to_dict",
    "queue_time_function",
    "random_batch_shapes",
    "save_predictor",
    "scenario_of",
    "time_to_budget",
]
