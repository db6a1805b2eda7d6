"""Output lengths as a policy may learn them: from the requests that leave the engine.

No policy is told a request's output length. What every scheduler sees is each running
request's tokens so far and, once it has finished, its absence from both queues (vLLM
reports the finished request with its tokens). `OutputLengths` keeps the lengths of the
requests that have left and answers how many more tokens a running request is expected to
emit, given how many it has emitted: the mean of the lengths seen beyond that count, less
the count.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterable

    from slidingserve.core.request import Request

SHAREGPT_MEAN_OUTPUT = 439
"""Mean output length, tokens, of the embedded ShareGPT distribution (the default workload);
arXiv's is 293. The prior of every learner that assumes one number before requests leave."""

MIN_SAMPLES = 20  # requests that must have left before the learned lengths replace the prior
MIN_TAIL = 5  # lengths beyond a request's count needed for a conditional mean
MAX_SAMPLES = 4096  # the most recent lengths kept


class OutputLengths:
    """The output lengths of the requests that have left, most recent `MAX_SAMPLES`, and
    the expected remaining output of a running request."""

    def __init__(self, prior: float) -> None:
        self.prior = prior  # tokens: the mean output assumed until `MIN_SAMPLES` have left
        self.lengths: deque[int] = deque(maxlen=MAX_SAMPLES)
        self._running: dict[str, Request] = {}
        self._sorted: np.ndarray | None = None  # `lengths` sorted, with suffix sums
        self._suffix: np.ndarray | None = None

    def observe(self, running: Iterable[Request], waiting: Iterable[Request]) -> None:
        """Fold in the requests that were running and are now in neither queue (they
        finished; a preempted one is back in `waiting`), with the tokens they emitted."""
        now_running = {r.request_id: r for r in running}
        departed = self._running.keys() - now_running.keys()
        if departed:
            departed -= {r.request_id for r in waiting}
            for key, request in self._running.items():  # in admission order
                if key in departed and request.num_generated:
                    self.lengths.append(request.num_generated)
                    self._sorted = None
        self._running = now_running

    @property
    def mean(self) -> float:
        """Tokens: the mean of the lengths seen, or the prior before `MIN_SAMPLES`."""
        if len(self.lengths) < MIN_SAMPLES:
            return self.prior
        return sum(self.lengths) / len(self.lengths)

    def remaining(self, generated: int) -> float:
        """Tokens a request that has emitted `generated` is expected still to emit: the
        mean excess over `generated` of the lengths seen beyond it (at least `MIN_TAIL`
        of them); a request longer than nearly all of them, or any before `MIN_SAMPLES`
        have left, is taken to emit a mean output more."""
        if len(self.lengths) < MIN_SAMPLES:
            return self.prior
        ordered, suffix = self._tables()
        first = int(np.searchsorted(ordered, generated, side="right"))
        tail = len(ordered) - first
        if tail < MIN_TAIL:
            return float(suffix[0]) / len(ordered)
        return float(suffix[first]) / tail - generated

    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        if self._sorted is None or self._suffix is None:
            self._sorted = np.sort(np.fromiter(self.lengths, dtype=np.int64))
            self._suffix = np.concatenate((np.cumsum(self._sorted[::-1])[::-1], [0]))
        return self._sorted, self._suffix
