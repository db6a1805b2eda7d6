"""SLO arguments of the API, without vLLM."""

from __future__ import annotations

import pytest

from slidingserve.core import SLO
from slidingserve.engines.vllm.slo_args import SLOArgumentError, SLODefaults, parse_slo_args

DEFAULTS = SLODefaults(ttft_ms=2000, tbt_ms=50)


def test_absent_keys_take_the_defaults() -> None:
    assert parse_slo_args(None, DEFAULTS) == SLO(2.0, 0.05)
    assert parse_slo_args({"other_plugin": 3}, DEFAULTS) == SLO(2.0, 0.05)


def test_values_arrive_in_milliseconds_as_numbers_or_strings() -> None:
    slo = parse_slo_args({"ttft_ms": "500", "tbt_ms": 25, "protected": 1, "tier": "gold"}, DEFAULTS)
    assert slo == SLO(0.5, 0.025, protected=True, tier="gold")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"ttft_ms": -5}, "ttft_ms must be positive"),
        ({"tbt_ms": 0}, "tbt_ms must be positive"),
        ({"ttft_ms": "soon"}, "ttft_ms must be a number"),
        ({"ttft_ms": True}, "ttft_ms must be a number"),
        ({"ttft_ms": float("nan")}, "finite"),
        ({"tbt_ms": 1e9}, "over an hour"),
        ({"protected": "maybe"}, "protected must be"),
        ({"protected": 2}, "protected must be"),
        ({"tier": ""}, "tier must be a name"),
        ({"tier": 7}, "tier must be a name"),
    ],
)
def test_invalid_values_are_rejected_with_a_clear_message(
    args: dict[str, object], message: str
) -> None:
    with pytest.raises(SLOArgumentError, match=message):
        parse_slo_args(args, DEFAULTS)


def test_invalid_defaults_are_rejected() -> None:
    with pytest.raises(SLOArgumentError):
        SLODefaults(ttft_ms=-1)
