"""Output lengths as a policy may learn them: from the requests that leave the engine.

No policy is told a request's output length. What every scheduler sees is each running
request's tokens so far and, once it has finished, its absence from both queues (vLLM
reports the finished request with its tokens). `OutputLengths` keeps the lengths of the
requests that have left and answers how many more tokens a running request is expected to
emit, given how many it has emitted: the mean of the lengths seen beyond that count, less
the count.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import deque
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from slidingserve.core.request import Request

SHAREGPT_MEAN_OUTPUT = 439
"""Mean output length, tokens, of the embedded ShareGPT distribution (the default workload);
arXiv's is 293. The prior of every learner that assumes one number before requests leave."""

MIN_SAMPLES = 20  # requests that must have left before the learned lengths replace the prior
MIN_TAIL = 5  # lengths beyond a request's count needed for a conditional mean
MAX_SAMPLES = 4096  # the most recent lengths kept

Seen = TypeVar("Seen")


def departures(
    before: Mapping[str, Seen], running: Mapping[str, object], waiting: Iterable[Request]
) -> list[Seen]:
    """What `before` (by request id, in its order) holds of the requests that were running
    and are now in neither `running` (by request id) nor `waiting`: those that finished. A
    preempted request is back in `waiting` and has not left."""
    gone = before.keys() - running.keys()
    if not gone:
        return []
    gone -= {r.request_id for r in waiting}
    return [seen for key, seen in before.items() if key in gone]


class OutputLengths:
    """The output lengths of the requests that have left, most recent `MAX_SAMPLES`, and
    the expected remaining output of a running request."""

    def __init__(self, prior: float) -> None:
        self.prior = prior  # tokens: the mean output assumed until `MIN_SAMPLES` have left
        self.lengths: deque[int] = deque(maxlen=MAX_SAMPLES)  # in the order they left
        self._ordered: list[int] = []  # the same lengths, ascending
        self._total = 0  # their sum
        self._running: dict[str, Request] = {}
        # `_ordered` as an array and the sums of its tails (`remaining_each`), built when
        # read after a change
        self._table: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None

    def observe(self, running: Iterable[Request], waiting: Iterable[Request]) -> None:
        """Fold in the requests that were running and are now in neither queue (they
        finished; a preempted one is back in `waiting`), with the tokens they emitted."""
        now_running = {r.request_id: r for r in running}
        for request in departures(self._running, now_running, waiting):
            if request.num_generated:
                self._add(request.num_generated)
        self._running = now_running

    def _add(self, length: int) -> None:
        if len(self.lengths) == MAX_SAMPLES:
            oldest = self.lengths[0]
            del self._ordered[bisect_left(self._ordered, oldest)]
            self._total -= oldest
        self.lengths.append(length)
        insort(self._ordered, length)
        self._total += length
        self._table = None

    @property
    def mean(self) -> float:
        """Tokens: the mean of the lengths seen, or the prior before `MIN_SAMPLES`."""
        if len(self.lengths) < MIN_SAMPLES:
            return self.prior
        return self._total / len(self.lengths)

    def remaining(self, generated: int) -> float:
        """Tokens a request that has emitted `generated` is expected still to emit: the
        mean excess over `generated` of the lengths seen beyond it (at least `MIN_TAIL`
        of them); a request longer than nearly all of them, or any before `MIN_SAMPLES`
        have left, is taken to emit a mean output more."""
        if len(self.lengths) < MIN_SAMPLES:
            return self.prior
        ordered = self._ordered
        first = bisect_right(ordered, generated)
        tail = len(ordered) - first
        if tail < MIN_TAIL:
            return self._total / len(ordered)
        return sum(ordered[first:]) / tail - generated

    def most_remaining(self) -> float:
        """Tokens no request is expected still to emit more than (`remaining` is never
        above it): the prior before `MIN_SAMPLES` have left, then the longest length seen."""
        if len(self.lengths) < MIN_SAMPLES:
            return self.prior
        return float(self._ordered[-1])

    def remaining_each(self, generated: Sequence[int]) -> npt.NDArray[np.float64]:
        """`remaining` of each count in `generated`, the same figures, in one pass."""
        counts = np.asarray(generated, dtype=np.int64)
        size = len(self.lengths)
        if size < MIN_SAMPLES:
            return np.full(counts.shape, float(self.prior))
        ordered, tails = self._tail_sums()
        first = np.searchsorted(ordered, counts, side="right")
        tail = size - first
        beyond = tails[first] / np.maximum(tail, 1) - counts
        return np.where(tail < MIN_TAIL, self._total / size, beyond)

    def _tail_sums(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The lengths ascending and, at each index i, the sum of those from i on (one
        more entry, 0, past the end)."""
        if self._table is None:
            ordered = np.array(self._ordered, dtype=np.int64)
            tails = np.zeros(ordered.size + 1, dtype=np.int64)
            tails[:-1] = np.cumsum(ordered[::-1])[::-1]
            self._table = (ordered, tails)
        return self._table
