"""A hardware point, `GPU:MODEL:TP[:MEMORY]`: how commands name the simulated replica, and
the one label every table, file and predictor uses for it. MEMORY, when given, is the share
of each GPU's memory the engine may use (vLLM's `--gpu-memory-utilization`), so one command
can compare a replica with its cache cut: `a40:llama-2-7b:1:0.6`."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import PurePosixPath
from typing import NamedTuple

from slidingserve.sim.hardware.latency import HardwareConfig

DEFAULT_MEMORY = HardwareConfig().gpu_memory_utilization  # a label leaves this share out
_FORM = "GPU:MODEL:TP[:MEMORY], e.g. a100:llama-3-8b:1 or a40:llama-2-7b:1:0.6"


class HardwarePoint(NamedTuple):
    """A `GPU:MODEL:TP[:MEMORY]` point as written, before its names are looked up in the
    catalog."""

    gpu: str  # catalog name
    model: str  # catalog name (or a path to a Hugging Face config.json)
    tp: int  # tensor-parallel degree
    memory: float | None = None  # share of GPU memory the engine may use; None: the base's

    @classmethod
    def parse(cls, text: str) -> HardwarePoint:
        """`GPU:MODEL:TP[:MEMORY]`; only its form and the memory share are checked here
        (`config` checks the names)."""
        parts = text.strip().split(":")
        if len(parts) not in (3, 4) or not parts[2].strip().isdigit():
            raise ValueError(f"a hardware point is {_FORM}; got {text!r}")
        memory = _memory_share(parts[3], text) if len(parts) == 4 else None
        return cls(parts[0], parts[1], int(parts[2]), memory)

    def config(self, base: HardwareConfig | None = None) -> HardwareConfig:
        """The point's hardware, the rest (noise, and the memory share unless the point
        names one) from `base`; ValueError for an unknown GPU or model, or a TP degree the
        model cannot run at there."""
        base = base or HardwareConfig()
        memory = base.gpu_memory_utilization if self.memory is None else self.memory
        return dataclasses.replace(
            base, gpu=self.gpu, model=self.model, tp=self.tp, gpu_memory_utilization=memory
        )


def _memory_share(text: str, point: str) -> float:
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    if not 0.0 < share <= 1.0:  # also false for nan
        raise ValueError(
            f"a hardware point's MEMORY is the share of GPU memory the engine may use, in "
            f"(0, 1]; got {text!r} in {point!r} ({_FORM})"
        )
    return share


def _memory(hardware: HardwareConfig | HardwarePoint) -> float | None:
    """The point's memory share where it differs from the default, else None."""
    if isinstance(hardware, HardwarePoint):
        share = hardware.memory
    else:
        share = hardware.gpu_memory_utilization
    return None if share is None or share == DEFAULT_MEMORY else share


def hardware_label(hardware: HardwareConfig | HardwarePoint) -> str:
    """`GPU:MODEL:TP`, with `:MEMORY` where the memory share is not the default: what
    `parse_hardware` reads."""
    label = f"{hardware.gpu}:{hardware.model}:{hardware.tp}"
    memory = _memory(hardware)
    return label if memory is None else f"{label}:{memory:g}"


def parse_hardware(text: str, base: HardwareConfig | None = None) -> HardwareConfig:
    """`GPU:MODEL:TP[:MEMORY]`, the rest (noise, and memory unless given) from `base`."""
    return HardwarePoint.parse(text).config(base)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def hardware_folder(hardware: HardwareConfig | HardwarePoint) -> str:
    """A file-name-safe form of the point's label, `a100_llama-3-8b_tp2` (`..._tp1_mem0.6`
    with a memory share). A model given as a path is named by its last part: the folder of
    a `config.json`, else the file's stem."""
    folder = f"{_safe(hardware.gpu)}_{_safe(_model_name(hardware.model))}_tp{hardware.tp}"
    memory = _memory(hardware)
    return folder if memory is None else f"{folder}_mem{memory:g}"


def _model_name(model: str) -> str:
    path = PurePosixPath(model.replace("\\", "/"))
    if path.suffix.lower() != ".json":
        return path.name or model
    return path.parent.name if path.stem.lower() == "config" and path.parent.name else path.stem


def _safe(name: str) -> str:
    """Letters, digits, `.`, `_` and `-` only, never leading with a dot (hidden, `..`)."""
    return _UNSAFE.sub("_", name).strip("._") or "unnamed"
