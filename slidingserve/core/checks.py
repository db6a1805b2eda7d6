"""Small argument checks shared by the configuration dataclasses."""

from __future__ import annotations

from typing import Any


def require_int(name: str, value: Any, minimum: int = 1) -> None:
    """ValueError unless `value` is an int (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
