"""Distributions of (prompt, output) request lengths, from embedded tables or trace files.

Two sources, one interface (`LengthDistribution.sample`):

- `EmbeddedLengths`: the compact tables in `data/trace_quantiles.json` (written by
  `scripts/derive_trace_quantiles.py`): marginal quantiles of prompt and output lengths plus
  their dependence. A copula draws a pair of ranks (u_prompt, u_output) in [0, 1]; each rank
  goes through its marginal quantile function, interpolated linearly, rounded to an integer
  ≥ 1. Two copulas:
    * "grid" (default): the trace's empirical copula on a rank grid (rows per cell of
      prompt-rank bin × output-rank bin), uniform within a cell. It keeps the shape of the
      dependence, e.g. in arXiv the longest outputs come with short prompts (prompt + output
      ≤ 4,096 in the trace; Pearson −0.46 although Spearman is only −0.11).
    * "gaussian": a Gaussian copula matching the trace's Spearman rank correlation. It keeps
      the rank correlation but not the tail shape; kept for comparison.
- `TraceLengths`: rows of a real trace (`LengthTable`) drawn uniformly with replacement.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import numpy as np
from scipy.special import ndtr

from slidingserve.workloads.traces import LengthTable, read_trace

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import numpy.typing as npt

EMBEDDED_TABLES_FILE = "trace_quantiles.json"
TRACE_FILES: dict[str, str] = {
    "sharegpt": "sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
    "arxiv": "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
}
"""Source name -> trace CSV file name (in ../shared/data/traces); the embedded tables' names."""

Copula = Literal["grid", "gaussian"]


class LengthDistribution(Protocol):
    """Anything that draws request lengths."""

    def sample(self, n: int, rng: np.random.Generator) -> LengthTable:
        """Draw `n` independent (prompt, output) pairs, tokens, using only `rng`."""
        ...


@dataclass(frozen=True)
class QuantileTable:
    """One trace's embedded length distribution: marginal quantiles and rank dependence."""

    name: str  # trace name, e.g. "sharegpt"
    probabilities: npt.NDArray[np.float64]  # cumulative probabilities, 0 … 1, increasing
    prompt_quantiles: npt.NDArray[np.float64]  # prompt tokens at each probability
    output_quantiles: npt.NDArray[np.float64]  # output tokens at each probability
    spearman: float  # Spearman rank correlation of prompt and output in the trace
    rank_edges: npt.NDArray[np.float64]  # bin edges of the rank grid, 0 … 1
    rank_counts: npt.NDArray[np.int64]  # trace rows per (prompt-rank bin, output-rank bin)

    def __post_init__(self) -> None:
        size = len(self.probabilities)
        if self.probabilities[0] != 0.0 or self.probabilities[-1] != 1.0:
            raise ValueError(f"{self.name}: quantile probabilities must run from 0 to 1")
        if np.any(np.diff(self.probabilities) <= 0):
            raise ValueError(f"{self.name}: quantile probabilities must increase")
        for quantiles in (self.prompt_quantiles, self.output_quantiles):
            if len(quantiles) != size or np.any(np.diff(quantiles) < 0):
                raise ValueError(f"{self.name}: need {size} nondecreasing quantiles")
        bins = len(self.rank_edges) - 1
        if self.rank_counts.shape != (bins, bins) or self.rank_counts.sum() <= 0:
            raise ValueError(f"{self.name}: rank grid must be {bins}×{bins} with rows in it")
        if not -1.0 <= self.spearman <= 1.0:
            raise ValueError(f"{self.name}: rank correlation {self.spearman} outside [-1, 1]")


@dataclass(frozen=True)
class EmbeddedLengths:
    """Lengths drawn from an embedded `QuantileTable` through a copula (module docstring)."""

    table: QuantileTable
    copula: Copula = "grid"

    def __post_init__(self) -> None:
        if self.copula not in _COPULAS:
            raise ValueError(f"unknown copula {self.copula!r}; known: {', '.join(_COPULAS)}")

    def sample(self, n: int, rng: np.random.Generator) -> LengthTable:
        u_prompt, u_output = _COPULAS[self.copula](self.table, n, rng)
        table = self.table
        return LengthTable(
            _invert(u_prompt, table.probabilities, table.prompt_quantiles),
            _invert(u_output, table.probabilities, table.output_quantiles),
            f"embedded:{table.name}",
        )


