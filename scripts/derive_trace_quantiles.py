"""Derive the embedded length tables from the request-length traces.

Run from the repository root:

    .venv/bin/python scripts/derive_trace_quantiles.py [--data-dir DIR] [--out FILE]

It reads the ShareGPT and arXiv traces (default `../shared/data/traces` beside the checkout)
and writes `slidingserve/workloads/data/trace_quantiles.json`: per trace, the marginal
quantiles of prompt and output tokens (finer steps in both tails), the Spearman rank
correlation, and the empirical copula as row counts on a rank grid (finer near 0 and 1). It
prints one line per trace: rows, mean/p50/p90/p99/max of prompt and output, Spearman.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from slidingserve.workloads.lengths import TRACE_FILES
from slidingserve.workloads.traces import LengthTable, read_trace

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data" / "traces"
DEFAULT_OUT = REPO_ROOT / "slidingserve" / "workloads" / "data" / "trace_quantiles.json"

TRACES: dict[str, dict[str, str]] = {
    "sharegpt": {
        "file": TRACE_FILES["sharegpt"],
        "upstream": "microsoft/sarathi-serve, branch niyama_asplos2026",
        "license": "Apache-2.0 (LICENSE.sarathi-serve-Apache2)",
    },
    "arxiv": {
        "file": TRACE_FILES["arxiv"],
        "upstream": "microsoft/vidur",
        "license": "MIT (LICENSE.vidur-MIT)",
    },
}

# Probabilities in units of 1e-4: 0.1% steps below 1% and above 99%, 0.5% in between,
# then p99.95 and the maximum, for the heavy arXiv output tail.
_PROBABILITY_STEPS = [
    *range(0, 100, 10),
    *range(100, 9900, 50),
    *range(9900, 10000, 10),
    9995,
    10000,
]
PROBABILITIES = np.asarray(_PROBABILITY_STEPS, dtype=np.float64) / 1e4
# Rank-grid edges: deciles, split finer in both tails where the dependence is strongest.
RANK_EDGES = np.asarray(
    [0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0]
)


def summary(values: np.ndarray[Any, np.dtype[np.int64]]) -> dict[str, float]:
    """Mean and percentiles of one column, tokens."""
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {
        "mean": round(float(values.mean()), 1),
        "p50": float(p50),
        "p90": float(p90),
        "p99": round(float(p99), 1),
        "max": float(values.max()),
    }


def rank_counts(table: LengthTable) -> list[list[int]]:
    """Rows per (prompt-rank bin, output-rank bin); ranks (average for ties) scaled to (0, 1)."""
    u_prompt = (stats.rankdata(table.prompt) - 0.5) / len(table)
    u_output = (stats.rankdata(table.output) - 0.5) / len(table)
    counts, _, _ = np.histogram2d(u_prompt, u_output, bins=[RANK_EDGES, RANK_EDGES])
    return [[int(c) for c in row] for row in counts]


def describe(table: LengthTable, meta: dict[str, str]) -> dict[str, Any]:
    """The JSON entry of one trace."""
    spearman = float(stats.spearmanr(table.prompt, table.output).statistic)
    return {
        "source_file": meta["file"],
        "upstream": meta["upstream"],
        "license": meta["license"],
        "rows": len(table),
        "prompt": [round(float(q), 2) for q in np.quantile(table.prompt, PROBABILITIES)],
        "output": [round(float(q), 2) for q in np.quantile(table.output, PROBABILITIES)],
        "spearman": round(spearman, 5),
        "rank_counts": rank_counts(table),
        "summary": {"prompt": summary(table.prompt), "output": summary(table.output)},
    }


def derive(data_dir: Path, date: str) -> dict[str, Any]:
    """The whole JSON document for the traces in `data_dir`."""
    traces = {name: describe(read_trace(data_dir / m["file"]), m) for name, m in TRACES.items()}
    return {
        "format_version": 1,
        "description": (
            "Request-length distributions derived from public traces (Llama-2 tokenizer): "
            "marginal quantiles (linear interpolation between points), Spearman rank "
            "correlation, empirical copula as row counts on a rank grid."
        ),
        "generated_by": "scripts/derive_trace_quantiles.py",
        "generated_on": date,
        "probabilities": [round(float(p), 4) for p in PROBABILITIES],
        "rank_edges": [float(e) for e in RANK_EDGES],
        "traces": traces,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args()
    document = derive(args.data_dir, args.date)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    for name, entry in document["traces"].items():
        print(
            f"{name}: {entry['rows']} rows, prompt {entry['summary']['prompt']}, "
            f"output {entry['summary']['output']}, spearman {entry['spearman']}"
        )
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
