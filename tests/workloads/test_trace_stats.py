"""Trace statistics on tiny hand-made traces whose figures are computed by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from slidingserve.workloads.trace_files import read_trace_file
from slidingserve.workloads.trace_stats import ArrivalStats, TraceStats, cv, trace_stats


def vidur_csv(tmp_path: Path, times: list[float], prompts: list[int] | None = None) -> Path:
    """A Vidur-style CSV: `arrived_at` seconds, prompt lengths (default 10 each), output 1."""
    prompts = prompts or [10] * len(times)
    rows = "".join(f"{t},{p},1\n" for t, p in zip(times, prompts, strict=True))
    path = tmp_path / "trace.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + rows, encoding="utf-8")
    return path


def stats_of(path: Path) -> TraceStats:
    return trace_stats(read_trace_file(path))


def arrivals_of(tmp_path: Path, times: list[float]) -> ArrivalStats:
    stats = stats_of(vidur_csv(tmp_path, times))
    assert stats.arrivals is not None
    return stats.arrivals


class TestCv:
    @pytest.mark.parametrize(
        ("values", "expected"),
        [([1.0, 3.0], 0.5), ([2.0, 2.0, 2.0], 0.0), ([0.0, 0.0, 3.0], math.sqrt(2))],
    )
    def test_population_std_over_mean(self, values: list[float], expected: float) -> None:
        assert cv(values) == pytest.approx(expected)

    @pytest.mark.parametrize("values", [[], [0.0, 0.0]])
    def test_undefined_without_values_or_with_a_zero_mean(self, values: list[float]) -> None:
        assert cv(values) is None


class TestArrivals:
    def test_evenly_spaced_arrivals_have_no_variation(self, tmp_path: Path) -> None:
        arrivals = arrivals_of(tmp_path, [10.0, 11.0, 12.0, 13.0])  # read from the first row
        assert arrivals.duration == 3.0
        assert arrivals.mean_rate == pytest.approx(1.0)  # (4 − 1) ÷ 3 s
        assert arrivals.gap_cv == 0.0
        assert arrivals.second_count_cv == 0.0  # seconds 0..3 hold one each
        assert (arrivals.busiest_second, arrivals.busiest_minute) == (1, 4)
        assert arrivals.minutes_with_gap_cv == 1
        assert arrivals.minute_gap_cv_median == arrivals.minute_gap_cv_max == 0.0

    def test_ties_and_an_empty_second(self, tmp_path: Path) -> None:
        arrivals = arrivals_of(tmp_path, [0.0, 0.0, 0.0, 2.5])
        # per second: [3, 0, 1], mean 4/3, std √14 / 3; gaps: [0, 0, 2.5], CV √2
        assert arrivals.second_count_cv == pytest.approx(math.sqrt(14) / 4)
        assert arrivals.gap_cv == pytest.approx(math.sqrt(2))
        assert arrivals.busiest_second == 3
        assert arrivals.mean_rate == pytest.approx(3 / 2.5)

    def test_per_minute_gap_cv_keeps_minutes_with_three_arrivals_and_some_gap(
        self, tmp_path: Path
    ) -> None:
        times = [
            *(0.0, 10.0, 20.0, 30.0),  # minute 0: gaps 10, 10, 10 → CV 0
            *(60.0, 61.0, 63.0),  # minute 1: gaps 1, 2 → CV 0.5 / 1.5 = 1/3
            *(130.0, 131.0),  # minute 2: two arrivals, left out
            *(180.0, 180.0, 180.0),  # minute 3: gaps 0, 0, left out
        ]
        arrivals = arrivals_of(tmp_path, times)
        assert arrivals.minutes_with_gap_cv == 2
        assert arrivals.minute_gap_cv_median == pytest.approx(1 / 6)
        assert arrivals.minute_gap_cv_max == pytest.approx(1 / 3)
        assert arrivals.busiest_minute == 4
        assert arrivals.busiest_second == 3  # the three at 180 s

    def test_a_gap_across_a_minute_edge_belongs_to_neither_minute(self, tmp_path: Path) -> None:
        # minute 0: 0, 1, 2 (gaps 1, 1: CV 0); minute 1: 60, 70, 80 (gaps 10, 10: CV 0).
        # Counted across the edge, minute 1's gaps would be 58, 10, 10 and its CV > 0.
        arrivals = arrivals_of(tmp_path, [0.0, 1.0, 2.0, 60.0, 70.0, 80.0])
        assert arrivals.minutes_with_gap_cv == 2
        assert arrivals.minute_gap_cv_max == pytest.approx(0.0)

    def test_one_row_or_only_ties_span_no_time(self, tmp_path: Path) -> None:
        for times in ([5.0], [5.0, 5.0, 5.0]):
            arrivals = arrivals_of(tmp_path, times)
            assert arrivals.duration == 0.0 and arrivals.mean_rate is None
            assert arrivals.gap_cv is None
            assert arrivals.second_count_cv == 0.0  # one second, all of them in it
            assert arrivals.busiest_second == len(times)
            assert arrivals.minutes_with_gap_cv == 0
            assert arrivals.minute_gap_cv_median is None and arrivals.minute_gap_cv_max is None

    def test_mooncake_json_lines_in_milliseconds(self, tmp_path: Path) -> None:
        path = tmp_path / "mooncake.jsonl"
        path.write_text(
            '{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [0]}\n'
            '{"timestamp": 0, "input_length": 300, "output_length": 7, "hash_ids": [1]}\n'
            '{"timestamp": 0, "input_length": 200, "output_length": 9, "hash_ids": [2]}\n'
            '{"timestamp": 1500, "input_length": 9000, "output_length": 3, "hash_ids": []}\n',
            encoding="utf-8",
        )
        stats = stats_of(path)
        assert stats.rows == 4
        assert stats.prompt.p50 == 250.0 and stats.prompt.max == 9000
        assert stats.output.mean == 6.0
        assert stats.prompt_share_over[8192] == 0.25
        arrivals = stats.arrivals
        assert arrivals is not None
        assert arrivals.duration == 1.5  # 1,500 ms
        assert arrivals.mean_rate == pytest.approx(2.0)
        assert arrivals.second_count_cv == pytest.approx(0.5)  # per second: [3, 1]
        assert arrivals.gap_cv == pytest.approx(math.sqrt(2))  # gaps: [0, 0, 1.5]


class TestLengths:
    def test_quantiles_interpolate_linearly(self, tmp_path: Path) -> None:
        path = tmp_path / "lengths.csv"
        rows = "".join(f"{p},{10 if p % 2 else 20}\n" for p in range(1, 102))
        path.write_text("num_prefill_tokens,num_decode_tokens\n" + rows, encoding="utf-8")
        stats = stats_of(path)
        assert stats.rows == 101 and stats.arrivals is None
        prompt = stats.prompt  # 1..101: the q-quantile is 1 + 100 q
        assert (prompt.mean, prompt.p50, prompt.p90, prompt.p99, prompt.max) == (
            51.0,
            51.0,
            91.0,
            100.0,
            101,
        )
        output = stats.output  # 51 tens then 50 twenties, sorted: the 51st value is 10
        assert output.p50 == 10.0 and output.p90 == 20.0 and output.max == 20
        assert output.mean == pytest.approx((51 * 10 + 50 * 20) / 101)

    def test_share_of_prompts_over_a_context_counts_only_longer_ones(self, tmp_path: Path) -> None:
        path = vidur_csv(tmp_path, [0, 1, 2, 3, 4], prompts=[4096, 4097, 8192, 8193, 40000])
        assert stats_of(path).prompt_share_over == {4096: 0.8, 8192: 0.4, 32768: 0.2}
