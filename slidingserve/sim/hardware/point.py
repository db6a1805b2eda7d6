"""A hardware point, `GPU:MODEL:TP`: how commands name the simulated replica, and the one
label every table, file and predictor uses for it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import PurePosixPath
from typing import NamedTuple

from slidingserve.sim.hardware.latency import HardwareConfig


class HardwarePoint(NamedTuple):
    """A `GPU:MODEL:TP` point as written, before its names are looked up in the catalog."""

    gpu: str  # catalog name
    model: str  # catalog name (or a path to a Hugging Face config.json)
    tp: int  # tensor-parallel degree

    @classmethod
    def parse(cls, text: str) -> HardwarePoint:
        """`GPU:MODEL:TP`; only its form is checked here (`config` checks the names)."""
        parts = text.strip().split(":")
        if len(parts) != 3 or not parts[2].strip().isdigit():
            raise ValueError(
                f"a hardware point is GPU:MODEL:TP, e.g. a100:llama-3-8b:1; got {text!r}"
            )
        gpu, model, tp = parts
        return cls(gpu, model, int(tp))

    def config(self, base: HardwareConfig | None = None) -> HardwareConfig:
        """The point's hardware, the rest (noise, memory) from `base`; ValueError for an
        unknown GPU or model, or a TP degree the model cannot run at there."""
        base = base or HardwareConfig()
        return dataclasses.replace(base, gpu=self.gpu, model=self.model, tp=self.tp)


def hardware_label(hardware: HardwareConfig | HardwarePoint) -> str:
    """`GPU:MODEL:TP`: what `parse_hardware` reads."""
    return f"{hardware.gpu}:{hardware.model}:{hardware.tp}"


def parse_hardware(text: str, base: HardwareConfig | None = None) -> HardwareConfig:
    """`GPU:MODEL:TP`, the rest (noise, memory) from `base`."""
    return HardwarePoint.parse(text).config(base)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def hardware_folder(hardware: HardwareConfig | HardwarePoint) -> str:
    """A file-name-safe form of the point's label, `a100_llama-3-8b_tp2`. A model given as
    a path is named by its last part: the folder of a `config.json`, else the file's stem."""
    return f"{_safe(hardware.gpu)}_{_safe(_model_name(hardware.model))}_tp{hardware.tp}"


def _model_name(model: str) -> str:
    path = PurePosixPath(model.replace("\\", "/"))
    if path.suffix.lower() != ".json":
        return path.name or model
    return path.parent.name if path.stem.lower() == "config" and path.parent.name else path.stem


def _safe(name: str) -> str:
    """Letters, digits, `.`, `_` and `-` only, never leading with a dot (hidden, `..`)."""
    return _UNSAFE.sub("_", name).strip("._") or "unnamed"
