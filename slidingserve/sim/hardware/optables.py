"""Per-operator times of one profiled model on one GPU, as Vidur's profiler measures them.

Vidur's `mlp.csv` holds, for each TP degree and batch size (tokens), the median time (ms per
layer) of every operator of a transformer layer except the attention kernel, plus the
embedding (ms per batch). `OpTable` keeps those medians per operator with the shape they
were measured at, so that another model's times can be scaled from them (`roofline.py`),
and the per-layer sum the simulator runs on.

The same table is read from a raw `mlp.csv` (`from_rows`) and from the compact JSON the
project ships (`from_json`); `to_json` writes that JSON.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

# Every op of a layer except the attention kernel, in Vidur's names.
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
EMBEDDING_OP = "emb"
ALL_OPS = (*LAYER_OPS, EMBEDDING_OP)
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size")
FORMAT = 2
DIGITS = 6  # ms rounded to the nanosecond: far below measurement noise


@dataclass(frozen=True, slots=True)
class OpShape:
    """The model shape an operator table was measured with (Vidur's column names)."""

    n_head: int  # query heads
    n_kv_head: int
    n_embd: int  # hidden size
    n_expanded_embd: int  # MLP intermediate size
    vocab_size: int

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def same_layers(self, other: OpShape) -> bool:
        """Whether every layer operator has the same shape (the vocabulary may differ)."""
        return (self.n_head, self.n_kv_head, self.n_embd, self.n_expanded_embd) == (
            other.n_head,
            other.n_kv_head,
            other.n_embd,
            other.n_expanded_embd,
        )


@dataclass(frozen=True, slots=True)
class OpGrid:
    """One TP degree: batch sizes and, per operator, the median ms at each."""

    num_tokens: tuple[int, ...]  # increasing
    ops: Mapping[str, tuple[float, ...]]  # ALL_OPS → ms (per layer; emb per batch)
    layer_ms: tuple[float, ...]  # per-layer sum of LAYER_OPS (median of the row sums)

    @property
    def emb_ms(self) -> tuple[float, ...]:
        return self.ops[EMBEDDING_OP]


@dataclass(frozen=True, slots=True)
class OpTable:
    """Operator times of one model shape on one GPU, by TP degree."""

    label: str  # where it was measured, e.g. "a100 meta-llama/Meta-Llama-3-8B"
    shape: OpShape
    per_tp: Mapping[int, OpGrid]

    def grid(self, tp: int) -> OpGrid:
        if tp not in self.per_tp:
            raise ValueError(
                f"no operator times at tp={tp} in {self.label}; measured tp: {sorted(self.per_tp)}"
            )
        return self.per_tp[tp]

    @classmethod
    def from_rows(cls, label: str, rows: Sequence[Mapping[str, str]]) -> OpTable:
        """Build from `mlp.csv` rows of one shape; repeated batch sizes combine by median."""
        if not rows:
            raise ValueError(f"{label}: no rows")
        shape = OpShape(**{column: int(rows[0][column]) for column in SHAPE_COLUMNS})
        samples: dict[tuple[int, int], dict[str, list[float]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for row in rows:
            point = samples[int(row["num_tensor_parallel_workers"]), int(row["num_tokens"])]
            times = {op: float(row[f"time_stats.{op}.median"]) for op in ALL_OPS}
            for op, ms in times.items():
                point[op].append(ms)
            point["layer"].append(sum(times[op] for op in LAYER_OPS))
        per_tp = {}
        for tp in sorted({tp for tp, _ in samples}):
            tokens = tuple(sorted(n for t, n in samples if t == tp))
            points = [samples[tp, n] for n in tokens]
            ops = {op: tuple(round(median(p[op]), DIGITS) for p in points) for op in ALL_OPS}
            layer = tuple(round(median(p["layer"]), DIGITS) for p in points)
            per_tp[tp] = OpGrid(tokens, ops, layer)
        return cls(label, shape, per_tp)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "label": self.label,
            "shape": {column: getattr(self.shape, column) for column in SHAPE_COLUMNS},
            "tp": {
                str(tp): {
                    "num_tokens": list(grid.num_tokens),
                    "layer_ms": list(grid.layer_ms),
                    "ops": {op: list(grid.ops[op]) for op in ALL_OPS},
                }
                for tp, grid in self.per_tp.items()
            },
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> OpTable:
        if doc.get("format") != FORMAT:
            raise ValueError(f"operator table format {doc.get('format')!r}, expected {FORMAT}")
        shape = OpShape(**{column: int(doc["shape"][column]) for column in SHAPE_COLUMNS})
        per_tp = {
            int(tp): OpGrid(
                tuple(grid["num_tokens"]),
                {op: tuple(grid["ops"][op]) for op in ALL_OPS},
                tuple(grid["layer_ms"]),
            )
            for tp, grid in doc["tp"].items()
        }
        return cls(str(doc["label"]), shape, per_tp)
