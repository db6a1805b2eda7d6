"""The measured tables behind the latency model, as monotone piecewise-linear curves.

The profiles hold medians exactly as they were measured; measurement noise makes them
wiggle (a 2-token batch measured faster than a 1-token one). The ground truth must never get
faster when work is added, so every curve is made non-decreasing here by a least-squares
isotonic fit before it is used.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

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
