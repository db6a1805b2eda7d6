"""How well the roofline scaling predicts a model it never saw: one profiled model's operator
times predicted from another's on the same GPU, against the measured ones.

The roofline is fitted to the source model's table only, as a user with one profiled model
would have it. Errors are relative, |predicted / measured − 1|, of the per-layer
non-attention time (the sum the simulator runs on), per TP degree and batch-size band.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from slidingserve.sim.hardware.optables import LAYER_OPS, OpTable
from slidingserve.sim.hardware.roofline import LayerDims, Roofline, scale_grid

# Batch-size bands (tokens, inclusive): decode-sized, chunk-sized, large prefills, huge.
FloatArray = npt.NDArray[np.float64]
BANDS = ((1, 64), (65, 512), (513, 4096), (4097, 32768))


@dataclass(frozen=True, slots=True)
class BandError:
    """Relative errors of one source → target prediction at one TP degree and band."""

    source: str
    target: str
    tp: int
    low: int  # tokens
    high: int
    count: int  # batch sizes both tables measured in the band
    median: float  # of |predicted / measured − 1|, per-layer sum
    p90: float
    worst: float
    op_median: float  # the same, over every operator separately


@dataclass(frozen=True, slots=True)
class TPErrors:
    """Relative errors at every batch size both tables measured, at one TP degree."""

    tp: int
    tokens: FloatArray
    layer: FloatArray  # per-layer sum
    ops: FloatArray  # one row per operator of LAYER_OPS


def tp_errors(source: OpTable, target: OpTable) -> list[TPErrors]:
    """Errors of predicting `target`'s operator times from `source`'s, per TP degree both
    hold; the roofline is fitted to `source` alone."""
    roofline = Roofline.fit([source])
    source_dims, target_dims = LayerDims.of_shape(source.shape), LayerDims.of_shape(target.shape)
    found = []
    for tp in sorted(set(source.per_tp) & set(target.per_tp)):
        predicted = scale_grid(source.per_tp[tp], tp, source_dims, target_dims, roofline)
        measured = target.per_tp[tp]
        common = sorted(set(predicted.num_tokens) & set(measured.num_tokens))
        at_predicted = [predicted.num_tokens.index(n) for n in common]
        at_measured = [measured.num_tokens.index(n) for n in common]
        ops = np.array(
            [
                _relative(
                    np.take(predicted.ops[op], at_predicted), np.take(measured.ops[op], at_measured)
                )
                for op in LAYER_OPS
            ]
        )
        layer = _relative(
            np.take(predicted.layer_ms, at_predicted),
            np.sum([np.take(measured.ops[op], at_measured) for op in LAYER_OPS], axis=0),
        )
        found.append(TPErrors(tp, np.array(common, dtype=np.float64), layer, ops))
    return found


def cross_model_errors(source: OpTable, target: OpTable) -> list[BandError]:
    """Per TP degree both tables hold and per batch-size band, the errors of predicting
    `target`'s operator times from `source`'s."""
    bands = []
    for errors in tp_errors(source, target):
        for low, high in BANDS:
            inside = (errors.tokens >= low) & (errors.tokens <= high)
            if not inside.any():
                continue
            layer = errors.layer[inside]
            bands.append(
                BandError(
                    source.label,
                    target.label,
                    errors.tp,
                    low,
                    high,
                    int(inside.sum()),
                    float(np.median(layer)),
                    float(np.percentile(layer, 90)),
                    float(np.max(layer)),
                    float(np.median(errors.ops[:, inside])),
                )
            )
    return bands


def overall_median(source: OpTable, target: OpTable) -> float:
    """Median error of the per-layer sum over every TP degree and batch size."""
    return float(np.median(np.concatenate([e.layer for e in tp_errors(source, target)])))


def _relative(predicted: FloatArray, measured: FloatArray) -> FloatArray:
    return np.asarray(np.abs(predicted / measured - 1), dtype=np.float64)


def error_table(errors: list[BandError]) -> str:
    """Markdown table, one row per source → target, TP degree and band."""
    lines = [
        "| predicted ← from | TP | tokens | sizes | median error | p90 | worst | per-op median |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in errors:
        lines.append(
            f"| {e.target} ← {e.source} | {e.tp} | {e.low}–{e.high} | {e.count} | "
            f"{e.median:.1%} | {e.p90:.1%} | {e.worst:.1%} | {e.op_median:.1%} |"
        )
    return "\n".join(lines)
