"""QoServe's dynamic chunking: decodes first, then the largest grid total that the
smallest decode slack allows (docs/baselines.md)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from slidingserve.core.request import next_deadlines

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


def decode_deadline(request: Request, reanchor_late: bool) -> float:
    """The deadline QoServe gives a decode's next token, seconds.

    The authors' code anchors a decode's TBT deadlines at the later of its first token's
    actual time and its TTFT deadline, so a request whose first token came late gets
    `L_tbt` per token from then on instead of being late for ever (`reanchor_late`);
    token k+1 is due `k × L_tbt` after the anchor. Without a recorded first token (an
    engine that does not report token times) the anchor is the TTFT deadline.
    """
    if not reanchor_late or not request.token_times:
        return request.next_deadline
    anchor = max(request.token_times[0], request.ttft_deadline)
    return anchor + request.num_generated * request.slo.tbt


def reanchored_deadlines(decodes: Iterable[Request]) -> list[float]:
    """`decode_deadline(r, True)` of each of `decodes`, in one pass without a call per
    request (QoServe reads every decode's at every iteration): the same operations in the
    same order, so the same floats (tests/policies/qoserve check it)."""
    deadlines = []
    for request in decodes:
        slo = request.slo
        first = request.arrival + slo.ttft  # the TTFT deadline
        times = request.token_times
        anchor = times[0] if times and times[0] > first else first
        deadlines.append(anchor + request.num_generated * slo.tbt)
    return deadlines


def select_decodes(
    decoding: Iterable[Request], now: float, limit: int, reanchor_late: bool = True
) -> DecodeSelection:
    """Decodes by increasing slack, each adding one token while the batch holds fewer than
    `limit` tokens: the first `limit` of them. Slack is read from `decode_deadline`."""
    decodes = list(decoding)
    deadlines = reanchored_deadlines(decodes) if reanchor_late else next_deadlines(decodes)
    chosen = sorted(range(len(decodes)), key=deadlines.__getitem__)[:limit]  # stable
    min_slack = deadlines[chosen[0]] - now if chosen else math.inf
    requests = [decodes[i] for i in chosen]
    return DecodeSelection(requests, min_slack, sum([r.num_computed for r in requests]))


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
