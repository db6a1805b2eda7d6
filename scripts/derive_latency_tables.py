"""Derive the simulator's compact latency tables from Vidur's measured A100 profiles.

Usage (from the repository root):

    .venv/bin/python scripts/derive_latency_tables.py [--data ../shared/data/profiles]

Reads `a100/<profile>/mlp.csv` for each catalog model and
`network/a100_pairwise_nvlink/all_reduce.csv`, and writes into
`slidingserve/sim/hardware/data/`:

- `a100_<model>.json`: per TP degree, the grid of batch token counts, the per-layer sum of the
  median times (ms) of the linear/norm/activation ops, and the embedding median (ms per batch);
- `a100_pairwise_nvlink_all_reduce.json`: per number of workers, median all-reduce time (ms)
  by message size (bytes), binned on a log grid of eight bins per octave.

It prints one line per file written. The raw CSVs stay outside the repository.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections import defaultdict
from datetime import date
from pathlib import Path
from statistics import median
from typing import Any

from slidingserve.sim.hardware.catalog import ModelSpec, load_model

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "profiles"
DEFAULT_OUT = REPO_ROOT / "slidingserve" / "sim" / "hardware" / "data"
SCRIPT = "scripts/derive_latency_tables.py"

GPU = "a100"
PROFILES = {"llama-3-8b": "Meta-Llama-3-8B", "llama-2-7b": "Llama-2-7b-hf"}
ALL_REDUCE_CSV = "network/a100_pairwise_nvlink/all_reduce.csv"
ALL_REDUCE_JSON = "a100_pairwise_nvlink_all_reduce.json"
# Everything a transformer layer runs except attention itself (the attention kernel).
LAYER_OPS = (
    "attn_pre_proj",
    "attn_post_proj",
    "attn_rope",
    "mlp_up_proj",
    "mlp_down_proj",
    "mlp_act",
    "input_layernorm",
    "post_attention_layernorm",
    "add",
)
BINS_PER_OCTAVE = 8
DIGITS = 6  # ms rounded to the nanosecond: far below measurement noise


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def metadata(sources: list[str], notes: str) -> dict[str, Any]:
    return {
        "sources": sources,
        "source_license": "microsoft/vidur profiles, MIT",
        "derived_by": SCRIPT,
        "date": date.today().isoformat(),
        "notes": notes,
    }


def model_rows(rows: list[dict[str, str]], spec: ModelSpec) -> list[dict[str, str]]:
    """Rows measured with `spec`'s shapes (a file may hold several models)."""
    wanted = {
        "n_head": spec.num_heads,
        "n_kv_head": spec.num_kv_heads,
        "n_embd": spec.hidden_size,
        "n_expanded_embd": spec.intermediate_size,
    }
    picked = [r for r in rows if all(int(r[k]) == v for k, v in wanted.items())]
    if not picked:
        raise SystemExit(f"no rows with shape {wanted} for {spec.name}")
    return picked


def op_table(rows: list[dict[str, str]]) -> dict[str, dict[str, list[Any]]]:
    """Per TP degree: token grid, per-layer op sum and embedding time (ms).

    Some token counts were measured twice; their medians are combined by their median.
    """
    layer: dict[tuple[int, int], list[float]] = defaultdict(list)
    emb: dict[tuple[int, int], list[float]] = defaultdict(list)
    for row in rows:
        key = (int(row["num_tensor_parallel_workers"]), int(row["num_tokens"]))
        layer[key].append(sum(float(row[f"time_stats.{op}.median"]) for op in LAYER_OPS))
        emb[key].append(float(row["time_stats.emb.median"]))
    table: dict[str, dict[str, list[Any]]] = {}
    for tp in sorted({tp for tp, _ in layer}):
        grid = sorted(n for t, n in layer if t == tp)
        table[str(tp)] = {
            "num_tokens": grid,
            "layer_ms": [round(median(layer[tp, n]), DIGITS) for n in grid],
            "emb_ms": [round(median(emb[tp, n]), DIGITS) for n in grid],
        }
    return table


def derive_model(data: Path, out: Path, model: str) -> Path:
    spec = load_model(model)
    source = f"{GPU}/{PROFILES[model]}/mlp.csv"
    rows = model_rows(read_rows(data / source), spec)
    notes = (
        "layer_ms: per-layer sum of the median times of " + ", ".join(LAYER_OPS) + "; "
        "emb_ms: embedding median, once per batch; duplicated token counts combined by median"
    )
    doc = {
        "metadata": metadata([source], notes),
        "gpu": GPU,
        "model": model,
        "tp": op_table(rows),
    }
    return write(out / f"{GPU}_{model}.json", doc)


def log_bins(points: list[tuple[int, float]]) -> tuple[list[int], list[float]]:
    """Median size and median time of the points in each log bin (BINS_PER_OCTAVE an octave)."""
    bins: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for size, ms in points:
        bins[round(BINS_PER_OCTAVE * math.log2(size))].append((size, ms))
    keys = sorted(bins)
    sizes = [round(median(s for s, _ in bins[k])) for k in keys]
    times = [round(median(t for _, t in bins[k]), DIGITS) for k in keys]
    return sizes, times


def derive_all_reduce(data: Path, out: Path) -> Path:
    by_workers: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for row in read_rows(data / ALL_REDUCE_CSV):
        if row["collective"] == "all_reduce" and int(row["size"]) > 0:
            point = (int(row["size"]), float(row["time_stats.all_reduce.median"]))
            by_workers[int(row["num_workers"])].append(point)
    table = {}
    for workers in sorted(by_workers):
        sizes, times = log_bins(by_workers[workers])
        table[str(workers)] = {"size_bytes": sizes, "ms": times}
    notes = f"median all-reduce time per {BINS_PER_OCTAVE}-per-octave log bin of message size"
    doc = {"metadata": metadata([ALL_REDUCE_CSV], notes), "num_workers": table}
    return write(out / ALL_REDUCE_JSON, doc)


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="profiles folder")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    args = parser.parse_args()
    written = [derive_model(args.data, args.out, model) for model in PROFILES]
    written.append(derive_all_reduce(args.data, args.out))
    for path in written:
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
