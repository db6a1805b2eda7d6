"""Configuration of the QoServe baseline: the published values as defaults (docs/baselines.md)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from slidingserve.core.checks import require_int, require_number
from slidingserve.policies.common import LOW_MEMORY_DIVISOR, LOW_MEMORY_THRESHOLD

TOKEN_GRID: tuple[int, ...] = (128, *range(256, 2048 + 1, 256), 2552)
"""Batch totals QoServe chooses from: 128, 256, 512, 768, …, 2048 (steps of 256), 2552."""

LOW_MEMORY_GRID: tuple[int, ...] = (128, 256, 384, 512)
"""The grid when free KV memory is low."""


@dataclass(frozen=True, slots=True)
class QoServeConfig:
    """Options of the `qoserve` policy. Times in seconds, sizes in tokens.

    Grids may be given as any sequence of ints (a TOML list); they are stored as tuples.
    """

    max_batch_tokens: int | None = None  # cap on every grid value; None: the engine's B_max
    priority_weight: float = 0.008  # seconds added to a prefill's deadline per remaining token
    safety_factor: float = 1.2  # predicted time × this must fit the smallest decode slack
    token_grid: Sequence[int] = TOKEN_GRID  # batch totals (decodes included), ascending
    low_memory_grid: Sequence[int] = LOW_MEMORY_GRID  # the grid when free KV is low
    low_memory_divisor: int = LOW_MEMORY_DIVISOR  # low memory: free blocks × block size / this
    low_memory_threshold: int = LOW_MEMORY_THRESHOLD  # ... is below this
    fallback_chunk: int = 128  # batch total when the smallest decode slack is ≤ 0
    initial_throughput: float = 8500.0  # ρ_EMA at start, prefill tokens per second
    throughput_decay: float = 0.995  # EMA weight of the old ρ at each step
    decode_chunk_size: int = 256  # decodes are added while the batch has fewer tokens
    predictor_split: int = 512  # batches of ≤ this many tokens use the small model
    eager_relegation: bool = True  # relegate requests that cannot meet their TTFT
    reanchor_late_decodes: bool = True  # TBT deadlines from a late first token's time
    default_decode_count: int = 15  # decodes assumed when an e2e tier's length is unknown

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_grid", _grid("token_grid", self.token_grid))
        object.__setattr__(self, "low_memory_grid", _grid("low_memory_grid", self.low_memory_grid))
        if self.max_batch_tokens is not None:
            require_int("max_batch_tokens", self.max_batch_tokens)
        for name in (
            "low_memory_divisor",
            "low_memory_threshold",
            "fallback_chunk",
            "decode_chunk_size",
            "predictor_split",
            "default_decode_count",
        ):
            require_int(name, getattr(self, name))
        require_number("priority_weight", self.priority_weight, minimum=0.0)
        require_number("safety_factor", self.safety_factor, minimum=0.0, strict=True)
        require_number("initial_throughput", self.initial_throughput, minimum=0.0, strict=True)
        require_number("throughput_decay", self.throughput_decay, minimum=0.0)
        if self.throughput_decay >= 1:
            raise ValueError(f"throughput_decay must be below 1, got {self.throughput_decay}")
        for name in ("eager_relegation", "reanchor_late_decodes"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")


def _grid(name: str, values: Sequence[int]) -> tuple[int, ...]:
    """`values` as a tuple, checked: positive ints, strictly increasing, at least one."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a list of token counts, got {values!r}")
    grid = tuple(values)
    if not grid:
        raise ValueError(f"{name} must hold at least one token count")
    for value in grid:
        require_int(name, value)
    if any(a >= b for a, b in itertools.pairwise(grid)):
        raise ValueError(f"{name} must be strictly increasing, got {list(grid)}")
    return grid
