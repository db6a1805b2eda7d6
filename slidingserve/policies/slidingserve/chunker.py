"""SlidingChunker (docs/design.md §5): how many tokens the next batch gets when no prefill
is at risk.

All budgets here are in prefill tokens taken along the sorted queue on top of the decodes;
`f(p)` is the predicted time of the decodes plus the first p queue tokens and `G(t)` the
most prefill tokens whose batch is predicted within t (TimeToBudget). Later windows are
predicted on the same queue head: the paper's T̂(b) depends only on the batch size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from slidingserve.predictor import predicted_time_at, queue_time_function, time_to_budget

if TYPE_CHECKING:
    from slidingserve.core.request import Request
    from slidingserve.predictor import LatencyModel, PrefillQueueProfile


class ChunkChoice(NamedTuple):
    """A budget and why (the plan's path is "chunker:<reason>")."""

    prefill_tokens: int  # tokens of the sorted queue to run now, on top of every decode
    # "no-prefill" (empty queue), "decodes-only" (the decodes alone exceed T_cur),
    # "no-tbt-limit" (no live decode), "all-fits" (the whole queue fits T_cur), "paper",
    # "window-1" … "window-4", "fixed"
    reason: str


class QueueTimes:
    """f and G over one queue profile, with the token cap B_max."""

    def __init__(
        self,
        model: LatencyModel,
        profile: PrefillQueueProfile,
        max_tokens: int,
        decode_time: float | None = None,
    ) -> None:
        """`decode_time`: f(0), the predicted time of the profile's decodes alone, when the
        caller has it (the same prediction: it is not asked for again)."""
        self.model = model
        self.profile = profile
        self.max_tokens = max_tokens
        self.max_prefill = max(0, min(profile.capacity, max_tokens - profile.num_decodes))
        self._times: dict[int, float] = {}  # f is asked for the same p many times
        if decode_time is not None:
            self._times[0] = decode_time
        self._time_at = queue_time_function(model, profile)  # f(p) for p ≥ 1, uncached

    def time_of(self, prefill_tokens: int) -> float:
        """f(p), seconds."""
        seconds = self._times.get(prefill_tokens)
        if seconds is None:
            if prefill_tokens:
                seconds = self._time_at(prefill_tokens)
            else:
                seconds = predicted_time_at(self.model, self.profile, 0)
            self._times[prefill_tokens] = seconds
        return seconds

    def tokens_within(self, seconds: float) -> int | None:
        """G(t): most prefill tokens predicted within `seconds`; None if decodes alone exceed."""
        if seconds == math.inf:
            return self.max_prefill
        budget = time_to_budget(
            self.model, self.profile, seconds, self.max_tokens, self._times.get(0), self.time_of
        )
        return budget.prefill_tokens if budget.fits else None


def queue_head(
    queue: Sequence[Request], max_requests: int, max_prefill: int
) -> list[tuple[int, int]]:
    """(r_j, u_j) of the first `max_requests` requests of `queue`, up to the first whose
    prefill reaches `max_prefill` tokens in all: the candidates of a `PrefillQueueProfile`
    that `QueueTimes` probes with B_max − |D| = `max_prefill` (the requests after them
    could only raise its capacity past that cap)."""
    head: list[tuple[int, int]] = []
    total = 0
    for request in queue[:max_requests]:
        remaining = request.remaining_prefill
        head.append((remaining, request.num_computed))
        total += remaining
        if total >= max_prefill:
            break
    return head


def paper_chunk(times: QueueTimes, horizons: Sequence[float]) -> ChunkChoice:
    """The paper's procedure: split B_Σ = G(T_cur + T_next) into two batches that both
    carry prefill, minimising f(b) + f(B_Σ − b) by ternary search, run the larger part now,
    and clamp it to G(T_cur) so this iteration breaks no decode deadline.

    The objective is symmetric in b ↔ B_Σ − b, so of the two mirror minimisers the one
    kept for the current batch is the larger (the other is the next batch's share).
    """
    now_tokens = times.tokens_within(horizons[0])
    if now_tokens is None:
        return ChunkChoice(0, "decodes-only")
    if horizons[0] == math.inf:
        return ChunkChoice(times.max_prefill, "no-tbt-limit")
    if now_tokens >= times.max_prefill:
        # All the queued work fits now: splitting it would only delay its first tokens
        # (halving a lone prefill again and again never finishes it).
        return ChunkChoice(times.max_prefill, "all-fits")
    both = times.tokens_within(horizons[1])
    total = now_tokens if both is None else both
    if total <= 1:
        return ChunkChoice(min(total, now_tokens), "paper")
    # Symmetric in b and total − b: search the half where the current batch is the larger.
    half = -(-total // 2)
    split = ternary_argmin(lambda b: times.time_of(b) + times.time_of(total - b), half, total - 1)
    return ChunkChoice(min(split, now_tokens), "paper")


def window_chunk(times: QueueTimes, horizons: Sequence[float]) -> ChunkChoice:
    """Most tokens over len(horizons) windows, cumulative time of window j within H_j [beyond].

    k = 1 is greedy (G(T_cur)); k = 2 is solved by a unimodal search over the first batch
    (exact when T̂ is convex), with greedy as a candidate so it is never worse on the
    two-window objective; k = 3, 4 by coordinate search from the greedy allocation.
    """
    greedy = times.tokens_within(horizons[0])
    if greedy is None:
        return ChunkChoice(0, "decodes-only")
    if greedy >= times.max_prefill and horizons[0] != math.inf:
        return ChunkChoice(times.max_prefill, "all-fits")
    k = len(horizons)
    if horizons[0] == math.inf or k == 1:
        return ChunkChoice(greedy, "no-tbt-limit" if horizons[0] == math.inf else "window-1")
    plan = _greedy_allocation(times, horizons)
    if k == 2:
        first = _best_first_window(times, horizons[1], greedy)
    else:
        first = _coordinate_search(times, horizons, plan)[0]
    return ChunkChoice(first, f"window-{k}")


def window_objective(times: QueueTimes, horizons: Sequence[float], first: Sequence[int]) -> float:
    """Total tokens of the windows when the first k−1 take `first` and the last takes what
    fits; −inf if some cumulative deadline is broken."""
    spent = 0.0
    for tokens, horizon in zip(first, horizons, strict=False):
        spent += times.time_of(tokens)
        if spent > horizon:
            return -math.inf
    last = times.tokens_within(horizons[len(first)] - spent)
    if last is None:
        return -math.inf
    return float(sum(first) + last)


def _best_first_window(times: QueueTimes, horizon: float, greedy: int) -> int:
    def value(b: int) -> float:
        return window_objective(times, [math.inf, horizon], [b])

    best = ternary_argmin(lambda b: -value(b), 0, greedy)
    best = _plateau_end(value, best, greedy)
    return max((best, greedy), key=lambda b: (value(b), b))


def _plateau_end(value: Callable[[int], float], start: int, stop: int) -> int:
    """The largest b in [start, stop] with value(b) ≥ value(start), for a unimodal `value`:
    among equally good first batches the largest runs the queue soonest."""
    target = value(start)
    lo, hi = start, stop + 1  # value(lo) ≥ target; hi is past the end
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if value(mid) >= target:
            lo = mid
        else:
            hi = mid
    return lo


def _greedy_allocation(times: QueueTimes, horizons: Sequence[float]) -> list[int]:
    """Each window in turn takes all it can: the starting point of the coordinate search."""
    plan, spent = [], 0.0
    for horizon in horizons[:-1]:
        tokens = times.tokens_within(horizon - spent) or 0
        plan.append(tokens)
        spent += times.time_of(tokens)
    return plan


def _coordinate_search(
    times: QueueTimes, horizons: Sequence[float], start: list[int], rounds: int = 2
) -> list[int]:
    plan = list(start)
    for _ in range(rounds):
        for j in range(len(plan)):
            top = times.max_prefill

            def value(b: int, j: int = j) -> float:
                trial = [*plan[:j], b, *plan[j + 1 :]]
                return window_objective(times, horizons, trial)

            candidate = ternary_argmin(lambda b: -value(b), 0, top)
            if value(candidate) > value(plan[j]):
                plan[j] = candidate
    return plan


def ternary_argmin(function: Callable[[int], float], lo: int, hi: int) -> int:
    """An integer minimiser of a unimodal `function` on [lo, hi] (smallest on ties).

    Golden-section search: one new evaluation per step (memoised), the bracket shrinking
    by 0.618 each time, then a scan of the last few points.
    """
    memo: dict[int, float] = {}

    def value(b: int) -> float:
        if b not in memo:
            memo[b] = function(b)
        return memo[b]

    while hi - lo > 4:
        left = hi - round(_GOLDEN * (hi - lo))
        right = lo + round(_GOLDEN * (hi - lo))
        if value(left) <= value(right):
            hi = right
        else:
            lo = left
    return min(range(lo, hi + 1), key=lambda b: (value(b), b))


_GOLDEN = (5**0.5 - 1) / 2
