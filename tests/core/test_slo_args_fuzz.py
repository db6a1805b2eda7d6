"""Every value a JSON body can carry, under every SLO key: a valid SLO or one clean error.

`parse_slo_args` must answer anything with an `SLO` or an `SLOArgumentError` whose message is
one short line naming the key, never another exception (issue 15: a 400-digit `ttft_ms` raised
`OverflowError`). The middleware's side of it is in
`tests/engines/with_vllm/test_vllm_bad_input.py`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.core import SLO
from slidingserve.core.request import MAX_SLO_SECONDS
from slidingserve.core.slo_args import (
    MAX_TIER_NAME,
    SLOArgumentError,
    SLODefaults,
    parse_slo_args,
)

DEFAULTS = SLODefaults(ttft_ms=2000, tbt_ms=50)
KEYS = ("ttft_ms", "tbt_ms", "protected", "tier")
MS_KEYS = ("ttft_ms", "tbt_ms")
MAX_MESSAGE = 160  # characters: a message quotes at most a short piece of the value
FLAG_STRINGS = ("true", "false", "1", "0")

# Scalars a JSON body can hold, the awkward ones made likely: ints far past a float's range
# (json.dumps refuses past 4300 digits), numbers and words written as strings, long text.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**4000), max_value=10**4000),
    st.floats(),
    st.text(),
    st.text(min_size=MAX_TIER_NAME - 1, max_size=4 * MAX_TIER_NAME),
    st.floats().map(repr),
    st.integers(min_value=-(10**400), max_value=10**400).map(str),
    st.sampled_from(["TRUE", "False", " 12 ", "1e400", "nan", "-inf", "1_000", "0x10", ""]),
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def assert_valid(slo: SLO) -> None:
    """Positive finite seconds up to an hour, a bool, no tier or a short printable name."""
    for seconds in (slo.ttft, slo.tbt):
        assert isinstance(seconds, float)
        assert math.isfinite(seconds) and 0 < seconds <= MAX_SLO_SECONDS
    assert isinstance(slo.protected, bool)
    assert slo.tier is None or (
        isinstance(slo.tier, str) and 0 < len(slo.tier) <= MAX_TIER_NAME and slo.tier.isprintable()
    )


def assert_clean(error: SLOArgumentError, key: str) -> None:
    message = str(error)
    assert message.startswith(key + " "), message
    assert "\n" not in message and "\r" not in message, message
    assert len(message) <= MAX_MESSAGE, message


def parse_or_error(key: str, value: object) -> SLO | SLOArgumentError:
    try:
        slo = parse_slo_args({key: value}, DEFAULTS)
    except SLOArgumentError as error:
        assert_clean(error, key)
        return error
    assert_valid(slo)
    return slo


def as_milliseconds(value: object) -> float | None:
    """What a time key should read `value` as: a finite float in a latency's range, or None
    for a value that must be refused. Ints are compared before any conversion to a float."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if not isinstance(value, int | float) or not 0 < value <= MAX_SLO_SECONDS * 1000:
        return None
    return float(value) if float(value) / 1000 > 0 else None


