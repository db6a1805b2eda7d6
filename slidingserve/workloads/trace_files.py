"""Trace files as their publishers write them: lengths and, where recorded, arrival times.

Two layouts are read as they are, told apart by the file's extension and first line:

- CSV with a header (Vidur's processed traces, the ShareGPT and arXiv length files):
  `num_prefill_tokens`, `num_decode_tokens` and, when recorded, `arrived_at` (seconds);
- JSON lines (Mooncake's traces): one object a line with `input_length`, `output_length`,
  `timestamp` (milliseconds) and, when recorded, `hash_ids`: a list of non-negative integers,
  one per block of `TRACE_BLOCK_SIZE` prompt tokens, equal where two prompts hold the same
  tokens up to the end of that block (what a prefix cache could reuse).

Other column names are given with `TraceColumns` (`prompt=...,output=...,time=...,
time_unit=s|ms`). Arrival times are returned in seconds from the first row; they must be
non-negative and sorted (ties allowed), and any defect raises `TraceFormatError` naming the
file, the line and what is wrong.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from slidingserve.workloads.traces import LengthTable, TraceFormatError

PROMPT_NAMES = ("num_prefill_tokens", "input_length", "prompt_len", "prompt_tokens")
OUTPUT_NAMES = ("num_decode_tokens", "output_length", "output_len", "completion_tokens")
TIME_NAMES = {"arrived_at": "s", "timestamp": "ms", "arrival_time": "s"}
TIME_UNITS = {"s": 1.0, "ms": 1e-3}
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
HASH_IDS = "hash_ids"
TRACE_BLOCK_SIZE = 512
"""Tokens of prompt that one of a trace's `hash_ids` stands for (the published Mooncake
traces' block size)."""

HashIds = tuple[tuple[int, ...], ...]
"""Each row's `hash_ids`, in file order."""


@dataclass(frozen=True, slots=True)
class TraceColumns:
    """Which columns hold what; None: the first known name present (module docstring)."""

    prompt: str | None = None
    output: str | None = None
    time: str | None = None
    time_unit: str | None = None  # "s" or "ms"; None: by the time column's known name, else s

    def __post_init__(self) -> None:
        if self.time_unit is not None and self.time_unit not in TIME_UNITS:
            raise ValueError(f"time_unit must be s or ms, got {self.time_unit!r}")

    @classmethod
    def parse(cls, text: str) -> TraceColumns:
        """`prompt=COL,output=COL,time=COL,time_unit=ms` (any subset)."""
        fields: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, equals, value = part.partition("=")
            if not equals or key.strip() not in ("prompt", "output", "time", "time_unit"):
                raise ValueError(
                    f"trace columns are prompt=COL,output=COL,time=COL,time_unit=s|ms; got {part!r}"
                )
            fields[key.strip()] = value.strip()
        return cls(**fields)


@dataclass(frozen=True)
class TimedTrace:
    """A trace's requests in file order: lengths, and arrival seconds and prompt block
    hash ids when it has them."""

    lengths: LengthTable
    arrivals: npt.NDArray[np.float64] | None = field(default=None)  # from the first row, sorted
    hash_ids: HashIds | None = None  # per row, one id a block of prompt (module docstring)

    @property
    def source(self) -> str:
        return self.lengths.source

    def __len__(self) -> int:
        return len(self.lengths)

    def window(self, start: int, count: int) -> TimedTrace:
        """Rows start .. start + count - 1, arrivals shifted to begin at 0."""
        if start < 0 or count < 1:
            raise ValueError(f"a window needs start >= 0 and count >= 1, got {start}, {count}")
        if start + count > len(self):
            raise ValueError(
                f"{self.source}: {count} requests from row {start} need {start + count} rows; "
                f"the trace has {len(self)}"
            )
        rows = slice(start, start + count)
        lengths = LengthTable(
            np.array(self.lengths.prompt[rows]),
            np.array(self.lengths.output[rows]),
            self.source,
        )
        hash_ids = None if self.hash_ids is None else self.hash_ids[rows]
        if self.arrivals is None:
            return TimedTrace(lengths, hash_ids=hash_ids)
        arrivals = self.arrivals[rows]
        return TimedTrace(lengths, arrivals - arrivals[0], hash_ids)

    @property
    def duration(self) -> float:
        """Seconds from the first arrival to the last (0 without arrival times)."""
        return 0.0 if self.arrivals is None else float(self.arrivals[-1] - self.arrivals[0])

    @property
    def mean_rate(self) -> float:
        """Requests a second over the trace: (rows − 1) ÷ duration."""
        if self.duration <= 0:
            raise ValueError(f"{self.source}: its arrivals span no time; it has no rate")
        return (len(self) - 1) / self.duration


