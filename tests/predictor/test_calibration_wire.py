"""How a calibration travels to worker processes (`predictor/calibration_wire.py`)."""

from __future__ import annotations

import copy
import pickle

from hypothesis import given
from hypothesis import strategies as st

from slidingserve.core.batch import BatchShape, TimedBatch
from slidingserve.predictor.calibration import Calibration, calibration_of
from slidingserve.predictor.calibration_wire import (
    DecodedCache,
    decode_batches,
    encode_batches,
    make_wire,
)

shapes = st.builds(
    BatchShape,
    st.lists(st.integers(0, 100_000), max_size=6).map(tuple),
    st.lists(st.tuples(st.integers(1, 8192), st.integers(0, 100_000)), max_size=4).map(tuple),
)
batches = st.lists(
    st.builds(TimedBatch, shapes, st.floats(1e-6, 10.0, allow_nan=False)), max_size=30
)


def _some_batches(count: int, scale: float = 1.0) -> list[TimedBatch]:
    return [
        TimedBatch(BatchShape((i, 2 * i), ((16 + i, i),)), scale * (0.01 + 1e-4 * i))
        for i in range(count)
    ]


@given(batches)
def test_batches_come_back_equal_with_python_numbers(timed: list[TimedBatch]) -> None:
    decoded = decode_batches(encode_batches(timed))
    assert decoded == tuple(timed)
    for batch in decoded:
        assert all(type(u) is int for u in batch.shape.decode_contexts)
        assert all(type(v) is int for pair in batch.shape.prefill_chunks for v in pair)
        assert type(batch.seconds) is float


def test_a_pickled_calibration_is_equal_and_decoded_once_per_process() -> None:
    calibration = calibration_of(_some_batches(80))
    first = pickle.loads(pickle.dumps(calibration))
    second = pickle.loads(pickle.dumps(calibration))
    assert first == calibration
    assert first.predictor == calibration.predictor
    assert second is first  # the same fingerprint: this process's copy


def test_another_calibration_has_another_fingerprint() -> None:
    one, other = _some_batches(60), _some_batches(60, scale=1.5)
    assert make_wire(one, ()).fingerprint != make_wire(other, ()).fingerprint
    assert make_wire(one, ("rich",)).fingerprint != make_wire(one, ("paper",)).fingerprint
    calibration = calibration_of(other)
    assert pickle.loads(pickle.dumps(calibration)).batches == tuple(other)


def test_the_cache_keeps_the_latest_few() -> None:
    cache = DecodedCache(kept=2)
    built: list[int] = []

    def build(timed: tuple[TimedBatch, ...]) -> object:
        built.append(len(timed))
        return Calibration.__new__(Calibration)

    wires = [make_wire(_some_batches(n), ()) for n in (1, 2, 3)]
    for wire in wires:
        cache.get_or_build(wire, build)
    cache.get_or_build(wires[2], build)  # kept
    cache.get_or_build(wires[0], build)  # dropped: built again
    assert built == [1, 2, 3, 1]


def test_a_deep_copy_is_the_caller_s_own() -> None:
    calibration = calibration_of(_some_batches(70))
    pickle.loads(pickle.dumps(calibration))  # this process now holds a decoded copy
    deep = copy.deepcopy(calibration)
    assert deep == calibration and deep is not calibration
    assert deep.predictors is not calibration.predictors
    assert copy.copy(calibration) is calibration  # immutable
