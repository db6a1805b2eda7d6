"""Trace files in Vidur's CSV and Mooncake's JSON-lines layouts, and their defects."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from slidingserve.workloads import TraceColumns, TraceFormatError, read_trace_file

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_vidur_csv_with_arrival_seconds(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "vidur.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens\n10.5,100,7\n11.0,20,3\n11.0,5,1\n",
    )
    trace = read_trace_file(path)
    assert trace.lengths.prompt.tolist() == [100, 20, 5]
    assert trace.lengths.output.tolist() == [7, 3, 1]
    assert trace.arrivals is not None
    assert trace.arrivals.tolist() == [0.0, 0.5, 0.5]  # from the first row; ties kept
    assert trace.duration == 0.5 and trace.mean_rate == pytest.approx(4.0)


def test_mooncake_json_lines_with_milliseconds(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "mooncake.jsonl",
        '{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}\n'
        "\n"
        '{"timestamp": 3000, "input_length": 12, "output_length": 4, "hash_ids": []}\n',
    )
    trace = read_trace_file(path)
    assert trace.lengths.prompt.tolist() == [6758, 12]
    assert trace.arrivals is not None and trace.arrivals.tolist() == [0.0, 3.0]


def test_length_only_csv_has_no_arrivals(tmp_path: Path) -> None:
    path = write(tmp_path, "lengths.csv", "num_prefill_tokens,num_decode_tokens\n3,4\n")
    trace = read_trace_file(path)
    assert trace.arrivals is None and len(trace) == 1
    with pytest.raises(ValueError, match="no rate"):
        _ = trace.mean_rate


def test_columns_by_name(tmp_path: Path) -> None:
    path = write(tmp_path, "own.csv", "t_ms,in,out\n100,5,6\n350,7,8\n")
    columns = TraceColumns.parse("prompt=in,output=out,time=t_ms,time_unit=ms")
    trace = read_trace_file(path, columns)
    assert trace.lengths.prompt.tolist() == [5, 7]
    assert trace.arrivals is not None
    assert trace.arrivals == pytest.approx([0.0, 0.25])


def test_window_restarts_the_clock(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "w.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n2,2,2\n5,3,3\n9,4,4\n",
    )
    window = read_trace_file(path).window(1, 2)
    assert window.lengths.prompt.tolist() == [2, 3]
    assert window.arrivals is not None and window.arrivals.tolist() == [0.0, 3.0]
    with pytest.raises(ValueError, match="3 requests from row 2 need 5 rows; the trace has 4"):
        read_trace_file(path).window(2, 3)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("e.csv", "", r"e\.csv, line 1: empty file"),
        ("h.csv", "a,b\n1,2\n", r"h\.csv, line 1: no prompt column .*it has a, b"),
        (
            "u.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n5,1,1\n4,1,1\n",
            r"u\.csv, line 3: arrived_at 4 is before the previous row's 5; .*sorted",
        ),
        (
            "n.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n-1,1,1\n",
            r"n\.csv, line 2: arrived_at is '-1'; arrival times must be finite and not negative",
        ),
        (
            "z.csv",
            "num_prefill_tokens,num_decode_tokens\n0,1\n",
            r"z\.csv, line 2: num_prefill_tokens is 0, must be a positive token count",
        ),
        (
            "f.csv",
            "num_prefill_tokens,num_decode_tokens\n1.5,1\n",
            r"f\.csv, line 2: num_prefill_tokens is '1\.5', not an integer",
        ),
        (
            "r.csv",
            "num_prefill_tokens,num_decode_tokens\n1,1,1\n",
            r"r\.csv, line 2: expected 2 fields as in the header, got 3",
        ),
        (
            "j.jsonl",
            '{"input_length": 1, "output_length": 1}\n{oops\n',
            r"j\.jsonl, line 2: not JSON",
        ),
        ("a.jsonl", "[1, 2]\n", r"a\.jsonl, line 1: expected a JSON object"),
        (
            "m.jsonl",
            '{"input_length": 1, "output_length": 1}\n{"input_length": 2}\n',
            r"m\.jsonl, line 2: output_length is missing",
        ),
    ],
)
def test_defects_name_file_and_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(TraceFormatError, match=message) as raised:
        read_trace_file(path)
    assert "\n" not in str(raised.value)


def test_unknown_column_and_bad_columns_text(tmp_path: Path) -> None:
    path = write(tmp_path, "c.csv", "num_prefill_tokens,num_decode_tokens\n1,1\n")
    with pytest.raises(TraceFormatError, match="no time column 'when'"):
        read_trace_file(path, TraceColumns(time="when"))
    with pytest.raises(ValueError, match="trace columns are prompt=COL"):
        TraceColumns.parse("length=5")
    with pytest.raises(ValueError, match="time_unit must be s or ms"):
        TraceColumns(time_unit="h")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="cannot read"):
        read_trace_file(tmp_path / "absent.csv")


def test_the_shared_mooncake_trace() -> None:
    path = SHARED / "mooncake_conversation_trace.jsonl"
    if not path.exists():
        pytest.skip(f"trace absent: {path}")
    trace = read_trace_file(path)
    assert len(trace) == 12_031
    assert trace.mean_rate == pytest.approx(3.4, abs=0.05)  # data/README: 3.4 req/s
    assert int(np.median(trace.lengths.prompt)) == 6_909


def hash_id_rows(*rows: tuple[int, int, object]) -> str:
    """JSON lines of (prompt, output, hash_ids) a second apart."""
    return "".join(
        json.dumps({"timestamp": 1000 * k, "input_length": p, "output_length": o, "hash_ids": h})
        + "\n"
        for k, (p, o, h) in enumerate(rows)
    )


def test_hash_ids_are_read_and_windowed(tmp_path: Path) -> None:
    text = hash_id_rows((600, 1, [0, 1]), (10, 1, [0]), (1100, 2, [5, 6, 7]))
    trace = read_trace_file(write(tmp_path, "ids.jsonl", text))
    assert trace.hash_ids == ((0, 1), (0,), (5, 6, 7))
    window = trace.window(1, 2)
    assert window.hash_ids == ((0,), (5, 6, 7))
    assert window.arrivals is not None and window.arrivals.tolist() == [0.0, 1.0]


def test_a_trace_without_hash_ids_has_none(tmp_path: Path) -> None:
    path = write(tmp_path, "plain.csv", "num_prefill_tokens,num_decode_tokens\n3,4\n5,6\n")
    trace = read_trace_file(path)
    assert trace.hash_ids is None and trace.window(1, 1).hash_ids is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[1, -2]", "line 2: hash_ids holds -2; each must be a non-negative integer"),
        ('"1,2"', "line 2: hash_ids is '1,2', not a list of integers"),
        ("[1.5]", "line 2: hash_ids holds 1.5"),
        ("[true]", "line 2: hash_ids holds True"),
    ],
)
def test_malformed_hash_ids_name_the_file_line_and_value(
    tmp_path: Path, value: str, message: str
) -> None:
    text = (
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n'
        f'{{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": {value}}}\n'
    )
    path = write(tmp_path, "bad.jsonl", text)
    with pytest.raises(TraceFormatError, match=re.escape(f"{path}, {message}")):
        read_trace_file(path)


def test_hash_ids_missing_from_a_later_row(tmp_path: Path) -> None:
    text = (
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n'
        '{"timestamp": 1, "input_length": 5, "output_length": 1}\n'
    )
    path = write(tmp_path, "short.jsonl", text)
    with pytest.raises(TraceFormatError, match="line 2: hash_ids is missing"):
        read_trace_file(path)
