"""Online learning: executed batches feed a bounded buffer, a background thread refits.

The scheduling path only appends to the buffer (`record`) and reads `predictor`, a single
reference that a refit replaces atomically; it never waits on a fit. Garbage never reaches
the buffer: a measurement whose time is not finite, not positive or absurd (above
`max_step_seconds`), or whose batch is empty or its features not finite, is dropped and
counted; one such sample would otherwise sit in the buffer and spoil every refit until it
is evicted. A refit that raises leaves the last good predictor in place. A listener
(`on_refit`) is handed the same sample snapshot at every refit, so that a policy keeping a
model of its own learns from the same measurements, equally often.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slidingserve.core.batch import BatchShape
from slidingserve.predictor.features import BatchFeatures, Sample, batch_features
from slidingserve.predictor.fit import fit_predictor

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import TracebackType

    from slidingserve.predictor.fit import FitResult
    from slidingserve.predictor.model import BatchLatencyPredictor

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OnlineConfig:
    """When and on what the online learner refits."""

    buffer_size: int = 20_000  # most recent samples kept
    refit_every: int = 1_000  # refit after this many new samples...
    refit_interval: float = 30.0  # ...or after this many seconds with any new sample
    min_samples: int = 200  # no refit below this many samples in the buffer
    validation_fraction: float = 0.2
    min_samples_per_scenario: int = 30
    seed: int = 0  # refit k splits its samples with seed + k
    # A step measured slower than this (seconds) is a stall or a broken clock, not a batch
    # time: even a full prefill batch of a large model takes about a second.
    max_step_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.buffer_size < 1 or self.refit_every < 1 or self.min_samples < 1:
            raise ValueError("buffer_size, refit_every and min_samples must be ≥ 1")
        if not self.refit_interval > 0:
            raise ValueError(f"refit_interval must be positive, got {self.refit_interval}")
        if not self.max_step_seconds > 0:
            raise ValueError(f"max_step_seconds must be positive, got {self.max_step_seconds}")


class OnlineLearner:
    """Keeps a predictor fitted to the most recent measured batches.

    `record` is called from the scheduling path after every iteration (O(1), no fit);
    a background thread started by `start` refits every `refit_every` new samples or
    `refit_interval` seconds and swaps the new predictor in; `refit_now` does one refit in
    the calling thread (deterministic, for tests and offline use). A failed refit is
    logged and the previous predictor stays. Every refit weighs the feature set of the
    initial predictor ("paper" stays paper, "rich" stays rich).

    `on_refit`, if given, is called after every refit attempt (successful or not) with the
    very samples that refit used, in the same thread; if it raises, the error is logged and
    counted in `num_listener_failures`, and the learner carries on.
    """

    def __init__(
        self,
        initial: BatchLatencyPredictor,
        config: OnlineConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_refit: Callable[[Sequence[Sample]], None] | None = None,
    ) -> None:
        self.config = config or OnlineConfig()
        self._predictor = initial
        self._clock = clock
        self._on_refit = on_refit
        self._buffer: deque[Sample] = deque(maxlen=self.config.buffer_size)
        self._buffer_lock = threading.Lock()  # held only to append or copy the buffer
        self._fit_lock = threading.Lock()  # one refit at a time
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._recorded = 0  # samples ever recorded (written by record only)
        self._fitted_upto = 0  # value of _recorded at the last refit's snapshot
        self._last_check = clock()  # time of the last refit or refit attempt
        self._dropped = 0
        self._num_fits = 0
        self._num_failures = 0
        self._num_listener_failures = 0

    @property
    def predictor(self) -> BatchLatencyPredictor:
        """The current predictor; never blocks."""
        return self._predictor

    @property
    def num_fits(self) -> int:
        """Successful refits so far."""
        return self._num_fits

    @property
    def num_failures(self) -> int:
        """Refits that raised (logged, predictor unchanged)."""
        return self._num_failures

    @property
    def num_listener_failures(self) -> int:
        """Calls of `on_refit` that raised (logged; the learner carried on)."""
        return self._num_listener_failures

    @property
    def num_dropped(self) -> int:
        """Measurements dropped as garbage: a time not finite, not positive or above
        `max_step_seconds`, an empty batch, or features not finite."""
        return self._dropped

    @property
    def num_samples(self) -> int:
        """Samples in the buffer now."""
        return len(self._buffer)

    def record(self, batch: BatchShape | BatchFeatures, measured_seconds: float) -> None:
        """Add one executed batch and its measured time (seconds). O(1) for features.

        Garbage is dropped (counted in `num_dropped`): a time that is not finite, not
        positive or above `max_step_seconds`, an empty batch, or features that are not
        finite.
        """
        if not 0 < measured_seconds <= self.config.max_step_seconds:  # False for NaN too
            self._dropped += 1
            return
        if isinstance(batch, BatchShape):
            if not batch.num_tokens:  # nothing ran: no scenario, nothing to learn
                self._dropped += 1
                return
            batch = batch_features(batch)
        if not all(map(math.isfinite, batch.x)):
            self._dropped += 1
            return
        sample = Sample(batch.scenario, batch.x, measured_seconds)
        with self._buffer_lock:
            self._buffer.append(sample)
            self._recorded += 1
        new = self._recorded - self._fitted_upto
        if new >= self.config.refit_every and len(self._buffer) >= self.config.min_samples:
            self._wake.set()

    def refit_now(self) -> FitResult | None:
        """Refit on the buffer in this thread and swap the result in.

        Returns None without fitting when the buffer holds fewer than `min_samples`, or
        when the fit failed (the error is logged). `on_refit` is called in either case
        once there were enough samples.
        """
        with self._fit_lock:
            with self._buffer_lock:
                samples = list(self._buffer)
                recorded = self._recorded
            self._last_check = self._clock()
            if len(samples) < self.config.min_samples:
                return None
            self._fitted_upto = recorded
            result = self._fit(samples)
            self._notify(samples)
            return result

    def _fit(self, samples: list[Sample]) -> FitResult | None:
        config = self.config
        try:
            result = fit_predictor(
                samples,
                validation_fraction=config.validation_fraction,
                seed=config.seed + self._num_fits,
                min_samples_per_scenario=config.min_samples_per_scenario,
                features=self._predictor.features,
            )
        except Exception:
            # Any error of a fit (singular data, a numerical failure) must leave the engine
            # running on the previous predictor: counted and logged, never raised.
            self._num_failures += 1
            logger.exception(
                "online refit on %d samples failed; keeping the old predictor", len(samples)
            )
            return None
        self._predictor = result.predictor  # the atomic swap readers see
        self._num_fits += 1
        return result

    def _notify(self, samples: Sequence[Sample]) -> None:
        """Hand the refit's samples to the listener; a failure is counted and logged."""
        if self._on_refit is None:
            return
        try:
            self._on_refit(samples)
        except Exception:
            # The listener is another component's model (a policy's own predictor): its
            # failure must not stop the shared predictor's refits nor the engine.
            self._num_listener_failures += 1
            logger.exception(
                "refit listener failed on %d samples; it keeps its old model", len(samples)
            )

    def start(self) -> None:
        """Start the background refit thread (once)."""
        if self._thread is not None:
            raise RuntimeError("online learner already started")
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="predictor-refit", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the background thread and wait for it (at most `timeout` seconds)."""
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        self._wake.set()
        thread.join(timeout)
        self._thread = None

    def __enter__(self) -> OnlineLearner:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        while True:
            self._wake.wait(timeout=self._seconds_to_deadline())
            self._wake.clear()
            if self._stopping.is_set():
                return
            if self._refit_due():
                self.refit_now()
            elif self._seconds_to_deadline() <= 0:
                self._last_check = self._clock()  # nothing new: wait another interval

    def _refit_due(self) -> bool:
        new = self._recorded - self._fitted_upto
        if new >= self.config.refit_every:
            return True
        return new > 0 and self._seconds_to_deadline() <= 0

    def _seconds_to_deadline(self) -> float:
        return max(0.0, self._last_check + self.config.refit_interval - self._clock())
