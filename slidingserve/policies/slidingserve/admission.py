"""The decode side of the queue-aware admission test (`admission_test=queue`): a request
admitted becomes a decode, and where the decodes alone take longer than the tightest TBT
every decode falls behind, whatever the budget does. A request is admitted only while the
decodes, the requests queued to become decodes and it would still run a decode-only step
within that TBT (÷ the margin), as the predictor sees it: SCORPIO's TPOT gate, applied at
admission instead of each step [beyond the paper].
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

from slidingserve.core.batch import BatchShape

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView
    from slidingserve.policies.base import IterationRecord
    from slidingserve.policies.slidingserve.stats import TimedModel

MAX_SEATS = 256  # the most seats `decode_seats` counts
OVERHEAD_DECAY = 0.9  # EMA weight of the old step overhead at each observed step


def decode_step_time(model: TimedModel, contexts: Sequence[int]) -> float:
    """Predicted seconds of a decode-only step over decodes of `contexts` cached tokens."""
    return model.predict_shape(BatchShape(tuple(contexts), ()))


def fits_decodes(model: TimedModel, contexts: Sequence[int], limit: float) -> bool:
    """Whether a decode-only step over `contexts` is predicted within `limit` seconds."""
    return not contexts or decode_step_time(model, contexts) <= limit


def decode_seats(model: TimedModel, contexts: Sequence[int], context: int, limit: float) -> int:
    """How many more decodes of `context` tokens fit beside `contexts` within `limit`
    seconds (at most `MAX_SEATS`; the predicted time grows with every decode added)."""
    low, high = 0, MAX_SEATS  # low fits, high + 1 does not
    if fits_decodes(model, [*contexts, *[context] * MAX_SEATS], limit):
        return MAX_SEATS
    high = MAX_SEATS - 1
    while low < high:
        middle = (low + high + 1) // 2
        if fits_decodes(model, [*contexts, *[context] * middle], limit):
            low = middle
        else:
            high = middle - 1
    return low


class DecodeRoom:
    """The decodes an admission test has taken so far: those running, those queued to
    become decodes, and the requests it admits (`take`), against the tightest TBT of all
    of them ÷ `margin`, less the engine's `overhead` a step."""

    def __init__(
        self,
        model: TimedModel,
        contexts: list[int],
        tbt: float,
        margin: float,
        overhead: float = 0.0,
    ) -> None:
        self.model = model
        self.contexts = contexts  # cached tokens of each decode, now or once prefilled
        self.tbt = tbt  # seconds, the tightest TBT among them (inf without any)
        self.margin = margin
        self.overhead = overhead  # seconds of each step outside the model (`StepOverhead`)

    def _limit(self, tbt: float) -> float:
        """The model time a decode-only step may take."""
        return tbt / self.margin - self.overhead

    def take(self, request: Request) -> bool:
        """Whether `request`, as one more decode, keeps a decode-only step within the
        tightest TBT ÷ the margin; if so it is taken."""
        tbt = min(self.tbt, request.slo.tbt)
        contexts = [*self.contexts, request.prefill_target]
        if not fits_decodes(self.model, contexts, self._limit(tbt)):
            return False
        self.contexts, self.tbt = contexts, tbt
        return True

    def seats(self, context: int) -> int:
        """How many more decodes of `context` tokens fit (`decode_seats`)."""
        return decode_seats(self.model, self.contexts, context, self._limit(self.tbt))


class StepOverhead:
    """The time between an engine's steps that is not the model's: an EMA of the gap from
    one iteration's end to the next one's start, after iterations that ran decodes and left
    the engine with requests (it then steps again at once, so the gap is its own
    bookkeeping and whatever else shares its processor, not idleness: `note_view` tells).
    Zero in the simulator; on vLLM the Python work around each step, which a predictor of
    the model's time does not see."""

    def __init__(self) -> None:
        self.seconds = 0.0  # EMA of the gap, seconds
        self.model_seconds = 0.0  # EMA of the model time of the same iterations
        self._previous: IterationRecord | None = None
        self._idle = False  # the engine had no request when `_previous` ended

    def note_view(self, view: SchedulerView) -> None:
        """Read, before the next iteration, whether the engine had requests when the last
        one observed ended: one present now that had arrived by then. Without any it sat
        idle until an arrival, and the gap to the next iteration is not overhead (a gap
        the length of a pause in the traffic would otherwise stand for seconds of overhead
        a step, and refuse every request that follows). A request that ended or was
        aborted since that step is not seen: the gap then goes uncounted, the safe side."""
        previous = self._previous
        if previous is None:
            return
        end = previous.start + previous.duration
        self._idle = not any(r.arrival <= end for r in chain(view.running, view.waiting))

    def observe(self, record: IterationRecord) -> None:
        previous, self._previous = self._previous, record
        idle, self._idle = self._idle, False
        if previous is None or not previous.shape.num_decodes or idle:
            return
        gap = max(0.0, record.start - (previous.start + previous.duration))
        self.seconds = OVERHEAD_DECAY * self.seconds + (1 - OVERHEAD_DECAY) * gap
        self.model_seconds = (
            OVERHEAD_DECAY * self.model_seconds + (1 - OVERHEAD_DECAY) * previous.duration
        )

    def skip(self) -> None:
        """The next iteration does not follow the last one observed: the simulator ran
        decode-only steps between them without a record each (`on_decode_run`)."""
        self._previous = None

    @property
    def model_share(self) -> float:
        """The share of a step's wall time that is the model's (1 without overhead)."""
        total = self.model_seconds + self.seconds
        return self.model_seconds / total if total > 0 else 1.0
