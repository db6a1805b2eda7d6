"""Rules more than one policy applies, each written once: the earliest-deadline order, the
test of a prefill that cannot finish by its deadline at a given rate, eager relegation
(QoServe's, also a SlidingServe triage), QoServe's low-memory test (also SlidingServe's
`low_memory_cap`) and the prefill-rate EMA.

**A rate of zero.** `prefill_seconds` reads ρ = 0 as what it says, no prefill progress: a
request with prompt tokens left never finishes (infinite time), one with none left
finishes now. So `cannot_finish_prefill` is true at ρ = 0 for every request with prefill
left. Who can meet a zero rate:

- QoServe never does: its ρ_EMA starts positive (the config requires it) and only folds in
  positive observations.
- SlidingServe's admission control never does: it uses the predictor's rate of a full
  prefill batch, which is positive.
- SlidingServe's triage does with `triage_rate=predicted` when the decodes alone fill the
  tightest TBT window. That is a passing moment, not a verdict on the queue, and relegation
  is for good, so the triage steps aside for that iteration (`triage.QueueTriage`) rather
  than give up every request.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import TYPE_CHECKING

from slidingserve.core.request import WAITING, next_deadlines

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence

    from slidingserve.core.request import Request
    from slidingserve.core.view import EngineLimits
    from slidingserve.policies.base import PolicyContext
    from slidingserve.predictor import LatencyModel

REQUEST_ID = attrgetter("request_id")  # a request's id, read without a Python-level call


def planning_predictor(context: PolicyContext, features: str, policy: str) -> LatencyModel:
    """The batch-latency predictor a planning policy uses: the context's predictor of
    that feature set, else its single one; a clear error when it has none."""
    predictor = context.predictors.get(features, context.predictor)
    if predictor is None:
        raise ValueError(f"policy {policy!r} needs a batch-latency predictor")
    return predictor


def token_budget(configured: int | None, limits: EngineLimits) -> int:
    """Tokens per iteration a policy may plan: its own cap (None: none) within the engine's
    max_num_batched_tokens."""
    limit = limits.max_num_batched_tokens
    return min(configured or limit, limit)


def deadline_key(request: Request) -> tuple[float, float]:
    """EDF sort key: the deadline of the request's next token (its TTFT deadline until it
    emits a token), ties by arrival; seconds."""
    return (request.next_deadline, request.arrival)


def deadline_order(deadlines: list[float], arrivals: list[float]) -> list[int]:
    """The positions sorted as `deadline_key` sorts: by (deadline, arrival), ties in the
    order given. Two stable sorts on plain floats, cheaper than one on pairs; one when no
    two deadlines tie (the usual case), as the arrivals then order nothing."""
    if len(set(deadlines)) == len(deadlines):
        return sorted(range(len(deadlines)), key=deadlines.__getitem__)
    order = sorted(range(len(deadlines)), key=arrivals.__getitem__)
    order.sort(key=deadlines.__getitem__)
    return order


def edf_sorted(requests: Sequence[Request]) -> list[Request]:
    """`requests` sorted by `deadline_key`, each deadline read once."""
    order = deadline_order(next_deadlines(requests), [r.arrival for r in requests])
    return [requests[i] for i in order]


LOW_MEMORY_DIVISOR = 32  # QoServe's low-memory test: free blocks × block size / this ...
LOW_MEMORY_THRESHOLD = 1000  # ... below this (fewer than 32,000 free tokens)


def is_low_memory(
    free_blocks: int,
    block_size: int,
    divisor: int = LOW_MEMORY_DIVISOR,
    threshold: int = LOW_MEMORY_THRESHOLD,
) -> bool:
    """QoServe's low-memory test: free blocks × block size / divisor < threshold (QoServe
    switches to its low-memory grid then; SlidingServe's `low_memory_cap` reads it too)."""
    return free_blocks * block_size / divisor < threshold


def prefill_seconds(remaining: int, rate: float) -> float:
    """Seconds to compute `remaining` prefill tokens at `rate` tokens per second; at a rate
    of zero, infinite with tokens left and 0 without (see the module's note)."""
    if rate > 0:
        return remaining / rate
    return math.inf if remaining > 0 else 0.0


def cannot_finish_prefill(request: Request, now: float, rate: float) -> bool:
    """Whether `request`'s remaining prefill, run from `now` at `rate` tokens/s with nothing
    else, ends after the deadline of its next token: now + r / ρ > deadline."""
    return now + prefill_seconds(request.remaining_prefill, rate) > request.next_deadline


class Relegation:
    """Eager relegation (QoServe): the ids of requests judged hopeless before they started.
    A request is relegated at most once and stays relegated while it is present."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    @property
    def ids(self) -> Collection[str]:
        return self._ids

    def relegate_if_hopeless(self, request: Request, now: float, rate: float) -> bool:
        """Relegate `request` if it has not started (waiting: nothing of it held, though a
        prefix-cache hit may count as computed), was never relegated
        and cannot finish its prefill by its deadline at `rate` tokens/s; return whether
        it was."""
        if (
            request.phase is WAITING
            and request.request_id not in self._ids
            and cannot_finish_prefill(request, now, rate)
        ):
            self._ids.add(request.request_id)
            return True
        return False

    def forget_departed(self, present: Sequence[Iterable[Request]]) -> None:
        """Drop the ids of requests in none of the `present` queues."""
        if self._ids:
            ids: set[str] = set()
            for queue in present:
                ids.update(map(REQUEST_ID, queue))  # no Python-level call per request
            self._ids &= ids


class PrefillRateEma:
    """The observed prefill rate, tokens per second: an EMA over the iterations that
    computed prefill tokens (an iteration without any leaves it as it is)."""

    def __init__(self, initial: float, decay: float) -> None:
        self.value = initial  # tokens per second
        self.decay = decay  # weight of the old value at each observed iteration, in [0, 1)

    def observe(self, prefill_tokens: int, seconds: float) -> None:
        """Fold in one iteration: `prefill_tokens` computed in `seconds`. An iteration
        without prefill tokens or without time is skipped."""
        if prefill_tokens > 0 and seconds > 0:
            self.value = self.decay * self.value + (1 - self.decay) * prefill_tokens / seconds
