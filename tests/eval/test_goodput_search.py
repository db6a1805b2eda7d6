"""The goodput search on violation curves whose answer is known."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from slidingserve.eval.goodput import SearchSettings, search_goodput


def step_at(knee: float) -> Callable[[float], float]:
    """Violations 0 up to `knee` req/s, then over 2% and growing linearly."""

    def violation_at(rate: float) -> float:
        return 0.0 if rate <= knee else min(1.0, 0.02 + 0.05 * (rate - knee))

    return violation_at


@pytest.mark.parametrize("initial", [0.1, 3.0, 7.0, 50.0])
def test_finds_the_knee_to_two_percent_from_any_start(initial: float) -> None:
    estimate = search_goodput(step_at(7.3), initial)
    assert estimate.goodput <= 7.3
    assert estimate.goodput >= 7.3 / 1.02
    assert all(p.violation_rate <= 0.01 or p.rate > 7.3 for p in estimate.probes)


def test_interpolates_between_last_pass_and_first_fail() -> None:
    # Violation = rate / 100: the 1% crossing is at 1.0 exactly.
    estimate = search_goodput(lambda rate: rate / 100, 0.6, SearchSettings(precision=0.3))
    assert estimate.goodput <= 1.0
    assert estimate.interpolated == pytest.approx(1.0)


def test_unachievable_slos_give_zero() -> None:
    estimate = search_goodput(lambda rate: 0.5, 1.0, SearchSettings(min_rate=0.1))
    assert estimate.goodput == 0.0
    assert estimate.probes[-1].rate < 0.2


def test_never_failing_stops_at_the_maximum_rate() -> None:
    estimate = search_goodput(lambda rate: 0.0, 1.0, SearchSettings(max_rate=64.0))
    assert estimate.goodput == 64.0


def test_probe_count_is_logarithmic() -> None:
    estimate = search_goodput(step_at(5.0), 4.0)
    assert len(estimate.probes) <= 10


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"threshold": 1.5}, "threshold"), ({"precision": 0.0}, "precision")],
)
def test_bad_settings_are_rejected(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SearchSettings(**kwargs)


def test_bad_initial_rate_is_rejected() -> None:
    with pytest.raises(ValueError, match="initial rate"):
        search_goodput(lambda rate: 0.0, -1.0)
