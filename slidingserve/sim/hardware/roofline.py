"""Another model's operator times from a GPU's measured ones, scaled by a roofline.

Each operator of a layer does known work at a batch of T tokens: a matmul (T × K) · (K × N)
does 2·T·K·N FLOPs and moves 2·(T·K + K·N + T·N) bytes (fp16/bf16); an elementwise op
(activation, norms, residual add, rotary) moves its tensors and does negligible FLOPs. A
roofline with a launch cost,

    time(FLOPs, bytes) = L + max(FLOPs / P, bytes / B),

is fitted (least squares on log time) to every operator time the GPU's profile holds: L is
its launch floor, P and B the compute and bandwidth it reaches. A target model's operator at
T tokens then takes the measured time of the profiled model's operator at T, times the
roofline's ratio of their work. The measured curve keeps what the roofline cannot know (tile
steps, kernel choices at each size); the ratio only carries the change of shape.
`cross_model_errors` checks this against two models the A100 profile holds (README).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from slidingserve.sim.hardware.optables import (
    ALL_OPS,
    LAYER_OPS,
    OpGrid,
    OpShape,
    OpTable,
)

FloatArray = npt.NDArray[np.float64]
_BYTES = 2.0  # fp16/bf16 activations and weights
_START = (0.004, 2e11, 1e9)  # L ms, P FLOP/ms, B bytes/ms: where the fit starts


@dataclass(frozen=True, slots=True)
class LayerDims:
    """The widths of a layer's operators, before tensor parallelism splits them."""

    hidden: int
    q_width: int  # query heads × head dim
    kv_width: int  # KV heads × head dim
    intermediate: int
    gated: bool = True  # gate and up projections fused (SwiGLU)

    @classmethod
    def of_shape(cls, shape: OpShape) -> LayerDims:
        head_dim = shape.head_dim
        return cls(
            shape.n_embd, shape.n_head * head_dim, shape.n_kv_head * head_dim, shape.n_expanded_embd
        )

    def work(self, op: str, tokens: FloatArray, tp: int) -> tuple[FloatArray, FloatArray]:
        """(FLOPs, bytes) of `op` at each batch size in `tokens`, on one of `tp` GPUs."""
        q, kv, mlp = self.q_width / tp, self.kv_width / tp, self.intermediate / tp
        up = 2 * mlp if self.gated else mlp
        matmuls = {
            "attn_pre_proj": (self.hidden, q + 2 * kv),
            "attn_post_proj": (q, self.hidden),
            "mlp_up_proj": (self.hidden, up),
            "mlp_down_proj": (mlp, self.hidden),
        }
        if op in matmuls:
            k, n = matmuls[op]
            return 2 * tokens * k * n, _BYTES * (tokens * k + k * n + tokens * n)
        moved = {
            "mlp_act": up + mlp,  # read gate and up, write the product
            "input_layernorm": 2 * self.hidden,
            "post_attention_layernorm": 2 * self.hidden,
            "add": 3 * self.hidden,
            "attn_rope": 2 * (q + kv),
            "emb": self.hidden,
        }
        if op not in moved:
            raise ValueError(f"unknown operator {op!r}; known: {', '.join(ALL_OPS)}")
        return np.zeros_like(tokens), _BYTES * tokens * moved[op]


@dataclass(frozen=True, slots=True)
class Roofline:
    """time = launch_ms + max(FLOPs / flops_per_ms, bytes / bytes_per_ms)."""

    launch_ms: float
    flops_per_ms: float
    bytes_per_ms: float

    def __call__(self, flops: FloatArray, moved: FloatArray) -> FloatArray:
        return self.launch_ms + np.maximum(flops / self.flops_per_ms, moved / self.bytes_per_ms)

    def describe(self) -> str:
        return (
            f"roofline {self.launch_ms * 1000:.1f} µs + max(FLOPs ÷ "
            f"{self.flops_per_ms / 1e9:.0f} TFLOP/s, bytes ÷ {self.bytes_per_ms / 1e6:.0f} GB/s)"
        )

    @classmethod
    def fit(cls, tables: Iterable[OpTable]) -> Roofline:
        """The roofline nearest (least squares on log time) to every measured operator time."""
        flops, moved, measured = _observations(tables)
        if not measured.size:
            raise ValueError("no operator times to fit a roofline to")

        def log_error(params: FloatArray) -> FloatArray:
            launch, peak, bandwidth = np.exp(params)
            model = launch + np.maximum(flops / peak, moved / bandwidth)
            return np.asarray(np.log(model) - np.log(measured), dtype=np.float64)

        fitted = least_squares(log_error, np.log(_START)).x
        launch, peak, bandwidth = (float(value) for value in np.exp(fitted))
        return cls(launch, peak, bandwidth)


def _observations(tables: Iterable[OpTable]) -> tuple[FloatArray, FloatArray, FloatArray]:
    flops: list[FloatArray] = []
    moved: list[FloatArray] = []
    measured: list[FloatArray] = []
    for table in tables:
        dims = LayerDims.of_shape(table.shape)
        for tp, grid in table.per_tp.items():
            tokens = np.asarray(grid.num_tokens, dtype=np.float64)
            for op in ALL_OPS:
                times = np.asarray(grid.ops[op], dtype=np.float64)
                keep = times > 0
                f, b = dims.work(op, tokens, tp)
                flops.append(f[keep])
                moved.append(b[keep])
                measured.append(times[keep])
    return (np.concatenate(flops), np.concatenate(moved), np.concatenate(measured))


def scale_grid(
    grid: OpGrid, tp: int, source: LayerDims, target: LayerDims, roofline: Roofline
) -> OpGrid:
    """`grid` (measured with `source`'s widths at `tp`) with `target`'s widths."""
    tokens = np.asarray(grid.num_tokens, dtype=np.float64)
    ops = {}
    for op in ALL_OPS:
        ratio = roofline(*target.work(op, tokens, tp)) / roofline(*source.work(op, tokens, tp))
        ops[op] = tuple(float(v) for v in np.asarray(grid.ops[op]) * ratio)
    layer = np.sum([ops[op] for op in LAYER_OPS], axis=0)
    return OpGrid(grid.num_tokens, ops, tuple(float(v) for v in layer))


def scale_table(
    table: OpTable, target: LayerDims, roofline: Roofline, tps: Sequence[int] | None = None
) -> dict[int, OpGrid]:
    """Every TP degree of `table` (or those in `tps`) scaled to `target`'s widths."""
    source = LayerDims.of_shape(table.shape)
    return {
        tp: scale_grid(grid, tp, source, target, roofline)
        for tp, grid in table.per_tp.items()
        if tps is None or tp in tps
    }


def flops_per_token(dims: LayerDims) -> float:
    """Matmul FLOPs of one token through one layer (TP 1): how big a layer is."""
    one = np.ones(1)
    return float(
        sum(dims.work(op, one, 1)[0][0] for op in ("attn_pre_proj", "attn_post_proj"))
        + sum(dims.work(op, one, 1)[0][0] for op in ("mlp_up_proj", "mlp_down_proj"))
    )


def nearest_table(tables: Sequence[OpTable], target: LayerDims) -> OpTable:
    """The table whose layer is nearest in size (log FLOPs per token) to `target`'s."""
    if not tables:
        raise ValueError("no operator table to scale from")
    size = np.log(flops_per_token(target))
    return min(
        tables,
        key=lambda table: abs(np.log(flops_per_token(LayerDims.of_shape(table.shape))) - size),
    )
