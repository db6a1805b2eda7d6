"""The load generator's summary, JSON and report, on hand-made records."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from factories import make_timeline

from slidingserve.bench import (
    BenchConfig,
    BenchResult,
    RequestRecord,
    format_summary,
    per_second,
    plot_bench,
    summarize,
    write_bench_json,
)
from slidingserve.metrics import Outcome, measure, measure_tiers
from slidingserve.workloads import WorkloadConfig


def make_record(
    times: Sequence[float],
    *,
    scheduled: float = 0.0,
    tier: str | None = None,
    outcome: Outcome = Outcome.COMPLETED,
    max_tokens: int | None = None,
    error_kind: str | None = None,
    name: str = "r",
) -> RequestRecord:
    """A record of one-token chunks at `times` (SLO: TTFT 1 s, TBT 0.1 s)."""
    return RequestRecord(
        request_id=name,
        timeline=make_timeline(times, arrival=scheduled, tier=tier, outcome=outcome),
        finished=times[-1] if times else scheduled + 1.0,
        prompt_tokens=10,
        max_tokens=max_tokens if max_tokens is not None else max(1, len(times)),
        error_kind=error_kind,
        error_message=None if error_kind is None else f"{error_kind} happened",
    )


def sample_records() -> list[RequestRecord]:
    return [
        make_record([0.5, 0.6, 0.7], tier="gold", name="ok"),
        make_record([1.15, 1.18], scheduled=0.1, tier="gold", name="ttft"),
        make_record([0.1, 0.6, 0.65], tier="free", name="gappy"),
        make_record([0.5, 1.05, 1.21], tier="free", name="tbt"),
        make_record(
            [], outcome=Outcome.FAILED, error_kind="http_500", tier="free", max_tokens=2, name="x"
        ),
        make_record([0.3], outcome=Outcome.CANCELLED, tier="gold", max_tokens=4, name="c"),
    ]


class TestSummary:
    def test_the_metrics_of_every_sent_request_and_what_was_not_sent(self) -> None:
        records = sample_records()
        summary = summarize(records, planned=8, duration=2.0)
        assert (summary.requests_planned, summary.requests_sent, summary.not_sent) == (8, 6, 2)
        timelines = [record.timeline for record in records]
        assert summary.metrics == measure(timelines, 2.0)
        assert summary.tiers == measure_tiers(timelines, 2.0)
        assert summary.metrics.cumulative.overall == pytest.approx(3 / 5)  # ttft, tbt, x

    def test_json_keeps_the_bench_file_layout_in_milliseconds(self) -> None:
        summary = summarize(sample_records(), planned=8, duration=2.0)
        data = summary.to_dict()
        assert list(data) == [
            "requests_planned", "requests_sent", "completed", "failed", "cancelled",
            "not_sent", "duration_s", "request_throughput", "output_throughput", "ttft_ms",
            "tpot_ms", "itl_ms", "e2e_ms", "violations", "violations_per_gap", "tiers",
            "goodput", "goodput_per_gap", "goodput_vllm", "interrupted",
        ]  # fmt: skip
        assert (data["completed"], data["failed"], data["cancelled"]) == (4, 1, 1)
        assert data["ttft_ms"]["mean"] == pytest.approx(1000 * (0.5 + 1.05 + 0.1 + 0.5) / 4)
        assert data["itl_ms"]["p50"] == pytest.approx(100.0)
        assert data["violations_per_gap"]["overall"] == pytest.approx(4 / 5)
        assert [tier["name"] for tier in data["tiers"]] == ["free", "gold"]
        assert data["tiers"][0]["per_gap"]["overall"] == pytest.approx(1.0)
        assert data["tiers"][1]["cumulative"]["judged"] == 2

    def test_nothing_judged_gives_nan_not_an_error(self) -> None:
        stopped = make_record([0.3], outcome=Outcome.CANCELLED, max_tokens=4)
        summary = summarize([stopped], planned=3, duration=0.5, interrupted=True)
        assert summary.metrics.cumulative.judged == 0
        assert math.isnan(summary.metrics.cumulative.overall)
        assert math.isnan(summary.to_dict()["ttft_ms"]["p99"])
        assert summary.metrics.goodput == 0.0 and summary.interrupted


def make_result(records: list[RequestRecord], duration: float = 2.0) -> BenchResult:
    config = BenchConfig("http://127.0.0.1:1", WorkloadConfig("sharegpt", 8), rate=2.0)
    summary = summarize(records, planned=8, duration=duration)
    return BenchResult(config, "fake", 512, "2026-11-29T00:00:00+00:00", summary, tuple(records))


class TestReport:
    def test_errors_by_kind_with_their_message(self) -> None:
        records = [
            *sample_records(),
            make_record([], outcome=Outcome.FAILED, error_kind="http_500", max_tokens=1),
            make_record([], outcome=Outcome.FAILED, error_kind="timeout", max_tokens=1),
        ]
        result = make_result(records)
        assert result.errors == {"http_500": 2, "timeout": 1}
        assert result.error_messages["timeout"] == "timeout happened"

    def test_json_is_strict_and_complete(self, tmp_path: Path) -> None:
        stopped = make_record([0.3], outcome=Outcome.CANCELLED, max_tokens=4)
        result = make_result([stopped])
        path = write_bench_json(result, tmp_path / "out" / "bench.json")
        payload = json.loads(path.read_text())  # strict: NaN became null
        assert payload["summary"]["ttft_ms"]["p50"] is None
        assert payload["summary"]["cancelled"] == 1
        assert payload["requests"][0]["outcome"] == "cancelled"
        assert payload["requests"][0]["chunk_times_s"] == [0.3]
        assert payload["config"]["workload"]["name"] == "sharegpt"

    def test_counts_per_second(self) -> None:
        line = per_second(make_result(sample_records()))
        assert line.tokens.tolist() == [8, 4]  # 8 before 1 s; 1.05, 1.15, 1.18, 1.21
        assert line.completed.tolist() == [2, 2]
        assert line.violating.tolist() == [0, 3]  # ttft, tbt, and x (finished at 1.0)
        assert line.failed.tolist() == [0, 1]

    def test_png_and_text_even_without_a_completed_request(self, tmp_path: Path) -> None:
        for name, records in (
            ("some", sample_records()),
            ("none", [make_record([], outcome=Outcome.FAILED, error_kind="connection")]),
        ):
            path = plot_bench(make_result(records), tmp_path / f"{name}.png")
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            text = format_summary(make_result(records))
            assert "SLO violations" in text and "TTFT" in text
