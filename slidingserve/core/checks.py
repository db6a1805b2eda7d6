"""Small argument checks shared by the configuration dataclasses and file readers.

A bool is an int to Python but never a count or a time here, so every check refuses it.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

import numpy as np


def is_integer(value: Any) -> TypeGuard[int]:
    """Whether `value` is an integer (a Python or numpy int), not a bool."""
    return not isinstance(value, bool) and isinstance(value, int | np.integer)


def is_number(value: Any) -> TypeGuard[float]:
    """Whether `value` is a real number (int or float, numpy's too), not a bool."""
    return not isinstance(value, bool) and isinstance(value, int | float | np.integer | np.floating)


def require_int(name: str, value: Any, minimum: int | None = 1) -> int:
    """`value` as an int; ValueError unless it is an integer of at least `minimum` (None: any)."""
    if not is_integer(value):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def require_number(
    name: str, value: Any, minimum: float | None = None, *, strict: bool = False
) -> float:
    """`value` as a float; ValueError unless it is a finite number at or above `minimum`
    (`strict`: above it; None: no bound)."""
    if not is_number(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if minimum is not None and (value < minimum or (strict and value == minimum)):
        bound = "above" if strict else "at least"
        raise ValueError(f"{name} must be {bound} {minimum}, got {value}")
    return float(value)


def require_positive(name: str, value: Any) -> float:
    """`value` as a float; ValueError unless it is a positive, finite number."""
    if not is_number(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return float(value)
