"""Read GPU profiles laid out as Vidur's profiler writes them.

    DIR/compute/<gpu>/<org>/<model>/mlp.csv        operator times (required)
    DIR/compute/<gpu>/<org>/<model>/attention.csv  attention kernel times (optional)
    DIR/network/<gpu>_<topology>/all_reduce.csv    all-reduce times (optional)

Each `<gpu>` becomes a `GPUProfile`. Its device facts (memory, peak compute, bandwidth) come
from the catalog's `[devices]`. What the directory lacks is filled by a documented model and
says so in the profile's source lines: attention from the A100 fits scaled by the devices'
compute and bandwidth, all-reduce from a PCIe link model. With several topologies for one GPU
there is one profile per topology, `<gpu>-<topology>`, and `<gpu>` is the first by name.
Every malformed or missing piece raises ValueError naming the file and what is wrong.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from statistics import median

import numpy as np
from scipy.optimize import nnls

from slidingserve.sim.hardware.catalog import (
    AttentionFit,
    DeviceSpec,
    list_devices,
    load_device,
    load_link,
)
from slidingserve.sim.hardware.optables import ALL_OPS, SHAPE_COLUMNS, OpTable
from slidingserve.sim.hardware.profiles import (
    AllReduce,
    GPUProfile,
    all_reduce_from_link,
    derived_attention,
)
from slidingserve.sim.hardware.roofline import Roofline

MLP_COLUMNS = (*SHAPE_COLUMNS, "num_tokens", "num_tensor_parallel_workers")
ATTENTION_COLUMNS = (
    "n_q_head",
    "n_kv_head",
    "n_embd",
    "num_tensor_parallel_workers",
    "batch_size",
    "prefill_chunk_size",
    "kv_cache_size",
)
ATTENTION_SHAPE_COLUMNS = ("n_q_head", "n_kv_head", "n_embd", "num_tensor_parallel_workers")
ALL_REDUCE_COLUMNS = ("num_workers", "size", "time_stats.all_reduce.median")
BINS_PER_OCTAVE = 8
DIGITS = 6
DEFAULT_LINK = "pcie4"  # when a directory has no all-reduce table for a GPU
ATTENTION_REFERENCE = "a100"  # whose fits are scaled when a directory has no attention.csv
ACTIVATION_RESERVE_GIB = 2.0
CPU_OVERHEAD_S = 0.003
LAYOUT = "compute/<gpu>/<org>/<model>/mlp.csv"


def read_csv(path: Path, required: Sequence[str]) -> list[dict[str, str]]:
    """The rows of a CSV file that has every `required` column and at least one row."""
    try:
        with path.open(newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            columns = reader.fieldnames or []
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise ValueError(f"{path}: cannot read: {error}") from None
    missing = [column for column in required if column not in columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
    if not rows:
        raise ValueError(f"{path}: no rows")
    for line, row in enumerate(rows, start=2):
        for column in required:
            if not _is_number(row[column]):
                raise ValueError(f"{path} line {line}: {column} is not a number: {row[column]!r}")
    return rows


def whole_numbers(
    path: Path, rows: list[dict[str, str]], columns: Sequence[str]
) -> list[dict[str, str]]:
    """`rows` with `columns` written as integers, "8.0" as "8" (pandas writes an integer
    column with a gap as floats); ValueError naming the line where one is not whole."""
    for line, row in enumerate(rows, start=2):
        for column in columns:
            value = float(row[column])
            if not value.is_integer():
                raise ValueError(f"{path} line {line}: {column} is not whole: {row[column]!r}")
            row[column] = str(int(value))
    return rows


def _is_number(text: str | None) -> bool:
    try:
        return text is not None and math.isfinite(float(text))
    except ValueError:
        return False


def op_tables(path: Path, label: str) -> list[OpTable]:
    """One table per model shape in an `mlp.csv` (Vidur's older files hold several)."""
    required = (*MLP_COLUMNS, *(f"time_stats.{op}.median" for op in ALL_OPS))
    rows = whole_numbers(path, read_csv(path, required), MLP_COLUMNS)
    by_shape: dict[tuple[int, ...], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        by_shape[tuple(int(float(row[c])) for c in SHAPE_COLUMNS)].append(row)
    if len(by_shape) == 1:
        return [OpTable.from_rows(label, rows)]
    return [
        OpTable.from_rows(f"{label} (shape {'/'.join(map(str, shape))})", shape_rows)
        for shape, shape_rows in sorted(by_shape.items())
    ]


def attention_fit(path: Path) -> AttentionFit:
    """Least-squares fits (non-negative) of decode and prefill attention to `attention.csv`.

    Uses the rows of the first model shape at the smallest TP degree in the file:
    decode ms = a + b·batch + k·(batch × KV tokens a request), prefill ms = a + b·chunk·cached +
    c·chunk², per layer, for the heads on one GPU.
    """
    rows = whole_numbers(path, read_csv(path, ATTENTION_COLUMNS), ATTENTION_SHAPE_COLUMNS)
    first = rows[0]
    tp = min(int(row["num_tensor_parallel_workers"]) for row in rows)
    same = [
        row
        for row in rows
        if int(row["num_tensor_parallel_workers"]) == tp
        and all(row[c] == first[c] for c in ("n_q_head", "n_kv_head", "n_embd"))
    ]
    decode = [row for row in same if float(row["prefill_chunk_size"]) == 0]
    prefill = [row for row in same if float(row["prefill_chunk_size"]) > 0]
    decode_ms = _fit(path, decode, "attn_decode", _decode_features)
    prefill_ms = _fit(path, prefill, "attn_prefill", _prefill_features)
    heads, kv_heads = int(first["n_q_head"]), int(first["n_kv_head"])
    return AttentionFit(
        reference_num_heads=heads // tp,
        reference_num_kv_heads=max(1, kv_heads // tp),
        reference_head_dim=int(first["n_embd"]) // heads,
        decode_ms=decode_ms[0],
        decode_ms_per_request=decode_ms[1],
        decode_ms_per_kv_token=decode_ms[2],
        prefill_ms=prefill_ms[0],
        prefill_ms_per_chunk_cached=prefill_ms[1],
        prefill_ms_per_chunk_squared=prefill_ms[2],
    )


def _decode_features(row: Mapping[str, str]) -> list[float]:
    batch = float(row["batch_size"])
    return [1.0, batch, batch * float(row["kv_cache_size"])]


def _prefill_features(row: Mapping[str, str]) -> list[float]:
    chunk = float(row["prefill_chunk_size"])
    return [1.0, chunk * float(row["kv_cache_size"]), chunk * chunk]


def _fit(
    path: Path,
    rows: list[dict[str, str]],
    op: str,
    features: Callable[[Mapping[str, str]], list[float]],
) -> list[float]:
    column = f"time_stats.{op}.median"
    usable = [row for row in rows if _is_number(row.get(column))]
    if len(usable) < 3:
        raise ValueError(f"{path}: need 3 or more rows with a {column}, found {len(usable)}")
    matrix = np.array([features(row) for row in usable], dtype=np.float64)
    times = np.array([float(row[column]) for row in usable])
    # Relative least squares: every row counts by its relative error, as latency does.
    coefficients, _ = nnls(matrix / times[:, None], np.ones(len(usable)))
    return [float(c) for c in coefficients]


def all_reduce_points(path: Path) -> dict[int, tuple[tuple[int, ...], tuple[float, ...]]]:
    """Per GPU count, the median time (ms) in each log bin of message size (bytes)."""
    points: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for row in read_csv(path, ALL_REDUCE_COLUMNS):
        if row.get("collective", "all_reduce") == "all_reduce" and float(row["size"]) > 0:
            ms = float(row["time_stats.all_reduce.median"])
            points[int(float(row["num_workers"]))].append((int(float(row["size"])), ms))
    if not points:
        raise ValueError(f"{path}: no all_reduce rows with a positive size")
    return {workers: log_bins(found) for workers, found in sorted(points.items())}


def log_bins(points: list[tuple[int, float]]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Median size and median time of the points in each log bin (BINS_PER_OCTAVE an octave)."""
    bins: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for size, ms in points:
        bins[round(BINS_PER_OCTAVE * math.log2(size))].append((size, ms))
    keys = sorted(bins)
    sizes = tuple(round(median(s for s, _ in bins[k])) for k in keys)
    times = tuple(round(median(t for _, t in bins[k]), DIGITS) for k in keys)
    return sizes, times


def read_vidur_dir(directory: str | Path) -> list[GPUProfile]:
    """Every GPU profile in a directory laid out as Vidur's profiler writes it."""
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"{root}: not a directory")
    compute = root / "compute"
    if not compute.is_dir():
        raise ValueError(f"{root}: no compute/ folder (Vidur's layout: {LAYOUT})")
    gpus = sorted(path for path in compute.iterdir() if path.is_dir())
    if not gpus:
        raise ValueError(f"{compute}: no <gpu> folders (Vidur's layout: {LAYOUT})")
    profiles: list[GPUProfile] = []
    for gpu_dir in gpus:
        profiles.extend(_gpu_profiles(root, gpu_dir))
    return profiles


def _gpu_profiles(root: Path, gpu_dir: Path) -> list[GPUProfile]:
    gpu = gpu_dir.name
    device = _device(gpu_dir)
    mlp_files = sorted(gpu_dir.glob("*/*/mlp.csv"))
    if not mlp_files:
        raise ValueError(f"{gpu_dir}: no <org>/<model>/mlp.csv (Vidur's layout: {LAYOUT})")
    tables = tuple(
        table
        for path in mlp_files
        for table in op_tables(path, f"{gpu} {path.parent.parent.name}/{path.parent.name}")
    )
    attention, attention_source = _attention(gpu_dir, device)
    roofline = Roofline.fit(tables)

    def profile(name: str, all_reduce: AllReduce) -> GPUProfile:
        return GPUProfile(
            name=name,
            device=device,
            activation_reserve_gib=ACTIVATION_RESERVE_GIB,
            cpu_overhead_s=CPU_OVERHEAD_S,
            tables=tables,
            attention=attention,
            attention_source=attention_source,
            all_reduce=all_reduce,
            origin=f"imported from {root}",
            roofline=roofline,
        )

    networks = _networks(root, gpu)
    if not networks:
        link = all_reduce_from_link(load_link(DEFAULT_LINK))
        source = f"{link.source} (no network/{gpu}_<topology>/all_reduce.csv)"
        return [profile(gpu, AllReduce(link.measured, link.link, source))]
    first = next(iter(networks.values()))
    if len(networks) == 1:
        return [profile(gpu, first)]
    named = [profile(f"{gpu}-{topology}", found) for topology, found in networks.items()]
    return [profile(gpu, first), *named]


def _device(gpu_dir: Path) -> DeviceSpec:
    name = gpu_dir.name
    if name not in list_devices():
        raise ValueError(
            f"{gpu_dir}: unknown device {name!r} (its memory, peak compute and bandwidth are "
            f"needed); known devices: {', '.join(list_devices())}"
        )
    return load_device(name)


def _attention(gpu_dir: Path, device: DeviceSpec) -> tuple[AttentionFit, str]:
    files = sorted(gpu_dir.glob("*/*/attention.csv"))
    if files:
        return attention_fit(files[0]), f"fitted to {files[0]}"
    fit, source = derived_attention(device, ATTENTION_REFERENCE)
    return fit, f"{source} (no attention.csv in {gpu_dir})"


def _networks(root: Path, gpu: str) -> dict[str, AllReduce]:
    network = root / "network"
    if not network.is_dir():
        return {}
    found = {}
    for folder in sorted(network.glob(f"{gpu}_*")):
        path = folder / "all_reduce.csv"
        if path.is_file():
            topology = folder.name[len(gpu) + 1 :]
            found[topology] = AllReduce(all_reduce_points(path), None, f"measured ({path})")
    return found
