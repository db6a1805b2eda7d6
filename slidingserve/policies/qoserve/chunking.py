"""QoServe's dynamic chunking: decodes first, then the largest grid total that the
smallest decode slack allows (SPEC §8)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from slidingserve.core.request import Request


class DecodeSelection(NamedTuple):
    """The decodes of the next batch."""

    requests: list[Request]  # smallest slack first
    min_slack: float  # seconds until the earliest of their next deadlines; inf without decodes
    context: int  # Σ u_i: KV tokens they read


class ChunkChoice(NamedTuple):
    """The batch total QoServe chose and why."""

    total_tokens: int  # decodes plus prefill tokens
    reason: str  # "no-prefill", "no-decodes", "late-decode", "grid" or "none-fits"


def select_decodes(decoding: Iterable[Request], now: float, limit: int) -> DecodeSelection:
    """Decodes by increasing slack, each adding one token while the batch holds fewer than
    `limit` tokens: the first `limit` of them."""
    chosen = sorted(decoding, key=lambda r: r.next_deadline)[:limit]
    min_slack = chosen[0].next_deadline - now if chosen else math.inf
    return DecodeSelection(chosen, min_slack, sum(r.num_computed for r in chosen))


def is_low_memory(free_blocks: int, block_size: int, divisor: int, threshold: int) -> bool:
    """QoServe's low-memory test: free blocks × block size / divisor < threshold."""
    return free_blocks * block_size / divisor < threshold


def capped_grid(grid: Iterable[int], max_tokens: int) -> tuple[int, ...]:
    """The grid with every value above `max_tokens` lowered to it (duplicates merged)."""
    return tuple(sorted({min(total, max_tokens) for total in grid}))


def largest_fitting(grid: Sequence[int], fits: Callable[[int], bool]) -> int | None:
    """Binary search for the largest grid value that `fits`, assuming `fits` holds on a
    prefix of the grid; None if it holds on none."""
    best = None
    low, high = 0, len(grid) - 1
    while low <= high:
        middle = (low + high) // 2
        if fits(grid[middle]):
            best = grid[middle]
            low = middle + 1
        else:
            high = middle - 1
    return best


def choose_total(
    grid: Sequence[int],
    min_slack: float,
    predict: Callable[[int], float],
    safety_factor: float,
    fallback: int,
) -> ChunkChoice:
    """The batch total: the largest grid value whose predicted time (`predict`, seconds)
    × `safety_factor` is within `min_slack` seconds.

    `fallback` tokens when the slack is ≤ 0 (a decode is already late); the largest value
    without decodes (no TBT limit); the smallest value when none fits.
    """
    if min_slack <= 0:
        return ChunkChoice(fallback, "late-decode")
    if math.isinf(min_slack):
        return ChunkChoice(grid[-1], "no-decodes")
    best = largest_fitting(grid, lambda total: predict(total) * safety_factor <= min_slack)
    if best is None:
        return ChunkChoice(grid[0], "none-fits")
    return ChunkChoice(best, "grid")
