"""A request's SLO as API arguments: `extra_args` (offline vLLM) or `vllm_xargs` (HTTP).

Keys: `ttft_ms`, `tbt_ms` (positive numbers of milliseconds, at most an hour),
`protected` (true/false or 1/0) and `tier` (a short name). Absent keys take the defaults.
`parse_slo_args` reads them (the vLLM front-end validator, its HTTP middleware and the
adapter all read requests through it); `to_slo_args` writes them (the load generator).
No vLLM import, so the load generator uses it without the `vllm` extra.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from slidingserve.core.checks import is_number
from slidingserve.core.request import MAX_SLO_SECONDS, SLO

MAX_TIER_NAME = 64  # characters


class SLOArgumentError(ValueError):
    """A request's SLO arguments are invalid; the message says which and why."""


@dataclass(frozen=True, slots=True)
class SLODefaults:
    """What a request without SLO arguments gets: the served engine's default SLO."""

    ttft_ms: float = 2000.0  # time to first token, milliseconds
    tbt_ms: float = 50.0  # time between tokens, milliseconds
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


def to_slo_args(slo: SLO) -> dict[str, str | int | float]:
    """`slo` as the arguments `parse_slo_args` reads back: milliseconds rounded to 1 µs (no
    float noise such as 1400.0000000000002), `protected` as 0/1, `tier` when it has one."""
    args: dict[str, str | int | float] = {
        "ttft_ms": round(slo.ttft * 1000.0, 3),
        "tbt_ms": round(slo.tbt * 1000.0, 3),
        "protected": int(slo.protected),
    }
    if slo.tier is not None:
        args["tier"] = slo.tier
    return args


def _milliseconds(args: Mapping[str, object], key: str, default: float) -> float:
    value = args.get(key, default)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise SLOArgumentError(
                f"{key} must be a number of milliseconds, got {value!r}"
            ) from None
    if not is_number(value):
        raise SLOArgumentError(f"{key} must be a number of milliseconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise SLOArgumentError(f"{key} must be positive and finite, got {value!r}")
    if value > MAX_SLO_SECONDS * 1000:
        raise SLOArgumentError(f"{key} of {value} ms is over an hour: not a latency target")
    return float(value)


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if is_number(value) and value in (0, 1):
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


DEFAULT_SLO = SLODefaults()
"""The default SLO of a served engine (`serve --ttft-ms/--tbt-ms`, the adapter, `compare`)."""
