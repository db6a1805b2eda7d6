"""Records, verdicts, summary and report of the load generator, on hand-made records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from slidingserve.bench import (
    BenchConfig,
    BenchResult,
    Outcome,
    RequestRecord,
    format_summary,
    plot_bench,
    summarize,
    timeline,
    verdict,
    write_bench_json,
)
from slidingserve.core import SLO, Request
from slidingserve.sim.metrics import TbtReading, compute_metrics
from slidingserve.workloads import WorkloadConfig


def make_record(
    times: list[float],
    *,
    scheduled: float = 0.0,
    sent: float | None = None,
    ttft: float = 1.0,
    tbt: float = 0.1,
    tier: str | None = None,
    outcome: Outcome = Outcome.COMPLETED,
    tokens: list[int] | None = None,
    usage: int | None = None,
    max_tokens: int | None = None,
    error_kind: str | None = None,
    name: str = "r",
) -> RequestRecord:
    chunk_tokens = tokens if tokens is not None else [1] * len(times)
    return RequestRecord(
        request_id=name,
        scheduled=scheduled,
        sent=scheduled if sent is None else sent,
        finished=times[-1] if times else scheduled + 1.0,
        prompt_tokens=10,
        max_tokens=max_tokens if max_tokens is not None else max(1, sum(chunk_tokens)),
        slo=SLO(ttft, tbt, tier=tier),
        outcome=outcome,
        chunk_times=tuple(times),
        chunk_tokens=tuple(chunk_tokens),
        usage_tokens=usage,
        error_kind=error_kind,
        error_message=None if error_kind is None else f"{error_kind} happened",
    )


class TestRecord:
    def test_latencies_follow_vllm(self) -> None:
        # Sent at 1.1, first token at 1.6: TTFT 0.5; e2e 2.0 − 1.1 = 0.9;
        # TPOT (0.9 − 0.5) / 2 = 0.2; gaps 0.1 and 0.3.
        record = make_record([1.6, 1.7, 2.0], scheduled=1.0, sent=1.1)
        assert record.ttft == pytest.approx(0.5)
        assert record.e2e == pytest.approx(0.9)
        assert record.tpot == pytest.approx(0.2)
        assert record.itl == pytest.approx((0.1, 0.3))

    def test_tpot_uses_the_usage_count(self) -> None:
        # Two chunks, four tokens (a merged chunk): TPOT = 0.3 / 3.
        record = make_record([1.0, 1.3], tokens=[1, 3])
        assert record.output_tokens == 4
        assert record.tpot == pytest.approx(0.1)
        assert record.token_times == (1.0, 1.3, 1.3, 1.3)

    def test_usage_beyond_the_chunks_arrives_by_the_last_chunk(self) -> None:
        record = make_record([1.0, 1.2], usage=4)
        assert record.token_times == (1.0, 1.2, 1.2, 1.2)

    def test_usage_below_the_chunks_keeps_the_last_arrival(self) -> None:
        record = make_record([1.0, 1.2, 1.5], usage=2)
        assert record.token_times == (1.0, 1.5)

    def test_no_token_no_latency(self) -> None:
        record = make_record([], outcome=Outcome.FAILED, error_kind="http_400")
        assert record.ttft is None and record.e2e is None and record.tpot is None
        assert record.itl == ()


class TestVerdict:
    def test_deadlines_count_from_the_scheduled_send(self) -> None:
        # Scheduled at 1.0 but sent at 1.2; TTFT SLO 0.5. First token at 1.6: vLLM's TTFT
        # 0.4 is within the SLO, but the deadline 1.0 + 0.5 = 1.5 was missed.
        record = make_record([1.6], scheduled=1.0, sent=1.2, ttft=0.5)
        assert record.ttft == pytest.approx(0.4)
        assert verdict(record) == (True, False, False)

    def test_cumulative_banks_slack_per_gap_does_not(self) -> None:
        # Deadlines 1.0, 1.1, 1.2; tokens at 0.1, 0.6, 0.65: in time cumulatively, but a
        # 0.5 s gap is over the 0.1 s TBT.
        result = verdict(make_record([0.1, 0.6, 0.65], ttft=1.0, tbt=0.1))
        assert result is not None
        assert not result.cumulative
        assert result.per_gap and result.tbt_per_gap and not result.ttft

    def test_late_later_token(self) -> None:
        result = verdict(make_record([0.5, 1.05, 1.21], ttft=1.0, tbt=0.1))
        assert result == (False, True, True)

    def test_failed_requests_violate_cancelled_are_not_judged(self) -> None:
        no_token = make_record([], outcome=Outcome.FAILED, error_kind="connection", max_tokens=3)
        cut = make_record([0.1], outcome=Outcome.FAILED, error_kind="dropped", max_tokens=3)
        stopped = make_record([0.1], outcome=Outcome.CANCELLED, max_tokens=3)
        assert verdict(no_token) == (True, False, False)
        assert verdict(cut) == (False, True, True)
        assert verdict(stopped) is None


def sample_records() -> list[RequestRecord]:
    return [
        make_record([0.5, 0.6, 0.7], ttft=1.0, tbt=0.1, tier="gold", name="ok"),
        make_record([1.15, 1.18], scheduled=0.1, ttft=1.0, tbt=0.1, tier="gold", name="ttft"),
        make_record([0.1, 0.6, 0.65], ttft=1.0, tbt=0.1, tier="free", name="gappy"),
        make_record([0.5, 1.05, 1.21], ttft=1.0, tbt=0.1, tier="free", name="tbt"),
        make_record(
            [], outcome=Outcome.FAILED, error_kind="http_500", tier="free", max_tokens=2, name="x"
        ),
        make_record([0.3], outcome=Outcome.CANCELLED, tier="gold", max_tokens=4, name="c"),
    ]


class TestSummary:
    def test_counts_rates_and_goodput(self) -> None:
        summary = summarize(sample_records(), planned=8, duration=2.0)
        assert (summary.requests_sent, summary.completed, summary.failed) == (6, 4, 1)
        assert (summary.cancelled, summary.not_sent) == (1, 2)
        # judged: ok, ttft, gappy, tbt, x. Cumulative: ttft, tbt, x violate.
        assert summary.violations.judged == 5
        assert summary.violations.overall == pytest.approx(3 / 5)
        assert summary.violations.ttft == pytest.approx(2 / 5)  # ttft, x
        assert summary.violations.tbt == pytest.approx(1 / 5)  # tbt
        assert summary.violations_per_gap.overall == pytest.approx(4 / 5)  # + gappy
        assert summary.goodput == pytest.approx(2 / 2.0)  # ok, gappy
        assert summary.goodput_per_gap == pytest.approx(1 / 2.0)  # ok
        # vLLM's: TTFT ≤ 1.0 and TPOT ≤ 0.1. ok (0.5, 0.1), ttft (1.05: no), gappy (TPOT
        # 0.275: no), tbt (TPOT 0.355: no).
        assert summary.goodput_vllm == pytest.approx(1 / 2.0)
        assert summary.request_throughput == pytest.approx(4 / 2.0)
        assert summary.output_throughput == pytest.approx((3 + 2 + 3 + 3) / 2.0)

    def test_latencies_in_milliseconds_of_completed_requests(self) -> None:
        summary = summarize(sample_records(), planned=6, duration=2.0)
        assert summary.ttft_ms.mean == pytest.approx(1000 * (0.5 + 1.05 + 0.1 + 0.5) / 4)
        assert summary.itl_ms.p50 == pytest.approx(100.0)  # 7 gaps: .1 .1 .03 .5 .05 .55 .16
        assert summary.e2e_ms.p50 == pytest.approx(1000 * (0.7 + 1.08) / 2)  # .65 .7 1.08 1.21

    def test_tiers(self) -> None:
        tiers = {t.name: t for t in summarize(sample_records(), planned=6, duration=2.0).tiers}
        assert set(tiers) == {"free", "gold"}
        assert tiers["gold"].cumulative.judged == 2
        assert tiers["gold"].cumulative.overall == pytest.approx(0.5)
        assert tiers["free"].cumulative.overall == pytest.approx(2 / 3)
        assert tiers["free"].per_gap.overall == pytest.approx(1.0)

    def test_agrees_with_the_simulator_metrics(self) -> None:
        records = [r for r in sample_records() if r.outcome is Outcome.COMPLETED]
        requests = []
        for record in records:
            request = Request(
                record.request_id, record.scheduled, 10, record.output_tokens, record.slo
            )
            request.token_times = list(record.token_times)
            requests.append(request)
        summary = summarize(records, planned=len(records), duration=2.0)
        for reading, rates in (
            (TbtReading.CUMULATIVE, summary.violations),
            (TbtReading.PER_GAP, summary.violations_per_gap),
        ):
            simulated = compute_metrics(requests, reading)
            assert rates.overall == pytest.approx(simulated.violation_rate)
            assert rates.ttft == pytest.approx(simulated.ttft_violation_rate)
            assert rates.tbt == pytest.approx(simulated.tbt_violation_rate)

    def test_nothing_judged_gives_nan_not_an_error(self) -> None:
        stopped = make_record([0.3], outcome=Outcome.CANCELLED, max_tokens=4)
        summary = summarize([stopped], planned=3, duration=0.5, interrupted=True)
        assert summary.violations.judged == 0 and math.isnan(summary.violations.overall)
        assert math.isnan(summary.ttft_ms.p99)
        assert summary.goodput == 0.0 and summary.interrupted


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

    def test_timeline_bins_by_second(self) -> None:
        line = timeline(make_result(sample_records()))
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
