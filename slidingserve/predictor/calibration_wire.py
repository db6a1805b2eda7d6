"""How a `Calibration` travels to worker processes: its timed batches as a few flat arrays,
and each worker decodes one calibration once.

A goodput run sends every simulation task its calibration: 4,000 timed batches, 460 KB of
pickled tuples that took 38 ms to pickle in the parent and 24 ms to unpickle in the worker,
a second of CPU per 16 tasks on a machine where the parent shares the workers' cores. As
arrays the batches pickle as a copy of memory; the parent encodes them once per
calibration, and a worker that has already decoded a calibration with the same fingerprint
(every task of a run shares one) takes its copy instead of building 4,000 batches again.
The decoded batches are equal to the encoded ones, value and type: the wire changes no
figure.
"""

from __future__ import annotations

import hashlib
import pickle
from collections import OrderedDict
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from slidingserve.core.batch import BatchShape, TimedBatch

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from numpy.typing import NDArray

DECODED_KEPT = 8  # calibrations a worker keeps decoded (one per GPU of a run)


class BatchArrays(NamedTuple):
    """Timed batches as flat arrays: per batch its decode and prefill counts and its time,
    then every decode context and every (chunk, cached) pair, batch after batch."""

    decode_counts: NDArray[np.int32]
    prefill_counts: NDArray[np.int32]
    seconds: NDArray[np.float64]
    decode_contexts: NDArray[np.int32]
    prefill_pairs: NDArray[np.int32]  # chunk, cached, chunk, cached, ...


def encode_batches(batches: Sequence[TimedBatch]) -> BatchArrays:
    """`batches` as `BatchArrays`."""
    count = len(batches)
    shapes = [batch.shape for batch in batches]
    return BatchArrays(
        np.fromiter((len(s.decode_contexts) for s in shapes), np.int32, count),
        np.fromiter((len(s.prefill_chunks) for s in shapes), np.int32, count),
        np.fromiter((batch.seconds for batch in batches), np.float64, count),
        np.fromiter(chain.from_iterable(s.decode_contexts for s in shapes), np.int32),
        np.fromiter(chain.from_iterable(chain.from_iterable(s.prefill_chunks) for s in shapes),
                    np.int32),
    )  # fmt: skip


def decode_batches(arrays: BatchArrays) -> tuple[TimedBatch, ...]:
    """The timed batches `arrays` encode, with Python ints and floats."""
    contexts = arrays.decode_contexts.tolist()
    pairs = arrays.prefill_pairs.tolist()
    batches = []
    decode_at = pair_at = 0
    for decodes, prefills, seconds in zip(
        arrays.decode_counts.tolist(),
        arrays.prefill_counts.tolist(),
        arrays.seconds.tolist(),
        strict=True,
    ):
        chunk_values = pairs[pair_at : pair_at + 2 * prefills]
        chunks = tuple(zip(chunk_values[::2], chunk_values[1::2], strict=True))
        shape = BatchShape(tuple(contexts[decode_at : decode_at + decodes]), chunks)
        batches.append(TimedBatch(shape, seconds))
        decode_at += decodes
        pair_at += 2 * prefills
    return tuple(batches)


class Wire(NamedTuple):
    """What is pickled for one calibration: the fingerprint of all of it, the batches as
    arrays, and the rest (small) as itself."""

    fingerprint: str
    batches: BatchArrays
    rest: tuple[object, ...]


def make_wire(batches: Sequence[TimedBatch], rest: tuple[object, ...]) -> Wire:
    """The wire of `batches` and `rest`, fingerprinted by every array's bytes and `rest`."""
    arrays = encode_batches(batches)
    digest = hashlib.blake2b(digest_size=16)
    for array in arrays:
        digest.update(array.tobytes())
        digest.update(b"|")
    digest.update(pickle.dumps(rest))
    return Wire(digest.hexdigest(), arrays, rest)


class DecodedCache:
    """The last `DECODED_KEPT` objects built from wires in this process, by fingerprint."""

    def __init__(self, kept: int = DECODED_KEPT) -> None:
        self.kept = kept
        self._objects: OrderedDict[str, object] = OrderedDict()

    def get_or_build(self, wire: Wire, build: Callable[[tuple[TimedBatch, ...]], object]) -> object:
        """The object of `wire.fingerprint` built earlier, else `build(decoded batches)`."""
        found = self._objects.get(wire.fingerprint)
        if found is None:
            found = build(decode_batches(wire.batches))
            self._objects[wire.fingerprint] = found
            while len(self._objects) > self.kept:
                self._objects.popitem(last=False)
        else:
            self._objects.move_to_end(wire.fingerprint)
        return found
