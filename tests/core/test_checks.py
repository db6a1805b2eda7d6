"""The shared argument checks: bools are never numbers, bounds are what they say."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slidingserve.core.checks import (
    is_integer,
    is_number,
    require_int,
    require_number,
    require_positive,
)


@pytest.mark.parametrize(
    ("value", "integer", "number"),
    [
        (3, True, True),
        (np.int64(3), True, True),
        (True, False, False),
        (2.0, False, True),
        (np.float32(2.5), False, True),
        ("3", False, False),
        (None, False, False),
    ],
)
def test_what_counts_as_an_integer_and_a_number(value: object, integer: bool, number: bool) -> None:
    assert is_integer(value) is integer
    assert is_number(value) is number


def test_require_int_bounds_and_returns_a_plain_int() -> None:
    assert require_int("n", np.int32(4)) == 4 and type(require_int("n", np.int32(4))) is int
    assert require_int("seed", 0, minimum=0) == 0
    assert require_int("offset", -5, minimum=None) == -5
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        require_int("n", 0)
    with pytest.raises(ValueError, match="n must be an integer, got True"):
        require_int("n", True)


def test_require_number_strict_and_inclusive_bounds() -> None:
    assert require_number("x", 0, 0.0) == 0.0
    with pytest.raises(ValueError, match=r"x must be above 0\.0, got 0"):
        require_number("x", 0, 0.0, strict=True)
    with pytest.raises(ValueError, match=r"x must be at least 1\.0, got 0\.5"):
        require_number("x", 0.5, 1.0)
    with pytest.raises(ValueError, match="x must be a finite number, got nan"):
        require_number("x", math.nan)


@pytest.mark.parametrize("value", [0, -1.0, math.inf, math.nan])
def test_require_positive_refuses_zero_negative_and_non_finite(value: float) -> None:
    with pytest.raises(ValueError, match="scale must be positive and finite"):
        require_positive("scale", value)


def test_require_positive_refuses_non_numbers() -> None:
    assert require_positive("scale", 2) == 2.0
    with pytest.raises(ValueError, match="scale must be a number, got False"):
        require_positive("scale", False)