@dataclass(frozen=True)
class TraceLengths:
    """Lengths drawn by resampling whole rows (pairs) of a trace, uniformly with replacement."""

    table: LengthTable

    def __post_init__(self) -> None:
        if len(self.table) == 0:
            raise ValueError(f"{self.table.source}: cannot resample an empty trace")

    def sample(self, n: int, rng: np.random.Generator) -> LengthTable:
        rows = rng.integers(0, len(self.table), size=n)
        return LengthTable(self.table.prompt[rows], self.table.output[rows], self.table.source)


def embedded_distribution(name: str, copula: Copula = "grid") -> EmbeddedLengths:
    """The embedded length distribution of trace `name` ("sharegpt" or "arxiv")."""
    tables = load_quantile_tables()
    if name not in tables:
        raise ValueError(f"no embedded length table {name!r}; known: {', '.join(sorted(tables))}")
    return EmbeddedLengths(tables[name], copula)


def trace_distribution(path: str | Path) -> TraceLengths:
    """Resample the rows of the trace CSV at `path` (see `traces.read_trace`)."""
    return TraceLengths(read_trace(path))


def load_quantile_tables(path: Path | None = None) -> dict[str, QuantileTable]:
    """Tables by trace name from `path`, by default the embedded package data file."""
    if path is None:
        package = resources.files("slidingserve.workloads")
        text = package.joinpath("data", EMBEDDED_TABLES_FILE).read_text(encoding="utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    document = json.loads(text)
    probabilities = np.asarray(document["probabilities"], dtype=np.float64)
    edges = np.asarray(document["rank_edges"], dtype=np.float64)
    return {
        name: _quantile_table(name, entry, probabilities, edges)
        for name, entry in document["traces"].items()
    }


def _quantile_table(
    name: str,
    entry: dict[str, Any],
    probabilities: npt.NDArray[np.float64],
    edges: npt.NDArray[np.float64],
) -> QuantileTable:
    return QuantileTable(
        name=name,
        probabilities=probabilities,
        prompt_quantiles=np.asarray(entry["prompt"], dtype=np.float64),
        output_quantiles=np.asarray(entry["output"], dtype=np.float64),
        spearman=float(entry["spearman"]),
        rank_edges=edges,
        rank_counts=np.asarray(entry["rank_counts"], dtype=np.int64),
    )


def _invert(
    ranks: npt.NDArray[np.float64],
    probabilities: npt.NDArray[np.float64],
    quantiles: npt.NDArray[np.float64],
) -> npt.NDArray[np.int64]:
    """Quantile function at `ranks`, linear between table points, rounded, at least 1 token."""
    values = np.rint(np.interp(ranks, probabilities, quantiles))
    tokens: npt.NDArray[np.int64] = np.maximum(values, 1.0).astype(np.int64)
    return tokens


RankPair: TypeAlias = "tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]"
"""Ranks of the prompt and of the output lengths, each in [0, 1]."""


def _grid_ranks(table: QuantileTable, n: int, rng: np.random.Generator) -> RankPair:
    """Ranks from the empirical rank grid: a cell by its share of rows, then uniform in it."""
    weights = table.rank_counts.ravel() / table.rank_counts.sum()
    cells = rng.choice(weights.size, size=n, p=weights)
    prompt_bin, output_bin = np.divmod(cells, table.rank_counts.shape[1])
    edges, widths = table.rank_edges, np.diff(table.rank_edges)
    u_prompt = edges[prompt_bin] + rng.random(n) * widths[prompt_bin]
    u_output = edges[output_bin] + rng.random(n) * widths[output_bin]
    return u_prompt, u_output


def _gaussian_ranks(table: QuantileTable, n: int, rng: np.random.Generator) -> RankPair:
    """Ranks from a Gaussian copula whose Spearman correlation is the trace's."""
    rho = 2.0 * math.sin(math.pi * table.spearman / 6.0)  # Pearson of the normals
    z_prompt, noise = rng.standard_normal((2, n))
    z_output = rho * z_prompt + math.sqrt(1.0 - rho * rho) * noise
    return np.asarray(ndtr(z_prompt)), np.asarray(ndtr(z_output))


_COPULAS: dict[str, Callable[[QuantileTable, int, np.random.Generator], RankPair]] = {
    "grid": _grid_ranks,
    "gaussian": _gaussian_ranks,
}
