"""Reading trace CSVs: real files, and every kind of malformed file with its line number."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from slidingserve.workloads import TRACE_FILES, LengthTable, TraceFormatError, read_trace

TRACE_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
needs_traces = pytest.mark.skipif(not TRACE_DIR.is_dir(), reason="shared trace data absent")

HEADER = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"


def write_csv(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


class TestReadTrace:
    def test_reads_required_columns_and_ignores_others(self, tmp_path: Path) -> None:
        path = write_csv(tmp_path, HEADER + "10,5,15,2.0\n7,1,8,7.0\n")
        table = read_trace(path)
        assert table.prompt.tolist() == [10, 7]
        assert table.output.tolist() == [5, 1]
        assert table.prompt.dtype == np.int64 and table.output.dtype == np.int64
        assert len(table) == 2 and table.source == str(path)

    def test_column_order_and_minimal_columns(self, tmp_path: Path) -> None:
        path = write_csv(tmp_path, "num_decode_tokens,num_prefill_tokens\n3,40\n\n")
        table = read_trace(path)
        assert (table.prompt.tolist(), table.output.tolist()) == ([40], [3])

    def test_arrays_are_read_only(self, tmp_path: Path) -> None:
        table = read_trace(write_csv(tmp_path, HEADER + "10,5,15,2.0\n"))
        with pytest.raises(ValueError):
            table.prompt[0] = 3

    @pytest.mark.parametrize(
        ("text", "line", "words"),
        [
            ("", 1, "empty file"),
            (HEADER, 2, "no rows"),
            (
                "num_prefill_tokens,num_total_tokens\n5,6\n",
                1,
                "missing column(s) num_decode_tokens",
            ),
            (HEADER + "10,5,15,2.0\n12,x,3,1.0\n", 3, "num_decode_tokens is 'x', not an integer"),
            (
                HEADER + "10,5,15,2.0\n1.5,2,3,1.0\n",
                3,
                "num_prefill_tokens is '1.5', not an integer",
            ),
            (
                HEADER + "10,5,15,2.0\n\n0,2,2,0.0\n",
                4,
                "num_prefill_tokens is 0, must be a positive",
            ),
            (HEADER + "10,-1,9,2.0\n", 2, "num_decode_tokens is -1, must be a positive"),
            (HEADER + "10,5,15,2.0\n10,5,15\n", 3, "expected 4 fields as in the header, got 3"),
            (HEADER + "10,5,15,2.0,9\n", 2, "expected 4 fields as in the header, got 5"),
        ],
        ids=[
            "empty",
            "header-only",
            "missing-column",
            "letters",
            "decimal",
            "zero-after-blank-line",
            "negative",
            "too-few-fields",
            "too-many-fields",
        ],
    )
    def test_malformed_file_names_file_and_line(
        self, tmp_path: Path, text: str, line: int, words: str
    ) -> None:
        path = write_csv(tmp_path, text, "bad.csv")
        with pytest.raises(TraceFormatError) as info:
            read_trace(path)
        message = str(info.value)
        assert str(path) in message
        assert f"line {line}:" in message
        assert words in message

    def test_format_error_is_a_value_error(self) -> None:
        assert issubclass(TraceFormatError, ValueError)


class TestLengthTable:
    def test_rejects_mismatched_or_nonpositive_lengths(self) -> None:
        with pytest.raises(ValueError, match="one length"):
            LengthTable(np.array([1, 2], dtype=np.int64), np.array([1], dtype=np.int64))
        with pytest.raises(ValueError, match="at least 1"):
            LengthTable(np.array([1, 0], dtype=np.int64), np.array([1, 1], dtype=np.int64))
        with pytest.raises(ValueError, match="int64"):
            LengthTable(np.array([1.0]), np.array([1.0]))

    def test_does_not_freeze_the_callers_array(self) -> None:
        prompt = np.array([3, 4], dtype=np.int64)
        LengthTable(prompt, np.array([1, 1], dtype=np.int64))
        prompt[0] = 5  # still writable
        assert prompt[0] == 5


@needs_traces
@pytest.mark.parametrize(
    ("source", "rows", "prompt_mean", "output_mean", "prompt_max", "output_max"),
    [
        ("sharegpt", 30_731, 2340, 439, 8141, 1024),
        ("arxiv", 28_257, 2588, 291, 4054, 4056),
    ],
)
def test_real_traces_match_data_readme(
    source: str, rows: int, prompt_mean: int, output_mean: int, prompt_max: int, output_max: int
) -> None:
    table = read_trace(TRACE_DIR / TRACE_FILES[source])
    assert len(table) == rows
    assert round(float(table.prompt.mean())) == prompt_mean
    assert round(float(table.output.mean())) == output_mean
    assert (int(table.prompt.max()), int(table.output.max())) == (prompt_max, output_max)
