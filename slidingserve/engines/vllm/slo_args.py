"""Per-request SLOs over the API: `extra_args` (offline) or `vllm_xargs` (HTTP).

Keys: `ttft_ms`, `tbt_ms` (positive numbers of milliseconds, at most an hour),
`protected` (true/false or 1/0) and `tier` (a short name). Absent keys take the defaults.
No vLLM import here: the front-end validator, the HTTP middleware and the scheduler all
read requests through this one function.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from slidingserve.core.request import MAX_SLO_SECONDS, SLO

MAX_TIER_NAME = 64
SLO_KEYS = ("ttft_ms", "tbt_ms", "protected", "tier")


class SLOArgumentError(ValueError):
    """A request's SLO arguments are invalid; the message says which and why."""


@dataclass(frozen=True, slots=True)
class SLODefaults:
    """What a request without SLO arguments gets."""

    ttft_ms: float = 2000.0
    tbt_ms: float = 50.0
    protected: bool = False
    tier: str | None = None

    def __post_init__(self) -> None:
        parse_slo_args({}, self)  # the defaults themselves must be valid


def parse_slo_args(extra_args: Mapping[str, object] | None, defaults: SLODefaults) -> SLO:
    """The SLO of a request from its extra arguments; SLOArgumentError if invalid.

    Unrelated keys are left alone (other plug-ins may use extra_args too).
    """
    args = extra_args or {}
    ttft = _milliseconds(args, "ttft_ms", defaults.ttft_ms)
    tbt = _milliseconds(args, "tbt_ms", defaults.tbt_ms)
    protected = _flag(args.get("protected", defaults.protected))
    tier = _tier(args.get("tier", defaults.tier))
    return SLO(ttft / 1000.0, tbt / 1000.0, protected, tier)


def _milliseconds(args: Mapping[str, object], key: str, default: float) -> float:
    value = args.get(key, default)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise SLOArgumentError(
                f"{key} must be a number of milliseconds, got {value!r}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SLOArgumentError(f"{key} must be a number of milliseconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise SLOArgumentError(f"{key} must be positive and finite, got {value!r}")
    if value > MAX_SLO_SECONDS * 1000:
        raise SLOArgumentError(f"{key} of {value} ms is over an hour: not a latency target")
    return float(value)


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise SLOArgumentError(f"protected must be true/false or 1/0, got {value!r}")


def _tier(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_TIER_NAME:
        raise SLOArgumentError(f"tier must be a name of 1 to {MAX_TIER_NAME} characters")
    return value
