"""Derive the simulator's compact latency tables from Vidur's measured GPU profiles.

Usage (from the repository root):

    .venv/bin/python scripts/derive_latency_tables.py [--data ../shared/data/profiles] [--links]

Reads `<gpu>/<profile>/mlp.csv` for each built-in GPU and profiled model, and
`network/a100_pairwise_nvlink/all_reduce.csv`, and writes into
`slidingserve/sim/hardware/data/`:

- `<gpu>_<model>.json`: per TP degree, the grid of batch token counts, the median time (ms)
  of every operator (per layer; the embedding per batch) and the per-layer sum of the
  non-attention operators (the median of the row sums where a batch size was measured twice);
- `a100_pairwise_nvlink_all_reduce.json`: per number of workers, median all-reduce time (ms)
  by message size (bytes), binned on a log grid of eight bins per octave.

`--links` also prints the latency and reached bandwidth of the A100 all-reduce table's
2-GPU (NVLink pair) and 4-GPU (pairs over PCIe) rows, from which `catalog.toml`'s link models
for GPUs without a measured table are set. It prints one line per file written. The raw CSVs
stay outside the repository.
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from slidingserve.sim.hardware.optables import LAYER_OPS, OpTable
from slidingserve.sim.hardware.vidur import MLP_COLUMNS, all_reduce_points, read_csv

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "profiles"
DEFAULT_OUT = REPO_ROOT / "slidingserve" / "sim" / "hardware" / "data"
SCRIPT = "scripts/derive_latency_tables.py"

# (gpu, model key, folder of its mlp.csv under the profiles folder)
PROFILES = (
    ("a100", "llama-3-8b", "a100/Meta-Llama-3-8B"),
    ("a100", "llama-2-7b", "a100/Llama-2-7b-hf"),
    ("a40", "llama-2-7b", "a40/Llama-2-7b-hf"),
)
ALL_REDUCE_CSV = "network/a100_pairwise_nvlink/all_reduce.csv"
ALL_REDUCE_JSON = "a100_pairwise_nvlink_all_reduce.json"
LARGE_MESSAGE = 1e6  # bytes: above this the bandwidth term dominates the fit


def metadata(sources: list[str], notes: str) -> dict[str, Any]:
    return {
        "sources": sources,
        "source_license": "microsoft/vidur profiles, MIT",
        "derived_by": SCRIPT,
        "date": date.today().isoformat(),
        "notes": notes,
    }


def derive_model(data: Path, out: Path, gpu: str, model: str, folder: str) -> Path:
    source = f"{folder}/mlp.csv"
    rows = read_csv(data / source, MLP_COLUMNS)
    table = OpTable.from_rows(f"{gpu} {Path(folder).name}", rows)
    notes = (
        "ops: per-operator median ms (per layer; emb per batch); layer_ms: per-layer sum of "
        + ", ".join(LAYER_OPS)
        + "; duplicated token counts combined by median"
    )
    doc = {**table.to_json(), "metadata": metadata([source], notes)}
    return write(out / f"{gpu}_{model}.json", doc)


def derive_all_reduce(data: Path, out: Path) -> Path:
    points = all_reduce_points(data / ALL_REDUCE_CSV)
    table = {
        str(workers): {"size_bytes": list(sizes), "ms": list(times)}
        for workers, (sizes, times) in points.items()
    }
    notes = "median all-reduce time per 8-per-octave log bin of message size"
    doc = {"metadata": metadata([ALL_REDUCE_CSV], notes), "num_workers": table}
    return write(out / ALL_REDUCE_JSON, doc)


def print_link_fits(data: Path) -> None:
    """Latency (µs) and reached bandwidth (GB/s) of a ring all-reduce fitted to each row set."""
    for workers, (sizes, times) in all_reduce_points(data / ALL_REDUCE_CSV).items():
        size = np.asarray(sizes, dtype=np.float64)
        large = size > LARGE_MESSAGE
        ring_bytes = 2 * (workers - 1) / workers * size[large]
        design = np.column_stack([np.ones(large.sum()), ring_bytes])
        intercept, slope = np.linalg.lstsq(design, np.asarray(times)[large], rcond=None)[0]
        print(
            f"{workers} GPUs: latency {intercept * 1000:.0f} µs, "
            f"bandwidth {1 / slope / 1e6:.1f} GB/s (ring bytes over time, messages > 1 MB)"
        )


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="profiles folder")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--links", action="store_true", help="print the link model fits")
    args = parser.parse_args()
    written = [derive_model(args.data, args.out, *profile) for profile in PROFILES]
    written.append(derive_all_reduce(args.data, args.out))
    for path in written:
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    if args.links:
        print_link_fits(args.data)


if __name__ == "__main__":
    main()
