"""Whether a new request fits the prefill queue: the queue-aware admission test shared by
the policy (`SlidingServePolicy`, `admission_test=queue`) and the API server
(`engines/vllm/overload.py`, from the queue the engine publishes).

The queue is what the engine means to serve, in deadline order, each entry the deadline of
a request's first token and the prefill it still needs. Prefilled in that order at `rate`
tokens a second from `now`, each entry finishes when the tokens up to it are done. A new
request fits when, put in its deadline's place, it finishes by its own deadline and no
entry that finished in time before finishes late after: admitting it never costs a
request already admitted its first token. Entries already late stay late either way and
do not count.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable, Sequence
from typing import NamedTuple


class QueuedPrefill(NamedTuple):
    """One request of the queue: the deadline of its first token and its prefill left."""

    deadline: float  # seconds, on the clock of `now`
    tokens: int  # prefill tokens still to compute


class AdmissionQueue(NamedTuple):
    """The queue an admission test sees at one moment, for another process to test against."""

    now: float  # seconds, the clock of the deadlines
    rate: float  # prefill tokens per second assumed
    queue: tuple[QueuedPrefill, ...]  # sorted by deadline
    decode_seats: int | None = None  # new requests the decodes can take; None: not tested

    def relative(self) -> list[tuple[float, int]]:
        """The queue as (seconds from `now` to the deadline, tokens) pairs."""
        return [(entry.deadline - self.now, entry.tokens) for entry in self.queue]


def fits_queue(queue: Sequence[QueuedPrefill], new: QueuedPrefill, now: float, rate: float) -> bool:
    """Whether `new` fits `queue` (sorted by deadline) at `rate` prefill tokens a second
    from `now` (see the module docstring). At a rate of zero nothing fits."""
    if rate <= 0:
        return False
    place = bisect_right([entry.deadline for entry in queue], new.deadline)
    done = sum(entry.tokens for entry in queue[:place])
    if now + (done + new.tokens) / rate > new.deadline:
        return False
    delay = new.tokens / rate
    for entry in queue[place:]:
        done += entry.tokens
        finish = now + done / rate
        if finish <= entry.deadline < finish + delay:
            return False
    return True


def admit_in_turn(
    queue: Sequence[QueuedPrefill],
    new: Sequence[QueuedPrefill],
    now: float,
    rate: float,
    also: Callable[[int], bool] = lambda index: True,
) -> list[bool]:
    """For each of `new` in deadline order, whether it fits the queue with the ones
    admitted before it and passes `also(its index in new)` (a test of another resource,
    told only of the requests that fit the queue); the answers in the order of `new`."""
    admitted = sorted(queue, key=_deadline)
    answers = [False] * len(new)
    for index in sorted(range(len(new)), key=lambda i: new[i].deadline):
        entry = new[index]
        if fits_queue(admitted, entry, now, rate) and also(index):
            answers[index] = True
            insort(admitted, entry, key=_deadline)
    return answers


def _deadline(entry: QueuedPrefill) -> float:
    return entry.deadline
