"""TimeToBudget (docs/design.md §3): the largest batch along the prefill queue that fits a
time limit."""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable

    from slidingserve.predictor.features import PrefillQueueProfile
    from slidingserve.predictor.model import LatencyModel


SMALL_BRACKET = 4  # tokens: a bracket this narrow is bisected (a guess saves nothing)


class Budget(NamedTuple):
    """The answer of `time_to_budget`.

    When even the decodes alone are predicted over the limit, `fits` is False and the
    budget is the decodes alone (`prefill_tokens` = 0): docs/design.md §5 then runs decodes only.
    """

    total_tokens: int  # B = |D| + prefill_tokens
    prefill_tokens: int  # b: tokens taken from the head of the prefill queue
    predicted_time: float  # predicted time of that batch, seconds (0.0 for an empty batch)
    fits: bool  # predicted_time ≤ time_limit


def predicted_time_at(model: LatencyModel, profile: PrefillQueueProfile, b: int) -> float:
    """Predicted time of the decodes plus the first `b` queue tokens, seconds.

    An empty batch (no decodes, b = 0) takes 0.0 s without asking the model.
    """
    if b == 0 and profile.num_decodes == 0:
        return 0.0
    scenario, x = profile.features_at(b)
    return model.predict_features(scenario, x)


def queue_time_function(
    model: LatencyModel, profile: PrefillQueueProfile
) -> Callable[[int], float]:
    """b ↦ `predicted_time_at(model, profile, b)` for 1 ≤ b ≤ the profile's capacity, the
    same values: evaluated inline (`PrefillQueueProfile.linear_time`) when `model` tells its
    linear model per scenario (a `linear_model(scenario)` method, as the project's
    predictor has), else through `model.predict_features`."""
    linear_model = getattr(model, "linear_model", None)
    linear = linear_model(profile.scenario) if linear_model is not None else None
    if linear is None:
        return partial(predicted_time_at, model, profile)
    time_at: Callable[[int], float] = profile.linear_time(linear.intercept, linear.weights)
    return time_at


def time_to_budget(
    model: LatencyModel,
    profile: PrefillQueueProfile,
    time_limit: float,
    max_tokens: int,
    base_time: float | None = None,
    time_at: Callable[[int], float] | None = None,
) -> Budget:
    """The largest b ≤ min(capacity, max_tokens − |D|) whose batch is predicted ≤ `time_limit`.

    `time_limit` in seconds, `max_tokens` the total-token cap B_max (decodes included).
    b = 0 (decodes only) is checked first; over b ≥ 1 (one scenario) the prediction is
    non-decreasing, so the b ≥ 1 that fit are a prefix and their last one is found by
    bracketing it (`_next_probe`): the same b as a plain binary search, with a handful of
    predictions instead of log2(b_max). The decodes are always in the batch, even when
    |D| alone exceeds `max_tokens` (then b = 0). `base_time`: the prediction at b = 0, when
    the caller has it; `time_at`: b ↦ its prediction for b ≥ 1, when the caller has one
    (else `queue_time_function`).
    """
    num_decodes = profile.num_decodes
    if base_time is None:
        base_time = predicted_time_at(model, profile, 0)
    if base_time > time_limit:
        return Budget(num_decodes, 0, base_time, False)
    if time_at is None:
        time_at = queue_time_function(model, profile)
    # Invariant: lo fits (b = 0 by the check above), hi does not (b_max + 1 by convention).
    lo, lo_time = 0, base_time
    hi = max(0, min(profile.capacity, max_tokens - num_decodes)) + 1
    probes: list[tuple[int, float]] = []  # (b, predicted time) of each probe, b ≥ 1
    halved = True  # whether the last probe left at most half of the bracket before it
    while hi - lo > 1:
        width = hi - lo
        mid = _next_probe(lo, hi, probes, time_limit, halved)
        mid_time = time_at(mid)
        probes.append((mid, mid_time))
        if mid_time <= time_limit:
            lo, lo_time = mid, mid_time
        else:
            hi = mid
        halved = 2 * (hi - lo) <= width
    return Budget(num_decodes + lo, lo, lo_time, True)


def _next_probe(
    lo: int, hi: int, probes: list[tuple[int, float]], time_limit: float, halved: bool
) -> int:
    """The next b to predict, lo < b < hi: the middle of a small bracket; else first b_max
    (the whole queue often fits), then where the line through the last two probes crosses
    `time_limit` (the prediction is nearly linear in b); the middle when there is no such
    line or the last probe did not halve the bracket (`halved` False), so the search takes
    at most about twice the predictions of a binary search."""
    middle = (lo + hi) // 2
    if hi - lo <= SMALL_BRACKET:
        return middle
    if not probes:
        return hi - 1
    if len(probes) < 2 or not halved:
        return middle
    (b1, t1), (b2, t2) = probes[-2], probes[-1]
    if t2 == t1:
        return middle
    crossing = b2 + (time_limit - t2) * (b2 - b1) / (t2 - t1)
    if not math.isfinite(crossing):
        return middle
    return min(max(int(crossing), lo + 1), hi - 1)
