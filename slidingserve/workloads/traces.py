"""Request-length traces: read a CSV of (prompt, output) token counts into a `LengthTable`.

A trace has one row per request and a header naming at least the columns
`num_prefill_tokens` (prompt tokens) and `num_decode_tokens` (output tokens); other columns
(`num_total_tokens`, `pd_ratio`, ...) are ignored. Counts are positive integers.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from typing import TextIO

    import numpy.typing as npt

PROMPT_COLUMN = "num_prefill_tokens"
OUTPUT_COLUMN = "num_decode_tokens"
REQUIRED_COLUMNS = (PROMPT_COLUMN, OUTPUT_COLUMN)


class TraceFormatError(ValueError):
    """A trace file that cannot be read as a length table; the message names file and line."""


@dataclass(frozen=True)
class LengthTable:
    """Prompt and output lengths of a set of requests, row i being request i.

    Both arrays are int64 arrays of the same length, every entry ≥ 1; the table holds
    read-only views of them.
    """

    prompt: npt.NDArray[np.int64]  # prompt tokens per request
    output: npt.NDArray[np.int64]  # output tokens per request
    source: str = "<memory>"  # where the rows came from, for messages

    def __post_init__(self) -> None:
        if self.prompt.shape != self.output.shape or self.prompt.ndim != 1:
            raise ValueError(
                f"{self.source}: prompt and output must be 1-D arrays of one length, "
                f"got shapes {self.prompt.shape} and {self.output.shape}"
            )
        if self.prompt.dtype != np.int64 or self.output.dtype != np.int64:
            raise ValueError(f"{self.source}: lengths must be int64 arrays")
        if len(self.prompt) and (self.prompt.min() < 1 or self.output.min() < 1):
            raise ValueError(f"{self.source}: every length must be at least 1 token")
        object.__setattr__(self, "prompt", _read_only(self.prompt))
        object.__setattr__(self, "output", _read_only(self.output))

    def __len__(self) -> int:
        return len(self.prompt)


def _read_only(array: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    view = array.view()
    view.setflags(write=False)
    return view


def read_trace(path: str | Path) -> LengthTable:
    """Read a trace CSV; raise `TraceFormatError` naming the file and line of any defect."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8-sig") as stream:
        prompts, outputs = _read_rows(stream, str(path))
    return LengthTable(
        np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64), str(path)
    )


def _read_rows(stream: TextIO, name: str) -> tuple[list[int], list[int]]:
    """Parse the header and the rows; returns prompt and output lengths in file order."""
    reader = csv.reader(stream)
    header = next(reader, None)
    if header is None:
        raise TraceFormatError(f"{name}, line 1: empty file, expected a header line")
    prompt_at, output_at = _column_indices(header, name)
    prompts: list[int] = []
    outputs: list[int] = []
    for row in reader:
        line_num = reader.line_num  # physical line of the row's end, 1-based
        if not row:
            continue  # blank line
        if len(row) != len(header):
            raise TraceFormatError(
                f"{name}, line {line_num}: expected {len(header)} fields as in the header, "
                f"got {len(row)}"
            )
        prompts.append(_parse_count(row[prompt_at], PROMPT_COLUMN, name, line_num))
        outputs.append(_parse_count(row[output_at], OUTPUT_COLUMN, name, line_num))
    if not prompts:
        raise TraceFormatError(
            f"{name}, line {reader.line_num + 1}: empty file, no rows after the header"
        )
    return prompts, outputs


def _column_indices(header: list[str], name: str) -> tuple[int, int]:
    """Positions of the prompt and output columns in the header (line 1)."""
    columns = [column.strip() for column in header]
    missing = [column for column in REQUIRED_COLUMNS if column not in columns]
    if missing:
        raise TraceFormatError(
            f"{name}, line 1: missing column(s) {', '.join(missing)}; "
            f"header has {', '.join(columns) or 'nothing'}"
        )
    return columns.index(PROMPT_COLUMN), columns.index(OUTPUT_COLUMN)


def _parse_count(text: str, column: str, name: str, line_num: int) -> int:
    """A positive token count from one field."""
    try:
        value = int(text.strip())
    except ValueError:
        raise TraceFormatError(
            f"{name}, line {line_num}: {column} is {text!r}, not an integer"
        ) from None
    if value < 1:
        raise TraceFormatError(
            f"{name}, line {line_num}: {column} is {value}, must be a positive token count"
        )
    return value
