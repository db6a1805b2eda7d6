"""The measured tables behind the latency model, as monotone piecewise-linear curves.

The JSON files in `data/` hold medians exactly as `scripts/derive_latency_tables.py` derived
them; measurement noise makes them wiggle (a 2-token batch measured faster than a 1-token
one). The ground truth must never get faster when work is added, so every curve is made
non-decreasing here by a least-squares isotonic fit before it is used.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from slidingserve.sim.hardware.catalog import GPUSpec, load_table

FloatArray = npt.NDArray[np.float64]


class Curve(NamedTuple):
    """A non-decreasing piecewise-linear function, given at increasing points `x`.

    Below the first point it is flat; above the last it continues with the mean slope of its
    upper half, because the tables end in their linear (compute- or bandwidth-bound) range.
    """

    x: FloatArray  # increasing abscissae (tokens or bytes)
    y: FloatArray  # non-decreasing values (ms)

    def __call__(self, at: npt.ArrayLike) -> FloatArray:
        points = np.asarray(at, dtype=np.float64)
        inside = np.interp(points, self.x, self.y)
        above = self.y[-1] + self.tail_slope * (points - self.x[-1])
        return np.where(points > self.x[-1], above, inside)

    @property
    def tail_slope(self) -> float:
        middle = self.x[-1] / 2
        return float((self.y[-1] - np.interp(middle, self.x, self.y)) / (self.x[-1] - middle))

    @classmethod
    def fit(cls, x: npt.ArrayLike, y: npt.ArrayLike) -> Curve:
        """The monotone curve nearest (least squares) to the points `(x, y)`."""
        return cls(np.asarray(x, dtype=np.float64), isotonic(np.asarray(y, dtype=np.float64)))


class OpCurves(NamedTuple):
    """Operator times of one model at one TP degree, by number of batch tokens."""

    layer_ms: Curve  # ms per layer: every op of a layer except the attention kernel
    emb_ms: Curve  # ms per batch: the embedding lookup


def isotonic(values: FloatArray) -> FloatArray:
    """Least-squares non-decreasing fit: pool adjacent violators."""
    means: list[float] = []
    counts: list[int] = []
    for value in values.tolist():
        means.append(value)
        counts.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            mean, count = means.pop(), counts.pop()
            means[-1] = (means[-1] * counts[-1] + mean * count) / (counts[-1] + count)
            counts[-1] += count
    return np.repeat(np.array(means), counts)


def op_curves(gpu: GPUSpec, model: str, tp: int) -> OpCurves:
    """Monotone operator curves of `model` on `gpu` at tensor-parallel degree `tp`."""
    per_tp = load_table(gpu.op_table(model))["tp"]
    if str(tp) not in per_tp:
        raise ValueError(
            f"no operator table for {model} at tp={tp}; tables exist for {sorted(per_tp)}"
        )
    table = per_tp[str(tp)]
    tokens = table["num_tokens"]
    return OpCurves(Curve.fit(tokens, table["layer_ms"]), Curve.fit(tokens, table["emb_ms"]))


def all_reduce_curve(gpu: GPUSpec, num_workers: int) -> Curve:
    """Monotone all-reduce time (ms) by message size (bytes) among `num_workers` GPUs."""
    per_workers = load_table(gpu.all_reduce_table)["num_workers"]
    if str(num_workers) not in per_workers:
        raise ValueError(
            f"no all-reduce table for {num_workers} workers on {gpu.name}; "
            f"tables exist for {sorted(per_workers)}"
        )
    table = per_workers[str(num_workers)]
    return Curve.fit(table["size_bytes"], table["ms"])


def available_tp(gpu: GPUSpec, model: str) -> tuple[int, ...]:
    """TP degrees with an operator table and, beyond 1, an all-reduce table."""
    op_tp = {int(tp) for tp in load_table(gpu.op_table(model))["tp"]}
    workers = {int(w) for w in load_table(gpu.all_reduce_table)["num_workers"]}
    return tuple(sorted(tp for tp in op_tp if tp == 1 or tp in workers))
