"""Arrival processes: rates, burstiness, common random numbers, the overload window."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.workloads import (
    ArrivalConfig,
    OverloadWindow,
    arrival_times,
    scale_arrivals,
    unit_arrivals,
)

POISSON = ArrivalConfig()


def arrivals(n: int, rate: float, config: ArrivalConfig = POISSON, seed: int = 0) -> np.ndarray:
    return arrival_times(n, rate, config, np.random.default_rng(seed))


class TestRates:
    @pytest.mark.parametrize("rate", [0.5, 4.0, 37.0])
    def test_poisson_mean_gap_is_one_over_rate(self, rate: float) -> None:
        gaps = np.diff(arrivals(40_000, rate))
        assert gaps.mean() == pytest.approx(1.0 / rate, rel=0.02)
        assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)

    @pytest.mark.parametrize("burstiness", [0.5, 1.0, 2.0, 3.0])
    def test_gamma_gaps_have_the_requested_cv(self, burstiness: float) -> None:
        config = ArrivalConfig("gamma", burstiness)
        gaps = np.diff(arrivals(100_000, 5.0, config))
        assert gaps.mean() == pytest.approx(0.2, rel=0.03)
        assert gaps.std() / gaps.mean() == pytest.approx(burstiness, rel=0.05)

    def test_first_arrival_is_at_zero(self) -> None:
        assert arrivals(1, 3.0).tolist() == [0.0]
        assert arrivals(5, 3.0)[0] == 0.0


class TestCommonRandomNumbers:
    @pytest.mark.parametrize("config", [POISSON, ArrivalConfig("gamma", 2.0)])
    def test_rate_only_rescales_time(self, config: ArrivalConfig) -> None:
        at_one = arrivals(1000, 1.0, config, seed=11)
        assert np.array_equal(arrivals(1000, 2.0, config, seed=11), at_one / 2.0)
        assert np.allclose(arrivals(1000, 3.7, config, seed=11), at_one / 3.7, rtol=1e-12)

    def test_different_seeds_differ(self) -> None:
        assert not np.array_equal(arrivals(10, 1.0, seed=1), arrivals(10, 1.0, seed=2))


class TestOverload:
    RATE = 10.0  # requests/s
    WINDOW = OverloadWindow(start=100.0, duration=50.0, factor=3.0)

    def test_density_inside_the_window_is_factor_times_the_base(self) -> None:
        times = arrivals(6000, self.RATE, ArrivalConfig(overload=self.WINDOW))
        inside = np.count_nonzero((times >= 100.0) & (times < 150.0)) / 50.0  # requests/s
        before = np.count_nonzero(times < 100.0) / 100.0
        after = np.count_nonzero((times >= 150.0) & (times < 350.0)) / 200.0
        assert inside == pytest.approx(3.0 * self.RATE, rel=0.08)
        assert before == pytest.approx(self.RATE, rel=0.1)
        assert after == pytest.approx(self.RATE, rel=0.1)

    def test_same_events_compressed_inside_the_window(self) -> None:
        plain = arrivals(6000, self.RATE, seed=5)
        burst = arrivals(6000, self.RATE, ArrivalConfig(overload=self.WINDOW), seed=5)
        early = plain < 100.0
        assert np.array_equal(burst[early], plain[early])
        # After the window each event comes (factor - 1) · duration seconds earlier.
        late = plain >= 100.0 + 3.0 * 50.0
        assert np.allclose(burst[late], plain[late] - 2.0 * 50.0)
        middle = ~early & ~late
        assert np.allclose(burst[middle], 100.0 + (plain[middle] - 100.0) / 3.0)

    def test_zero_duration_changes_nothing(self) -> None:
        config = ArrivalConfig(overload=OverloadWindow(5.0, 0.0, 4.0))
        assert np.array_equal(arrivals(200, 2.0, config), arrivals(200, 2.0))

    def test_factor_below_one_is_a_lull(self) -> None:
        # Λ(t) = t up to 1 s, 1 + 0.5 (t - 1) in [1, 2), 1.5 + (t - 2) after.
        units = np.array([0.0, 1.0, 1.25, 2.0, 3.0])
        times = scale_arrivals(units, 1.0, OverloadWindow(1.0, 1.0, 0.5))
        assert times.tolist() == [0.0, 1.0, 1.5, 2.5, 3.5]


@st.composite
def arrival_configs(draw: st.DrawFn) -> ArrivalConfig:
    overload = None
    if draw(st.booleans()):
        overload = OverloadWindow(
            start=draw(st.floats(0.0, 1e4)),
            duration=draw(st.floats(0.0, 1e4)),
            factor=draw(st.floats(0.01, 100.0)),
        )
    if draw(st.booleans()):
        return ArrivalConfig("gamma", draw(st.floats(0.05, 10.0)), overload)
    return ArrivalConfig("poisson", 1.0, overload)


@given(
    n=st.integers(1, 500),
    rate=st.floats(1e-3, 1e4),
    config=arrival_configs(),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=200, deadline=None)
def test_arrivals_are_sorted_nonnegative_and_finite(
    n: int, rate: float, config: ArrivalConfig, seed: int
) -> None:
    times = arrivals(n, rate, config, seed)
    assert times.shape == (n,)
    assert times[0] == 0.0
    assert np.all(np.isfinite(times))
    assert np.all(np.diff(times) >= 0)


@given(config=arrival_configs(), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=50, deadline=None)
def test_unit_pattern_does_not_depend_on_the_rate(config: ArrivalConfig, seed: int) -> None:
    units = unit_arrivals(50, config, np.random.default_rng(seed))
    for rate in (0.1, 1.0, 20.0):
        times = arrival_times(50, rate, config, np.random.default_rng(seed))
        assert np.allclose(times, scale_arrivals(units, rate, config.overload))


class TestValidation:
    @pytest.mark.parametrize("rate", [0.0, -1.0, math.inf, math.nan])
    def test_bad_rate(self, rate: float) -> None:
        with pytest.raises(ValueError, match="arrival rate must be positive and finite"):
            arrivals(10, rate)

    @pytest.mark.parametrize("n", [0, -3, 2.5, True])
    def test_bad_count(self, n: int) -> None:
        with pytest.raises(ValueError, match="number of requests must be"):
            arrivals(n, 1.0)

    @pytest.mark.parametrize("burstiness", [0.0, -1.0, math.inf, math.nan])
    def test_bad_burstiness(self, burstiness: float) -> None:
        with pytest.raises(ValueError, match="burstiness must be positive and finite"):
            ArrivalConfig("gamma", burstiness)

    def test_poisson_has_no_burstiness_knob(self) -> None:
        with pytest.raises(ValueError, match="needs process 'gamma'"):
            ArrivalConfig("poisson", 2.0)

    def test_unknown_process(self) -> None:
        with pytest.raises(ValueError, match="'hawkes'; known: poisson, gamma"):
            ArrivalConfig("hawkes")  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("start", "duration", "factor", "words"),
        [
            (-1.0, 1.0, 2.0, "overload start must be nonnegative"),
            (0.0, -1.0, 2.0, "overload duration must be nonnegative"),
            (0.0, math.inf, 2.0, "overload duration must be nonnegative and finite"),
            (0.0, 1.0, 0.0, "overload factor must be positive"),
            (0.0, 1.0, math.nan, "overload factor must be positive"),
        ],
    )
    def test_bad_overload(self, start: float, duration: float, factor: float, words: str) -> None:
        with pytest.raises(ValueError, match=words):
            OverloadWindow(start, duration, factor)
