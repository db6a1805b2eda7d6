"""Plain tables and result files: what every report of the project is written with.

The lowest layer of reporting: no simulator, no load generator, only text and files.
Result files are written whole or not at all (`atomic_write`).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slidingserve.core.files import atomic_write


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table, first column left-aligned, the others right-aligned."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [str(cells[0]).ljust(widths[0])]
        parts += [str(cell).rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(parts)

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write `rows` as CSV, the keys of the first as the header; whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def write_json(path: Path, payload: Any) -> None:
    """Write `payload` as strict JSON: NaN (an undefined percentile) becomes null; whole or
    not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    plain = _nan_to_none(json.loads(json.dumps(payload, default=_jsonable)))
    with atomic_write(path) as stream:
        json.dump(plain, stream, indent=2, allow_nan=False)
        stream.write("\n")


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _nan_to_none(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_nan_to_none(item) for item in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "value"):  # enums
        return value.value
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
