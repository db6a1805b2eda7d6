"""Decode horizons H_j = min over safe decodes of s_i + (j − 1)·L_tbt_i, by hand."""

from __future__ import annotations

import math

import pytest
from factories import make_decoding
from hypothesis import given
from hypothesis import strategies as st

from slidingserve.core import Request
from slidingserve.policies.slidingserve.windows import (
    deadline_horizons,
    decode_horizons,
    slack_horizons,
)

NOW = 1.0


def decode(name: str, slack: float, tbt: float) -> Request:
    """A decode that has emitted one token: its second is due at ttft + tbt (arrival 0)."""
    return make_decoding(name, arrival=0.0, ttft=NOW + slack - tbt, tbt=tbt)


def test_each_window_takes_its_own_minimum() -> None:
    # slow: s = 20 ms, L_tbt = 50 ms → 20, 70, 120 ms
    # fast: s = 30 ms, L_tbt = 25 ms → 30, 55, 80 ms
    # H = 20 (slow), 55 (fast), 80 (fast) ms: the binding decode changes after window 1.
    decoding = [decode("slow", 0.020, 0.050), decode("fast", 0.030, 0.025)]
    assert decode_horizons(decoding, NOW, 3) == pytest.approx([0.020, 0.055, 0.080])


def test_lost_decodes_are_ignored() -> None:
    # late: s = −10 ms; due: s = 0 exactly (deadline 0.5 + 0.5 = 1.0 s). Either would pull
    # H_1 to ≤ 0 if counted; the safe decode alone gives 40, 140 ms.
    late = decode("late", -0.010, 0.001)
    due = make_decoding("due", arrival=0.0, ttft=0.5, tbt=0.5)
    safe = decode("safe", 0.040, 0.100)
    assert decode_horizons([late, due, safe], NOW, 2) == pytest.approx([0.040, 0.140])


@pytest.mark.parametrize("k", [1, 2, 4])
def test_without_safe_decodes_every_horizon_is_infinite(k: int) -> None:
    assert decode_horizons([], NOW, k) == [math.inf] * k
    assert decode_horizons([decode("late", -0.010, 0.050)], NOW, k) == [math.inf] * k


@given(
    st.lists(st.floats(0.0, 1e4, allow_subnormal=False), max_size=10),
    st.floats(0.0, 1e4),
    st.one_of(st.just(None), st.lists(st.floats(0.001, 1.0), min_size=10, max_size=10)),
    st.sampled_from([0.05, 0.1, 1 / 3]),
    st.integers(1, 4),
)
def test_one_tbt_for_every_decode_gives_the_same_floats_from_the_earliest_deadline(
    deadlines: list[float], now: float, tbts: list[float] | None, tbt: float, k: int
) -> None:
    """The shortcut for decodes sharing one L_tbt (`tbts` None) and the general rule with
    their own ones agree, float for float, with every slack as the general rule reads
    it; lost decodes (a deadline not after `now`) included."""
    own = [tbt] * len(deadlines) if tbts is None else tbts[: len(deadlines)]
    general = slack_horizons([deadline - now for deadline in deadlines], own, k)
    assert deadline_horizons(deadlines, own, now, k) == general
