"""A seeded stream of multiplicative noise factors on iteration times."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
FactorDraw = Callable[[np.random.Generator, int], FloatArray]
"""Draws `count` fresh factors from the generator."""

BLOCK = 4096  # factors drawn per numpy call
PROFILE_STREAM = 1  # spawn key of a profiler's stream, apart from every trial's seed
NOISE_DRAW_STREAM = 2  # spawn key of a trial's further noise draws (`noise_draw_seed`)

Seed = int | np.random.SeedSequence


def profiling_seed(seed: int) -> np.random.SeedSequence:
    """The stream a profiler draws for `seed`: `seed`'s `PROFILE_STREAM` child, which no
    trial (seeded with a plain int) ever draws, so the noise a policy is calibrated on is
    not the noise it is judged on."""
    return np.random.SeedSequence(seed, spawn_key=(PROFILE_STREAM,))


def noise_draw_seed(seed: int, draw: int) -> Seed:
    """The noise of draw `draw` of the trial seeded `seed`: draw 0 is `seed` itself (the
    trial as it always ran), a later one `seed`'s `NOISE_DRAW_STREAM` child of that number,
    which no other trial and no profiler draws. Simulating a trial again with other noise
    (the same requests, the same engine) measures how much of a figure is noise."""
    if draw < 0:
        raise ValueError(f"a noise draw is a number >= 0, got {draw}")
    if draw == 0:
        return seed
    return np.random.SeedSequence(seed, spawn_key=(NOISE_DRAW_STREAM, draw))


class NoiseStream:
    """Factors read in order from a seeded generator, drawn `BLOCK` at a time.

    `next` reads one factor; `peek` looks at the next few without reading them, and
    `consume` then reads as many of those as were used, so a caller that looks ahead (a
    fast-forwarded decode run) reads exactly the factors step-by-step calls would.
    """

    def __init__(self, draw: FactorDraw, seed: Seed) -> None:
        self._draw = draw
        self._rng = np.random.default_rng(seed)
        self._array: FloatArray = np.empty(0)
        self._values: list[float] = []  # the same factors as _array, for scalar reads
        self._next = 0

    def next(self) -> float:
        if self._next == len(self._values):
            self._ensure(1)
        factor = self._values[self._next]
        self._next += 1
        return factor

    def peek(self, count: int) -> FloatArray:
        """The next `count` factors, left unread."""
        self._ensure(count)
        return self._array[self._next : self._next + count]

    def consume(self, count: int) -> None:
        """Read `count` factors that `peek` showed."""
        if not 0 <= count <= len(self._values) - self._next:
            raise ValueError(f"cannot consume {count} noise factors: only looked at fewer")
        self._next += count

    def _ensure(self, count: int) -> None:
        unread = len(self._values) - self._next
        if unread >= count:
            return
        blocks = -(-(count - unread) // BLOCK)
        fresh = self._draw(self._rng, blocks * BLOCK)
        self._array = np.concatenate([self._array[self._next :], fresh])
        self._values = self._array.tolist()
        self._next = 0
