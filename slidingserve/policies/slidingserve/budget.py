"""The budget part: how many tokens a batch gets when the BatchConstructor does not plan it.

A split rule (the paper's ternary split of two windows, the exact window-k optimum, or the
fixed B_max), the decode windows it works in (shrunk by `time_margin`, capped by
`iteration_cap`) and the tile the batch total is rounded down to (`token_quantum`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from slidingserve.core.checks import require_int, require_number
from slidingserve.core.request import next_deadlines
from slidingserve.policies.slidingserve.chunker import ChunkChoice, paper_chunk, window_chunk
from slidingserve.policies.slidingserve.windows import deadline_horizons, decode_horizons

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.request import Request
    from slidingserve.policies.slidingserve.chunker import QueueTimes

MAX_WINDOWS = 4  # the exact window-k search is written for k ≤ 4


@dataclass(frozen=True, slots=True)
class PaperSplit:
    """The paper's SlidingChunker (option `chunker=paper`, docs/design.md §5): the budget of two
    windows split by ternary search, the larger part run now."""


@dataclass(frozen=True, slots=True)
class WindowSplit:
    """The most tokens over k windows, exactly [beyond] (option `chunker=window`)."""

    k: int = 2  # windows (option `window`): 1 = greedy, 2 = exact two-window, 3, 4

    def __post_init__(self) -> None:
        require_int("window", self.k)
        if self.k > MAX_WINDOWS:
            raise ValueError(f"window must be 1, 2, 3 or 4, got {self.k}")


@dataclass(frozen=True, slots=True)
class FixedSplit:
    """B_max at every iteration, decode deadlines ignored (option `chunker=fixed`)."""


SplitRule = PaperSplit | WindowSplit | FixedSplit


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """The token budget of a batch the SlidingChunker plans."""

    rule: SplitRule  # how the decode windows become a budget
    # The decode windows (seconds) are divided by this (≥ 1) before a budget is sized; the
    # BatchConstructor's T_cur is the first of them
    time_margin: float = 1.0
    # > 0: no window ends past (j + 1) × this × the tightest L_tbt, nor, when the decodes
    # alone take longer than one L_tbt, past (j + 1) × (their time + (this − 1) × L_tbt)
    iteration_cap: float = 0.0
    # > 0: up to this many of the tightest decodes may stop bounding the windows when the
    # forecast says that keeping them costs more first tokens (`release.py`)
    release_decodes: int = 0
    # > 0: batch totals, decodes included, rounded down to a multiple of this many tokens
    # (a tile). The BatchConstructor's plans (whole prefills) are not rounded.
    token_quantum: int = 0
    # > 0: the iteration cap while the KV cache is tight (`headroom.cache_is_tight`)
    tight_cache_cap: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.rule, PaperSplit | WindowSplit | FixedSplit):
            raise ValueError(f"unknown budget rule {self.rule!r}")
        require_number("time_margin", self.time_margin, 1)
        require_number("iteration_cap", self.iteration_cap, 0)
        require_number("tight_cache_cap", self.tight_cache_cap, 0)
        require_int("release_decodes", self.release_decodes, 0)
        require_int("token_quantum", self.token_quantum, 0)

    @property
    def shapes_windows(self) -> bool:
        """Whether the margin, the cap or the release changes the decode windows."""
        return (
            self.time_margin != 1
            or self.iteration_cap != 0
            or self.release_decodes != 0
            or self.tight_cache_cap != 0
        )

    def cap(self, cache_tight: bool) -> float:
        """The iteration cap in force: `tight_cache_cap` while the cache is tight (when set),
        `iteration_cap` otherwise."""
        return self.tight_cache_cap if cache_tight and self.tight_cache_cap else self.iteration_cap


def budget_windows(
    budget: BudgetConfig,
    decoding: Sequence[Request],
    now: float,
    decode_time: float = 0.0,
    bounding: Sequence[Request] | None = None,
    cache_tight: bool = False,
) -> list[float]:
    """The cumulative decode windows (docs/design.md §5), seconds from `now`: at least two,
    k with the window rule; shrunk by `time_margin` and capped by `iteration_cap` when set
    (`decode_time`: the predicted seconds of an iteration of the decodes alone). The windows
    are those of the `bounding` decodes (all of `decoding` unless some were released); the
    cap reads every decode."""
    k = max(2, budget.rule.k if isinstance(budget.rule, WindowSplit) else 2)
    tbts = [r.slo.tbt for r in decoding]
    if bounding is None:
        horizons = deadline_horizons(next_deadlines(decoding), tbts, now, k)
    else:
        horizons = decode_horizons(bounding, now, k)
    if budget.time_margin != 1:
        horizons = [h / budget.time_margin for h in horizons]
    cap = budget.cap(cache_tight)
    if cap and decoding:
        step = iteration_limit(cap, min(tbts), decode_time)
        horizons = [min(h, (j + 1) * step) for j, h in enumerate(horizons)]
    return horizons


def iteration_limit(cap: float, tbt: float, decode_time: float) -> float:
    """The longest iteration `iteration_cap` = `cap` allows, seconds: cap × L_tbt, or, where
    the decodes alone take longer than one L_tbt, their time + (cap − 1) × L_tbt, so that a
    cap above 1 always leaves prefill some room (docs/design.md §8.1)."""
    return max(cap * tbt, decode_time + (cap - 1) * tbt)


def split_budget(rule: SplitRule, times: QueueTimes, horizons: Sequence[float]) -> ChunkChoice:
    """The prefill tokens of the queue to run now under `rule`."""
    if isinstance(rule, FixedSplit):
        return ChunkChoice(times.max_prefill, "fixed")
    if isinstance(rule, WindowSplit):
        return window_chunk(times, horizons[: rule.k])
    return paper_chunk(times, horizons[:2])


def rounded_total(budget: BudgetConfig, num_decodes: int, prefill_tokens: int) -> int:
    """The batch total, decodes included, rounded down to `token_quantum` when it has
    prefill tokens and reaches one tile (never below the decodes alone)."""
    total = num_decodes + prefill_tokens
    quantum = budget.token_quantum
    if quantum and total >= quantum and prefill_tokens:
        total = max(num_decodes, total - total % quantum)
    return total
