"""Decode deadlines seen as time windows (docs/design.md §5)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from slidingserve.core.request import next_deadlines

if TYPE_CHECKING:
    from slidingserve.core.request import Request


def decode_horizons(decoding: Sequence[Request], now: float, k: int) -> list[float]:
    """Cumulative horizons H_j = min over safe decodes of (s_i + (j−1)·L_tbt_i), j = 1..k.

    Safe decodes are those whose next deadline is still ahead; H_1 = T_cur and
    H_2 − H_1 = T_next. Without a safe decode every horizon is infinite (no TBT limit).
    """
    return deadline_horizons(next_deadlines(decoding), [r.slo.tbt for r in decoding], now, k)


def deadline_horizons(deadlines: list[float], tbts: list[float], now: float, k: int) -> list[float]:
    """`decode_horizons` from the next deadline and L_tbt of each decode, seconds, in the
    same order. With one L_tbt for every decode and none lost (the common case: one SLO
    class), the horizons come from the earliest deadline alone, with the same floats:
    rounding is monotone, so min(s_i + c) = min(s_i) + c and min(d_i − now) =
    min(d_i) − now exactly."""
    if deadlines and tbts.count(tbts[0]) == len(tbts):
        earliest = min(deadlines)
        if earliest > now:
            first, tbt = earliest - now, tbts[0]
            return [first] + [first + j * tbt for j in range(1, k)]
    return slack_horizons([deadline - now for deadline in deadlines], tbts, k)


def slack_horizons(slacks: list[float], tbts: list[float], k: int) -> list[float]:
    """`decode_horizons` from the slack (next deadline − now) and L_tbt of each decode,
    seconds, in the same order."""
    if slacks and min(slacks) <= 0:  # only the safe decodes bound the windows
        safe = [i for i, slack in enumerate(slacks) if slack > 0]
        slacks, tbts = [slacks[i] for i in safe], [tbts[i] for i in safe]
    if not slacks:
        return [math.inf] * k
    return [min(slacks)] + [
        min([slack + j * tbt for slack, tbt in zip(slacks, tbts, strict=True)]) for j in range(1, k)
    ]