def read_trace_file(path: str | Path, columns: TraceColumns | None = None) -> TimedTrace:
    """Read a trace in either layout (module docstring)."""
    path = Path(path)
    columns = columns or TraceColumns()
    try:
        with path.open(newline="", encoding="utf-8-sig") as stream:
            text = stream.read()
    except OSError as error:
        raise TraceFormatError(f"{path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise TraceFormatError(f"{path}: not a text file (not UTF-8)") from None
    records = _json_records(text, path) if _is_json_lines(path, text) else _csv_records(text, path)
    return _build(records, columns, path)


def _is_json_lines(path: Path, text: str) -> bool:
    return path.suffix.lower() in JSON_SUFFIXES or text.lstrip().startswith("{")


def _json_records(text: str, path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    for line_num, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise TraceFormatError(f"{path}, line {line_num}: not JSON: {error.msg}") from None
        if not isinstance(record, dict):
            raise TraceFormatError(f"{path}, line {line_num}: expected a JSON object")
        yield line_num, record


def _csv_records(text: str, path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if not header:
        raise TraceFormatError(f"{path}, line 1: empty file, expected a header line")
    names = [name.strip() for name in header]
    for row in reader:
        if not row:
            continue
        if len(row) != len(names):
            raise TraceFormatError(
                f"{path}, line {reader.line_num}: expected {len(names)} fields as in the "
                f"header, got {len(row)}"
            )
        yield reader.line_num, dict(zip(names, row, strict=True))


@dataclass
class _Columns:
    prompt: str
    output: str
    time: str | None
    seconds_per_unit: float
    hash_ids: bool  # whether the rows have a `hash_ids` column


def _resolve(record: Mapping[str, Any], wanted: TraceColumns, path: Path) -> _Columns:
    """The columns to read, from what the first record has."""
    keys = list(record)

    def pick(given: str | None, known: tuple[str, ...], what: str) -> str:
        if given is not None:
            if given not in record:
                raise TraceFormatError(
                    f"{path}, line 1: no {what} column {given!r}; it has {', '.join(keys)}"
                )
            return given
        found = next((name for name in known if name in record), None)
        if found is None:
            raise TraceFormatError(
                f"{path}, line 1: no {what} column (one of {', '.join(known)}; name another "
                f"with {what}=COLUMN); it has {', '.join(keys)}"
            )
        return found

    prompt = pick(wanted.prompt, PROMPT_NAMES, "prompt")
    output = pick(wanted.output, OUTPUT_NAMES, "output")
    time = wanted.time
    if time is not None and time not in record:
        raise TraceFormatError(f"{path}, line 1: no time column {time!r}; it has {', '.join(keys)}")
    if time is None:
        time = next((name for name in TIME_NAMES if name in record), None)
    unit = wanted.time_unit or (TIME_NAMES.get(time, "s") if time else "s")
    return _Columns(prompt, output, time, TIME_UNITS[unit], HASH_IDS in record)


def _build(
    records: Iterator[tuple[int, Mapping[str, Any]]], wanted: TraceColumns, path: Path
) -> TimedTrace:
    prompts: list[int] = []
    outputs: list[int] = []
    times: list[float] = []
    hash_ids: list[tuple[int, ...]] = []
    columns: _Columns | None = None
    for line_num, record in records:
        if columns is None:
            columns = _resolve(record, wanted, path)
        prompts.append(_count(record, columns.prompt, path, line_num))
        outputs.append(_count(record, columns.output, path, line_num))
        if columns.time is not None:
            times.append(_time(record, columns, path, line_num, times[-1] if times else None))
        if columns.hash_ids:
            hash_ids.append(_hash_ids(record, path, line_num))
    if columns is None:
        raise TraceFormatError(f"{path}: empty file, no rows")
    lengths = LengthTable(
        np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64), str(path)
    )
    blocks = tuple(hash_ids) if columns.hash_ids else None
    if columns.time is None:
        return TimedTrace(lengths, hash_ids=blocks)
    seconds = np.asarray(times, dtype=np.float64) * columns.seconds_per_unit
    return TimedTrace(lengths, seconds - seconds[0], blocks)


def _hash_ids(record: Mapping[str, Any], path: Path, line_num: int) -> tuple[int, ...]:
    """A row's `hash_ids`: a list of non-negative integers (the first row had the column)."""
    if HASH_IDS not in record:
        raise TraceFormatError(
            f"{path}, line {line_num}: {HASH_IDS} is missing (the first row has it)"
        )
    value = record[HASH_IDS]
    if not isinstance(value, list):
        raise TraceFormatError(
            f"{path}, line {line_num}: {HASH_IDS} is {value!r}, not a list of integers"
        )
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise TraceFormatError(
                f"{path}, line {line_num}: {HASH_IDS} holds {item!r}; each must be a "
                "non-negative integer"
            )
    return tuple(value)


def _count(record: Mapping[str, Any], column: str, path: Path, line_num: int) -> int:
    value = record.get(column)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise TraceFormatError(f"{path}, line {line_num}: {column} is missing")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TraceFormatError(
            f"{path}, line {line_num}: {column} is {value!r}, not an integer"
        ) from None
    if isinstance(value, bool) or not number.is_integer():
        raise TraceFormatError(f"{path}, line {line_num}: {column} is {value!r}, not an integer")
    if number < 1:
        raise TraceFormatError(
            f"{path}, line {line_num}: {column} is {int(number)}, must be a positive token count"
        )
    return int(number)


def _time(
    record: Mapping[str, Any], columns: _Columns, path: Path, line_num: int, previous: float | None
) -> float:
    assert columns.time is not None
    value = record.get(columns.time)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TraceFormatError(
            f"{path}, line {line_num}: {columns.time} is {value!r}, not a number"
        ) from None
    if not math.isfinite(number) or number < 0:
        raise TraceFormatError(
            f"{path}, line {line_num}: {columns.time} is {value!r}; arrival times must be "
            "finite and not negative"
        )
    if previous is not None and number < previous:
        raise TraceFormatError(
            f"{path}, line {line_num}: {columns.time} {number:g} is before the previous row's "
            f"{previous:g}; a trace must be sorted by arrival time"
        )
    return number
