"""SLO presets per workload class and the scale knob."""

from __future__ import annotations

import math

import pytest

from slidingserve.core.request import SLO
from slidingserve.workloads import CONVERSATIONAL, SLO_PRESETS, SUMMARIZATION, slo_for


@pytest.mark.parametrize(
    ("workload_class", "preset", "ttft", "tbt"),
    [
        (CONVERSATIONAL, "strict", 2.0, 0.050),
        (SUMMARIZATION, "strict", 6.0, 0.050),
        (CONVERSATIONAL, "relaxed", 4.0, 0.100),
        (SUMMARIZATION, "relaxed", 12.0, 0.100),
    ],
)
def test_presets_follow_the_spec(workload_class: str, preset: str, ttft: float, tbt: float) -> None:
    assert slo_for(workload_class, preset) == SLO(ttft, tbt)


def test_strict_is_the_default_preset() -> None:
    assert slo_for(CONVERSATIONAL) == SLO(2.0, 0.050)


@pytest.mark.parametrize("scale", [0.5, 1.5, 3])
def test_scale_multiplies_both_targets(scale: float) -> None:
    slo = slo_for(SUMMARIZATION, "relaxed", scale)
    assert slo.ttft == pytest.approx(12.0 * scale)
    assert slo.tbt == pytest.approx(0.100 * scale)


def test_every_preset_covers_every_class() -> None:
    for by_class in SLO_PRESETS.values():
        assert set(by_class) == {CONVERSATIONAL, SUMMARIZATION}


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown SLO preset 'lax'; known: relaxed, strict"):
        slo_for(CONVERSATIONAL, "lax")


def test_unknown_class_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="'chat'; known: conversational, summarization"):
        slo_for("chat")


@pytest.mark.parametrize("scale", [0.0, -1.0, math.inf, math.nan])
def test_scale_must_be_positive_and_finite(scale: float) -> None:
    with pytest.raises(ValueError, match="SLO scale must be positive and finite"):
        slo_for(CONVERSATIONAL, "strict", scale)


def test_absurd_scale_is_caught_by_the_slo_itself() -> None:
    with pytest.raises(ValueError, match="milliseconds"):
        slo_for(CONVERSATIONAL, "strict", 2000.0)  # a 4000 s TTFT