def as_flag(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in FLAG_STRINGS:
        return value.lower() in ("true", "1")
    return None


@settings(max_examples=400, deadline=None)
@given(key=st.sampled_from(MS_KEYS), value=json_values)
def test_a_time_key_reads_what_it_should_and_refuses_the_rest(key: str, value: object) -> None:
    read = parse_or_error(key, value)
    expected = as_milliseconds(value)
    if expected is None:
        assert isinstance(read, SLOArgumentError), (value, read)
    else:
        assert isinstance(read, SLO), (value, read)
        assert (read.ttft if key == "ttft_ms" else read.tbt) == expected / 1000


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_protected_reads_what_it_should_and_refuses_the_rest(value: object) -> None:
    read = parse_or_error("protected", value)
    expected = as_flag(value)
    if expected is None:
        assert isinstance(read, SLOArgumentError), (value, read)
    else:
        assert isinstance(read, SLO) and read.protected is expected, (value, read)


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_tier_reads_a_short_printable_name_and_refuses_the_rest(value: object) -> None:
    read = parse_or_error("tier", value)
    if value is None or (
        isinstance(value, str) and 0 < len(value) <= MAX_TIER_NAME and value.isprintable()
    ):
        assert isinstance(read, SLO) and read.tier == value, (value, read)
    else:
        assert isinstance(read, SLOArgumentError), (value, read)


@settings(max_examples=200, deadline=None)
@given(args=st.dictionaries(st.sampled_from(KEYS), json_values, max_size=4))
def test_any_mix_of_keys_gives_a_valid_slo_or_names_a_key(args: dict[str, object]) -> None:
    try:
        slo = parse_slo_args(args, DEFAULTS)
    except SLOArgumentError as error:
        assert any(str(error).startswith(key + " ") for key in args), error
        assert "\n" not in str(error) and len(str(error)) <= MAX_MESSAGE
    else:
        assert_valid(slo)


HUGE = 10**399  # 400 digits: too large for a float


def short_id(value: object) -> str | None:
    """A test id for a value whose own would be huge (or refused: ints past 4300 digits)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"int-{value.bit_length()}-bits"
    if isinstance(value, str) and len(value) > 20:
        return f"str-{len(value)}-chars"
    return None


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("ttft_ms", HUGE, "ttft_ms of about 10^399 ms is over an hour"),
        ("tbt_ms", -HUGE, "tbt_ms must be positive and finite, got about -10^399"),
        ("ttft_ms", 10**5000, "ttft_ms of about 10^5000 ms"),  # past Python's 4300-digit str()
        ("ttft_ms", 1e308, "ttft_ms of 1e+308 ms is over an hour"),
        ("tbt_ms", 5e-324, "tbt_ms of 5e-324 ms is too small"),
        ("ttft_ms", 0, "ttft_ms must be positive"),
        ("ttft_ms", -0.0, "ttft_ms must be positive"),
        ("ttft_ms", "1e400", "ttft_ms must be positive and finite, got '1e400'"),
        ("ttft_ms", "9" * 400, "ttft_ms must be positive and finite, got '99999"),
        ("tbt_ms", "x" * 100_000, "tbt_ms must be a number of milliseconds, got 'xxx"),
        ("ttft_ms", True, "ttft_ms must be a number of milliseconds, got True"),
        ("ttft_ms", None, "ttft_ms must be a number of milliseconds, got None"),
        ("ttft_ms", {"ms": 5}, "ttft_ms must be a number of milliseconds, got an object"),
        ("tbt_ms", [5], "tbt_ms must be a number of milliseconds, got an array"),
        ("ttft_ms", np.float64("nan"), "ttft_ms must be positive and finite"),
        ("protected", HUGE, "protected must be true/false or 1/0, got about 10^399"),
        ("protected", None, "protected must be true/false or 1/0, got None"),
        ("protected", [True], "protected must be true/false or 1/0, got an array"),
        ("protected", "yes", "protected must be true/false or 1/0, got 'yes'"),
        ("tier", "a" * (MAX_TIER_NAME + 1), "tier must be a name of 1 to 64 printable"),
        ("tier", "gold\nsilver", "tier must be a name"),
        ("tier", True, "tier must be a name of 1 to 64 printable characters, got True"),
        ("tier", {"name": "gold"}, "tier must be a name of 1 to 64 printable characters, got an"),
    ],
    ids=short_id,
)
def test_hostile_values_get_a_short_message_naming_the_key(
    key: str, value: object, message: str
) -> None:
    error = parse_or_error(key, value)
    assert isinstance(error, SLOArgumentError)
    assert str(error).startswith(message), str(error)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"ttft_ms": 3_600_000}, SLO(3600.0, 0.05)),  # an hour exactly
        ({"ttft_ms": np.int64(250), "protected": 1.0}, SLO(0.25, 0.05, protected=True)),
        (
            {"tbt_ms": " 12.5 ", "protected": "FALSE", "tier": "é" * 64},
            SLO(2.0, 0.0125, tier="é" * 64),
        ),
    ],
)
def test_values_at_the_edges_are_read(args: dict[str, object], expected: SLO) -> None:
    assert parse_slo_args(args, DEFAULTS) == expected
