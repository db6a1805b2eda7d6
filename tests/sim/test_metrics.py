"""Metrics on hand-made token times."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from factories import make_request

from slidingserve.core import Request
from slidingserve.reporting import write_json
from slidingserve.sim.metrics import TbtReading, compute_metrics


def finished(request_id: str, arrival: float, times: list[float], **slo: float) -> Request:
    request = make_request(request_id, arrival=arrival, output=len(times), **slo)  # type: ignore[arg-type]
    request.token_times = times
    return request


def test_latencies_follow_vllm_definitions() -> None:
    # a: TTFT 0.5, gaps 0.1 and 0.3, TPOT (0.9 − 0.5)/2 = 0.2. b: one token, TTFT 0.2.
    a = finished("a", 0.0, [0.5, 0.6, 0.9])
    b = finished("b", 1.0, [1.2])
    metrics = compute_metrics([a, b])
    assert metrics.ttft.mean == pytest.approx(0.35)
    assert metrics.tbt.p50 == pytest.approx(0.2)
    assert metrics.tbt.mean == pytest.approx(0.2)
    assert metrics.tpot.mean == pytest.approx(0.2)  # only a has a TPOT
    assert metrics.e2e.p50 == pytest.approx((0.9 + 0.2) / 2)
    assert metrics.duration == pytest.approx(1.2)
    assert metrics.output_throughput == pytest.approx(4 / 1.2)


def test_cumulative_reading_lets_early_tokens_bank_slack() -> None:
    # Deadlines 1.0, 1.1, 1.2. The first token at 0.1 banks slack; a 0.5 s pause then a
    # token at 0.6 is still before 1.1: no violation cumulatively, one per gap.
    request = finished("a", 0.0, [0.1, 0.6, 0.65], ttft=1.0, tbt=0.1)
    cumulative = compute_metrics([request])
    per_gap = compute_metrics([request], TbtReading.PER_GAP)
    assert cumulative.violation_rate == 0.0
    assert per_gap.tbt_violation_rate == 1.0
    assert per_gap.ttft_violation_rate == 0.0
    assert per_gap.tbt_reading == "per-gap"
    for reading in (cumulative, per_gap):  # both readings whatever the one asked for
        assert reading.cumulative_violation_rate == 0.0
        assert reading.per_gap_violation_rate == 1.0


def test_both_readings_count_a_late_first_token() -> None:
    # Late first token (1.2 > 1.0), then gaps of 0.05 under the 0.1 TBT: late in both
    # readings by its first token alone; the second request is late only per gap.
    late_first = finished("a", 0.0, [1.2, 1.25, 1.3], ttft=1.0, tbt=0.1)
    stall = finished("b", 0.0, [0.2, 0.25, 0.5], ttft=1.0, tbt=0.1)  # gap 0.25 > 0.1
    metrics = compute_metrics([late_first, stall])
    assert metrics.cumulative_violation_rate == pytest.approx(0.5)
    assert metrics.per_gap_violation_rate == pytest.approx(1.0)


def test_violations_are_counted_per_request_and_by_kind() -> None:
    ok = finished("ok", 0.0, [0.9, 1.0, 1.1], ttft=1.0, tbt=0.1)
    late_first = finished("ttft", 0.0, [1.01, 1.05], ttft=1.0, tbt=0.1)
    late_third = finished("tbt", 0.0, [0.5, 1.05, 1.21], ttft=1.0, tbt=0.1)
    on_deadline = finished("edge", 0.0, [1.0], ttft=1.0, tbt=0.1)
    metrics = compute_metrics([ok, late_first, late_third, on_deadline])
    assert metrics.ttft_violation_rate == pytest.approx(0.25)
    assert metrics.tbt_violation_rate == pytest.approx(0.25)
    assert metrics.violation_rate == pytest.approx(0.5)


def test_percentiles_of_many_gaps() -> None:
    # Gaps 1, 2, ..., 100 ms: linear interpolation puts p50 at 50.5 ms and p99 at 99.01 ms.
    times = list(0.5 + np.cumsum(np.concatenate(([0.0], np.arange(1, 101) / 1000))))
    metrics = compute_metrics([finished("a", 0.0, times, ttft=1.0, tbt=1.0)])
    assert metrics.tbt.p50 == pytest.approx(0.0505)
    assert metrics.tbt.p90 == pytest.approx(0.0901)
    assert metrics.tbt.p99 == pytest.approx(0.09901)


def test_one_token_outputs_have_no_tbt_and_write_strict_json(tmp_path: Path) -> None:
    metrics = compute_metrics([finished("a", 0.0, [0.2])])
    assert math.isnan(metrics.tbt.p50) and math.isnan(metrics.tpot.p50)
    path = tmp_path / "m.json"
    write_json(path, metrics.to_dict())
    assert json.loads(path.read_text())["tbt"]["p50"] is None


def test_unfinished_request_is_an_error() -> None:
    with pytest.raises(ValueError, match="emitted no token"):
        compute_metrics([make_request("x")])
