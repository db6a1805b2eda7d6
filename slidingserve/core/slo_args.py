"""A request's SLO as API arguments: `extra_args` (offline vLLM) or `vllm_xargs` (HTTP).

Keys: `ttft_ms`, `tbt_ms` (positive numbers of milliseconds, at most an hour, as numbers or
numeric strings), `protected` (true/false or 1/0, as booleans, numbers or strings) and `tier`
(a name of 1 to 64 printable characters, or null for none). Absent keys take the defaults;
a present key holding anything else (null for a time, a boolean for a time, an object, an
array, a number out of range, however large) raises `SLOArgumentError`, whose message is one
line that starts with the key's name and shows at most `MAX_SHOWN` characters of the value.
`parse_slo_args` reads them (the vLLM front-end validator, its HTTP middleware and the
adapter all read requests through it) into the SLO the engine plans to: the request's own,
its deadlines brought forward by the server's margin (`SLODefaults.margin_ms`, `serve
--slo-margin-ms`); `to_slo_args` writes them (the load generator). No vLLM import, so the
load generator uses it without the `vllm` extra.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from slidingserve.core.checks import is_integer, is_number
from slidingserve.core.request import MAX_SLO_SECONDS, SLO

MAX_TIER_NAME = 64  # characters
MAX_SHOWN = 40  # characters of a bad value quoted in an error message
MAX_SHOWN_INT_BITS = 64  # a larger int is described by its size, never written out
DUE_AT_ONCE = 1e-6  # seconds: the TTFT planned for a request whose TTFT the margin takes whole

REFUSED_REASON = "slo-refused"
"""Why a server with admission control refused a request, as its client reads it: the stop
reason of a request the engine refused, the `reason` of an API server's 503/429 error."""


class SLOArgumentError(ValueError):
    """A request's SLO arguments are invalid; the message says which and why."""


@dataclass(frozen=True, slots=True)
class SLODefaults:
    """What a request without SLO arguments gets: the served engine's default SLO; and the
    margin every request's deadlines are planned with."""

    ttft_ms: float = 2000.0  # time to first token, milliseconds
    tbt_ms: float = 50.0  # time between tokens, milliseconds
    protected: bool = False
    tier: str | None = None
    # Milliseconds by which the engine plans every deadline ahead of the SLO's: the time a
    # token takes from the engine to its client (the API server's streaming, the network)
    # and a request from its client to the engine, which the engine's clock does not see
    margin_ms: float = 0.0

    def __post_init__(self) -> None:
        margin = self.margin_ms
        if not is_number(margin) or not math.isfinite(margin) or margin < 0:
            raise SLOArgumentError(
                f"the SLO margin must be a finite number of milliseconds >= 0, got {margin!r}"
            )
        if margin > MAX_SLO_SECONDS * 1000:
            raise SLOArgumentError(f"an SLO margin of {margin} ms is over an hour")
        parse_slo_args({}, self)  # the defaults themselves must be valid
        if margin and margin >= self.ttft_ms:
            raise SLOArgumentError(
                f"the SLO margin of {margin:g} ms must be under the default TTFT of "
                f"{self.ttft_ms:g} ms: every request without a TTFT of its own would be due "
                "at once"
            )


def parse_slo_args(extra_args: Mapping[str, object] | None, defaults: SLODefaults) -> SLO:
    """The SLO the engine plans a request to, from its extra arguments: its TTFT less
    `defaults.margin_ms`, so that every deadline comes that much earlier under cumulative
    deadlines (a TTFT no longer than the margin is planned as due at once,
    `DUE_AT_ONCE`); SLOArgumentError if the arguments are invalid.

    Unrelated keys are left alone (other plug-ins may use extra_args too).
    """
    args = extra_args or {}
    ttft = _seconds(args, "ttft_ms", defaults.ttft_ms)
    tbt = _seconds(args, "tbt_ms", defaults.tbt_ms)
    protected = _flag(args.get("protected", defaults.protected))
    tier = _tier(args.get("tier", defaults.tier))
    return SLO(planned_ttft(ttft, defaults.margin_ms / 1000.0), tbt, protected, tier)


def planned_ttft(ttft: float, margin: float) -> float:
    """`ttft` less `margin` (both seconds), at least `DUE_AT_ONCE` (or `ttft`, if shorter)
    when the margin takes (nearly) all of it: never shorter for a longer `ttft`."""
    return max(ttft - margin, min(ttft, DUE_AT_ONCE))


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


def _seconds(args: Mapping[str, object], key: str, default: float) -> float:
    """The milliseconds under `key` as seconds. Every comparison is made on the value as given
    (a Python int compares exactly with a float at any size), so an int too large for a float
    is refused as over an hour rather than overflowing."""
    given = args.get(key, default)
    value = given
    if isinstance(given, str):
        try:
            value = float(given)
        except ValueError:  # UnicodeEncodeError (lone surrogates) is one too
            value = None
    if not is_number(value):
        raise SLOArgumentError(f"{key} must be a number of milliseconds, got {_shown(given)}")
    if (not is_integer(value) and not math.isfinite(value)) or value <= 0:
        raise SLOArgumentError(f"{key} must be positive and finite, got {_shown(given)}")
    if value > MAX_SLO_SECONDS * 1000:
        raise SLOArgumentError(f"{key} of {_shown(given)} ms is over an hour: not a latency target")
    seconds = float(value) / 1000.0
    if seconds == 0:  # a positive value that underflows, such as 5e-324
        raise SLOArgumentError(f"{key} of {_shown(given)} ms is too small: not a latency target")
    return seconds


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if is_number(value) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise SLOArgumentError(f"protected must be true/false or 1/0, got {_shown(value)}")


def _tier(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TIER_NAME or not value.isprintable():
        raise SLOArgumentError(
            f"tier must be a name of 1 to {MAX_TIER_NAME} printable characters, got {_shown(value)}"
        )
    return value


def _shown(value: object) -> str:
    """`value` as an error message quotes it: one line of at most `MAX_SHOWN` characters.
    Containers are named, not written (their repr may be huge or nested too deep to write),
    and ints past 64 bits are shown by their order of magnitude (Python refuses to write one
    past 4300 digits)."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    if is_integer(value) and int(value).bit_length() > MAX_SHOWN_INT_BITS:
        sign = "-" if value < 0 else ""
        return f"about {sign}10^{int(int(value).bit_length() * math.log10(2))}"
    if isinstance(value, str):
        value = value[:MAX_SHOWN]  # repr escapes line breaks: the quote stays on one line
    elif not (value is None or isinstance(value, bool) or is_number(value)):
        return f"a {type(value).__name__}"
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


DEFAULT_SLO = SLODefaults()
"""The default SLO of a served engine (`serve --ttft-ms/--tbt-ms`, the adapter, `compare`)."""
