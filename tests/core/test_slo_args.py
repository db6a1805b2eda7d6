"""SLO arguments of the API (`extra_args`, `vllm_xargs`), read and written."""

from __future__ import annotations

import pytest

from slidingserve.core import SLO
from slidingserve.core.slo_args import (
    DEFAULT_SLO,
    DUE_AT_ONCE,
    SLOArgumentError,
    SLODefaults,
    parse_slo_args,
    to_slo_args,
)

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


def test_a_margin_brings_every_deadline_forward_by_itself() -> None:
    margined = SLODefaults(ttft_ms=2000, tbt_ms=50, margin_ms=40)
    slo = parse_slo_args({"ttft_ms": 500, "tbt_ms": 25, "protected": 1}, margined)
    assert slo == SLO(0.46, 0.025, protected=True)
    own = parse_slo_args({"ttft_ms": 500, "tbt_ms": 25}, DEFAULTS)
    assert [slo.deadline(10.0, k) for k in (0, 7)] == pytest.approx(
        [own.deadline(10.0, k) - 0.04 for k in (0, 7)]
    )
    assert parse_slo_args(None, margined) == SLO(1.96, 0.05)


def test_a_ttft_the_margin_takes_whole_is_due_at_once() -> None:
    margined = SLODefaults(margin_ms=40)
    assert parse_slo_args({"ttft_ms": 40}, margined).ttft == DUE_AT_ONCE
    assert parse_slo_args({"ttft_ms": 10}, margined).ttft == DUE_AT_ONCE
    assert parse_slo_args({"ttft_ms": 40.0005}, margined).ttft == DUE_AT_ONCE  # not shorter
    assert parse_slo_args({"ttft_ms": 40.002}, margined).ttft == pytest.approx(2e-6)
    assert parse_slo_args({"ttft_ms": 1e-9}, DEFAULTS).ttft == 1e-12  # no margin: as given


def test_a_margin_must_leave_the_default_ttft_something() -> None:
    with pytest.raises(SLOArgumentError, match="under the default TTFT of 2000 ms"):
        SLODefaults(margin_ms=2000)
    assert SLODefaults(margin_ms=1999).margin_ms == 1999


@pytest.mark.parametrize("margin", [-1.0, float("nan"), float("inf"), True, "5", 4e6])
def test_a_bad_margin_is_refused(margin: object) -> None:
    with pytest.raises(SLOArgumentError, match="SLO margin"):
        SLODefaults(margin_ms=margin)  # type: ignore[arg-type]


def test_the_default_slo_is_two_seconds_to_the_first_token_and_50_ms_a_token() -> None:
    assert parse_slo_args(None, DEFAULT_SLO) == SLO(2.0, 0.05)


def test_written_in_milliseconds_without_float_noise() -> None:
    assert to_slo_args(SLO(2.0 * 0.7, 0.05 * 3)) == {
        "ttft_ms": 1400.0,
        "tbt_ms": 150.0,
        "protected": 0,
    }


@pytest.mark.parametrize(
    "slo",
    [SLO(1.4, 0.15), SLO(0.25, 0.0125, protected=True, tier="premium"), SLO(3600.0, 0.001)],
)
def test_what_is_written_reads_back_as_the_same_slo(slo: SLO) -> None:
    other = SLODefaults(ttft_ms=900, tbt_ms=70, protected=True, tier="default")
    read = parse_slo_args(to_slo_args(slo), other)
    assert read == SLO(slo.ttft, slo.tbt, slo.protected, slo.tier or "default")
