"""The figures of many timelines: latencies, violations under both readings, goodput, tiers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from factories import make_timeline

from slidingserve.metrics import (
    Outcome,
    Percentiles,
    TbtReading,
    Timeline,
    measure,
    measure_tiers,
    span,
)
from slidingserve.reporting import write_json


def test_latencies_follow_vllm_definitions() -> None:
    # a: TTFT 0.5, gaps 0.1 and 0.3, TPOT (0.9 − 0.5)/2 = 0.2. b: one token, TTFT 0.2.
    a = make_timeline([0.5, 0.6, 0.9])
    b = make_timeline([1.2], arrival=1.0)
    metrics = measure([a, b], span([a, b]))
    assert metrics.ttft.mean == pytest.approx(0.35)
    assert metrics.itl.p50 == pytest.approx(0.2)
    assert metrics.itl.mean == pytest.approx(0.2)
    assert metrics.tpot.mean == pytest.approx(0.2)  # only a has a TPOT
    assert metrics.e2e.p50 == pytest.approx((0.9 + 0.2) / 2)
    assert metrics.duration == pytest.approx(1.2)
    assert metrics.output_throughput == pytest.approx(4 / 1.2)


def test_span_runs_from_the_first_arrival_or_a_given_start() -> None:
    lines = [make_timeline([0.5, 0.9], arrival=0.3), make_timeline([1.6], arrival=1.0)]
    assert span(lines) == pytest.approx(1.3)
    assert span(lines, start=0.0) == pytest.approx(1.6)
    with pytest.raises(ValueError, match="no requests"):
        span([])


def test_cumulative_reading_lets_early_tokens_bank_slack() -> None:
    # Deadlines 1.0, 1.1, 1.2. The first token at 0.1 banks slack; a 0.5 s pause then a
    # token at 0.6 is still before 1.1: no violation cumulatively, one per gap.
    metrics = measure([make_timeline([0.1, 0.6, 0.65], ttft=1.0, tbt=0.1)], 1.0)
    assert metrics.cumulative.overall == 0.0
    assert metrics.per_gap.tbt == 1.0 and metrics.per_gap.ttft == 0.0
    assert metrics.violations(TbtReading.PER_GAP) is metrics.per_gap
    assert metrics.violations(TbtReading.CUMULATIVE) is metrics.cumulative


def test_both_readings_count_a_late_first_token() -> None:
    # Late first token (1.2 > 1.0), then gaps of 0.05 under the 0.1 TBT: late in both
    # readings by its first token alone; the second request is late only per gap.
    late_first = make_timeline([1.2, 1.25, 1.3], ttft=1.0, tbt=0.1)
    stall = make_timeline([0.2, 0.25, 0.5], ttft=1.0, tbt=0.1)  # gap 0.25 > 0.1
    metrics = measure([late_first, stall], 1.0)
    assert metrics.cumulative.overall == pytest.approx(0.5)
    assert metrics.per_gap.overall == pytest.approx(1.0)


def test_violations_are_counted_per_request_and_by_kind() -> None:
    ok = make_timeline([0.9, 1.0, 1.1], ttft=1.0, tbt=0.1)
    late_first = make_timeline([1.01, 1.05], ttft=1.0, tbt=0.1)
    late_third = make_timeline([0.5, 1.05, 1.21], ttft=1.0, tbt=0.1)
    on_deadline = make_timeline([1.0], ttft=1.0, tbt=0.1)
    metrics = measure([ok, late_first, late_third, on_deadline], 1.0)
    assert metrics.cumulative.ttft == pytest.approx(0.25)
    assert metrics.cumulative.tbt == pytest.approx(0.25)
    assert metrics.cumulative.overall == pytest.approx(0.5)


def test_percentiles_of_many_gaps() -> None:
    # Gaps 1, 2, ..., 100 ms: linear interpolation puts p50 at 50.5 ms and p99 at 99.01 ms.
    times = list(0.5 + np.cumsum(np.concatenate(([0.0], np.arange(1, 101) / 1000))))
    metrics = measure([make_timeline(times, ttft=1.0, tbt=1.0)], 1.0)
    assert metrics.itl.p50 == pytest.approx(0.0505)
    assert metrics.itl.p90 == pytest.approx(0.0901)
    assert metrics.itl.p99 == pytest.approx(0.09901)
    assert metrics.itl.in_ms()["p99"] == pytest.approx(99.01)


def test_one_token_outputs_have_no_itl_and_write_strict_json(tmp_path: Path) -> None:
    metrics = measure([make_timeline([0.2])], 1.0)
    assert math.isnan(metrics.itl.p50) and math.isnan(metrics.tpot.p50)
    path = tmp_path / "m.json"
    write_json(path, metrics)
    assert json.loads(path.read_text())["itl"]["p50"] is None


def sample() -> list[Timeline]:
    """ok, a late first token, a gap, a late third token, a failure, a cancellation."""
    return [
        make_timeline([0.5, 0.6, 0.7], tier="gold"),
        make_timeline([1.15, 1.18], arrival=0.1, tier="gold"),
        make_timeline([0.1, 0.6, 0.65], tier="free"),
        make_timeline([0.5, 1.05, 1.21], tier="free"),
        make_timeline([], outcome=Outcome.FAILED, tier="free"),
        make_timeline([0.3], outcome=Outcome.CANCELLED, tier="gold"),
    ]


class TestOutcomes:
    def test_counts_rates_and_goodput(self) -> None:
        metrics = measure(sample(), 2.0)
        assert (metrics.completed, metrics.failed, metrics.cancelled) == (4, 1, 1)
        assert metrics.requests == 6
        # judged: all but the cancelled one. Cumulative: late first, late third, failed.
        assert metrics.cumulative.judged == 5
        assert metrics.cumulative.overall == pytest.approx(3 / 5)
        assert metrics.cumulative.ttft == pytest.approx(2 / 5)  # late first, failed
        assert metrics.cumulative.tbt == pytest.approx(1 / 5)
        assert metrics.per_gap.overall == pytest.approx(4 / 5)  # + the gap
        assert metrics.goodput == pytest.approx(2 / 2.0)  # ok, gap
        assert metrics.goodput_per_gap == pytest.approx(1 / 2.0)  # ok
        # vLLM's: TTFT ≤ 1.0 and TPOT ≤ 0.1: only ok (late first: TTFT 1.05; gap: TPOT
        # 0.275; late third: TPOT 0.355).
        assert metrics.goodput_vllm == pytest.approx(1 / 2.0)
        assert metrics.request_throughput == pytest.approx(4 / 2.0)
        assert metrics.output_throughput == pytest.approx((3 + 2 + 3 + 3) / 2.0)

    def test_latencies_are_of_completed_requests(self) -> None:
        metrics = measure(sample(), 2.0)
        assert metrics.ttft.mean == pytest.approx((0.5 + 1.05 + 0.1 + 0.5) / 4)
        assert metrics.itl.p50 == pytest.approx(0.1)  # 7 gaps: .1 .1 .03 .5 .05 .55 .16
        assert metrics.e2e.p50 == pytest.approx((0.7 + 1.08) / 2)  # .65 .7 1.08 1.21

    def test_tiers_are_measured_over_the_same_duration(self) -> None:
        tiers = measure_tiers([*sample(), make_timeline([0.4])], 2.0)
        assert list(tiers) == ["free", "gold"]  # untiered left out, sorted by name
        assert tiers["gold"].cumulative.judged == 2
        assert tiers["gold"].cumulative.overall == pytest.approx(0.5)
        assert tiers["free"].cumulative.overall == pytest.approx(2 / 3)
        assert tiers["free"].per_gap.overall == pytest.approx(1.0)
        assert tiers["gold"].goodput == pytest.approx(1 / 2.0)

    def test_nothing_judged_gives_nan_not_an_error(self) -> None:
        metrics = measure([make_timeline([0.3], outcome=Outcome.CANCELLED)], 0.5)
        assert metrics.cumulative.judged == 0 and math.isnan(metrics.cumulative.overall)
        assert math.isnan(metrics.ttft.p99)
        assert metrics.goodput == 0.0
        assert math.isnan(measure([], 0.0).request_throughput)


def test_percentiles_of_nothing_are_nan() -> None:
    empty = Percentiles.of([])
    assert all(math.isnan(value) for value in (empty.mean, empty.p50, empty.p90, empty.p99))
