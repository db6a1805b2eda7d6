"""Ground-truth GPU latency model of the simulator: catalog, profiles, latency."""

from __future__ import annotations

from slidingserve.sim.hardware.catalog import (
    AttentionFit,
    GPUSpec,
    list_gpus,
    list_models,
    load_gpu,
    load_model,
)
from slidingserve.sim.hardware.latency import GroundTruthLatency, HardwareConfig
from slidingserve.sim.hardware.models import ModelSpec

__all__ = [
    "AttentionFit",
    "GPUSpec",
    "GroundTruthLatency",
    "HardwareConfig",
    "ModelSpec",
    "list_gpus",
    "list_models",
    "load_gpu",
    "load_model",
]
