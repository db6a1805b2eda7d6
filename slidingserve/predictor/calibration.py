"""What a profiler hands the policies: timed batches and the predictors fitted to them.

Built by whichever engine profiles (the simulator's modelled GPU, a simulated copy of a real
engine, a real vLLM engine); every policy of a run gets the same calibration. It holds one
predictor per feature set, fitted to the same batches with the same split: `predictor` is
the one of its `features` (rich by default), `predictor_for("paper")` the paper's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slidingserve.core.batch import TimedBatch
from slidingserve.predictor.calibration_wire import DecodedCache, Wire, make_wire
from slidingserve.predictor.features import DEFAULT_FEATURES, FEATURE_SETS, Sample, feature_set
from slidingserve.predictor.fit import FitResult, fit_predictor
from slidingserve.predictor.model import BatchLatencyPredictor
from slidingserve.predictor.sampling import random_batch_shapes

if TYPE_CHECKING:
    import numpy as np

    from slidingserve.core.batch import BatchShape
    from slidingserve.core.view import EngineLimits

DEFAULT_SAMPLES = 4000  # timed batches a profiler draws
MIN_SAMPLES = 50  # fewer cannot fit and validate the predictor


@dataclass(frozen=True)
class Calibration:
    """Timed batches of one GPU and a predictor of every feature set fitted to them."""

    batches: tuple[TimedBatch, ...]
    predictors: Mapping[str, BatchLatencyPredictor]  # by feature set name
    features: str = DEFAULT_FEATURES  # the feature set of `predictor`

    def __post_init__(self) -> None:
        if self.features not in self.predictors:
            raise ValueError(f"no {self.features!r} predictor among {list(self.predictors)}")

    @property
    def predictor(self) -> BatchLatencyPredictor:
        """The predictor the policies plan with: the one of `features`."""
        return self.predictors[self.features]

    def predictor_for(self, features: str) -> BatchLatencyPredictor:
        """The predictor of the feature set `features` ("paper" or "rich")."""
        return self.predictors[feature_set(features).name]

    def __copy__(self) -> Calibration:
        return self  # immutable: a copy would be the same (and `__reduce__` is for pickling)

    def __deepcopy__(self, memo: dict[int, object]) -> Calibration:
        predictors = copy.deepcopy(dict(self.predictors), memo)
        return Calibration(self.batches, predictors, self.features)

    def __reduce__(self) -> tuple[Callable[[Wire], Calibration], tuple[Wire]]:
        """Pickled as a `Wire` (`calibration_wire.py`), encoded once per calibration; an
        unpickled calibration may be shared with other tasks of the same process."""
        wire = self.__dict__.get("_wire")
        if wire is None:
            wire = make_wire(self.batches, (dict(self.predictors), self.features))
            object.__setattr__(self, "_wire", wire)
        return (_calibration_from_wire, (wire,))


_DECODED = DecodedCache()  # the calibrations this process unpickled


def _calibration_from_wire(wire: Wire) -> Calibration:
    """The calibration `wire` carries: the one this process decoded from the same
    fingerprint before, else a new one."""

    def build(batches: tuple[TimedBatch, ...]) -> Calibration:
        predictors, features = wire.rest
        calibration = Calibration(batches, predictors, features)  # type: ignore[arg-type]
        object.__setattr__(calibration, "_wire", wire)  # sent on again without encoding
        return calibration

    found = _DECODED.get_or_build(wire, build)
    assert isinstance(found, Calibration)
    return found


def fit_batches(
    batches: list[TimedBatch],
    seed: int = 0,
    validation_fraction: float = 0.25,
    features: str = DEFAULT_FEATURES,
) -> FitResult:
    """Fit the predictor of the feature set `features`; its validation report is measured
    on held-out batches."""
    samples = [Sample.from_shape(batch.shape, batch.seconds) for batch in batches]
    return fit_predictor(samples, validation_fraction, seed, features=features)


def profiling_shapes(
    num_samples: int, rng: np.random.Generator, limits: EngineLimits, max_context: int
) -> list[BatchShape]:
    """The random batches a profiler times: within the engine's token budget, batch-size cap
    and context length. ValueError below `MIN_SAMPLES`."""
    if num_samples < MIN_SAMPLES:
        raise ValueError(
            f"need at least {MIN_SAMPLES} samples to fit and validate, got {num_samples}"
        )
    return random_batch_shapes(
        num_samples,
        rng,
        max_tokens=limits.max_num_batched_tokens,
        max_context=max_context,
        max_decodes=min(limits.max_num_seqs, limits.max_num_batched_tokens),
    )


def calibration_of(
    batches: list[TimedBatch], seed: int = 0, features: str = DEFAULT_FEATURES
) -> Calibration:
    """`batches` and a predictor of every feature set fitted to them, for every policy of a
    run to share; `features` names the one they plan with."""
    predictors = {
        name: fit_batches(batches, seed, features=name).predictor for name in FEATURE_SETS
    }
    return Calibration(tuple(batches), predictors, feature_set(features).name)
