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
from slidingserve.sim.hardware.point import (
    HardwarePoint,
    hardware_folder,
    hardware_label,
    parse_hardware,
)

__all__ = [
    "AttentionFit",
    "GPUSpec",
    "GroundTruthLatency",
    "HardwareConfig",
    "HardwarePoint",
    "ModelSpec",
    "hardware_folder",
    "hardware_label",
    "list_gpus",
    "list_models",
    "load_gpu",
    "load_model",
    "parse_hardware",
]
