"""The triage part: what to do with the prefill queue when not every request can make its
first-token deadline [beyond the paper].

`drop_largest` is Moore and Hodgson's rule for a single machine: walk the queue in
deadline order, accumulating the time each prefill would finish at the given rate; when a
request would finish late, give up the largest job seen so far (it frees the most time).
With every job known in advance it minimises the number of late jobs; here it runs again
at every iteration on the requests present, so a request given up now may be served
later. `relegate_hopeless` is QoServe's eager relegation, for good. Given-up requests go
behind the others (they are served when the queue has room), and protected requests are
never given up.
"""

from __future__ import annotations

from dataclasses import dataclass
from heapq import heappop, heappush, heappushpop
from itertools import compress
from operator import not_
from typing import TYPE_CHECKING, Literal, NamedTuple

from slidingserve.core.request import next_deadlines, remaining_prefills
from slidingserve.policies.common import Relegation

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.request import Request

TriageRule = Literal["drop-largest", "relegate"]
RateSource = Literal["ema", "predicted"]

TRIAGE_RULES: tuple[str, ...] = ("drop-largest", "relegate")
RATE_SOURCES: tuple[str, ...] = ("ema", "predicted")


@dataclass(frozen=True, slots=True)
class TriageConfig:
    """A triage of the ordered prefill queue (options `overload` and `triage_rate`)."""

    rule: TriageRule  # "drop-largest" (Moore–Hodgson, each iteration) or "relegate" (for good)
    # The prefill rate the rule assumes: "ema", the observed ρ_t; "predicted", what the
    # predictor gives for an iteration of the tightest L_tbt beside today's decodes
    rate: RateSource = "ema"

    def __post_init__(self) -> None:
        if self.rule not in TRIAGE_RULES:
            known = ", ".join(TRIAGE_RULES)
            raise ValueError(f"unknown triage rule {self.rule!r}; known: {known} (none: no triage)")
        if self.rate not in RATE_SOURCES:
            known = ", ".join(RATE_SOURCES)
            raise ValueError(f"unknown triage_rate {self.rate!r}; known: {known}")


class Triage(NamedTuple):
    """A deadline-ordered queue split into the requests to serve and those given up."""

    keep: list[Request]  # in the order given
    give_up: list[Request]  # in the order given


class QueueTriage:
    """A `TriageConfig` at work: the relegations it holds across iterations."""

    def __init__(self, config: TriageConfig) -> None:
        self.config = config
        self.relegation = Relegation()  # ids relegated for good (rule "relegate")

    def split(
        self,
        queue: Sequence[Request],
        now: float,
        rate: float,
        deadlines: Sequence[float] | None = None,
    ) -> Triage:
        """`queue` (in its order) split at `now` assuming `rate` prefill tokens per second;
        `deadlines`: the next deadline of each request of `queue`, when already read.

        At a rate of zero nothing is given up: that rate means the decodes alone fill the
        tightest TBT window this iteration, a passing moment, not proof that every request
        is hopeless (see `policies.common`)."""
        if rate <= 0:
            return Triage(list(queue), [])
        if self.config.rule == "relegate":
            self.relegation.forget_departed((queue,))
            return relegate_hopeless(queue, now, rate, self.relegation)
        return drop_largest(queue, now, rate, deadlines)


def drop_largest(
    queue: Sequence[Request],
    now: float,
    tokens_per_second: float,
    deadlines: Sequence[float] | None = None,
) -> Triage:
    """Moore–Hodgson on `queue` (in deadline order): the most requests that can each finish
    their prefill by their next deadline at `tokens_per_second` (> 0), the rest given up.
    `deadlines` are those next deadlines, when the caller has read them.

    A request already late is given up at once (no order makes it on time). Protected
    requests are kept and their time counted, so unprotected ones are given up for them.
    """
    if tokens_per_second <= 0:
        raise ValueError(f"drop_largest needs a positive rate, got {tokens_per_second}")
    if deadlines is None:
        deadlines = next_deadlines(queue)
    remaining = remaining_prefills(queue)
    protected = [r.slo.protected for r in queue]
    kept = moore_hodgson(deadlines, remaining, protected, now, tokens_per_second)
    if all(kept):
        return Triage(list(queue), [])
    return Triage(list(compress(queue, kept)), list(compress(queue, map(not_, kept))))


def moore_hodgson(
    deadlines: Sequence[float],
    remaining: Sequence[int],
    protected: Sequence[bool],
    now: float,
    tokens_per_second: float,
) -> list[bool]:
    """Whether each job of `drop_largest` is kept: jobs in queue order, with their
    deadlines (seconds), prefill tokens and protection, run from `now` at
    `tokens_per_second` (> 0)."""
    size = len(deadlines)
    kept = [True] * size
    finish = now
    # Max-heap by remaining, ties by position, as one int per job: −remaining·size + position
    chosen: list[int] = []
    for position, (deadline, tokens, guarded) in enumerate(
        zip(deadlines, remaining, protected, strict=True)
    ):
        if guarded:
            finish += tokens / tokens_per_second  # prefill_seconds at a positive rate
        elif deadline <= now:
            kept[position] = False
            continue
        else:
            finish += tokens / tokens_per_second
            if finish > deadline:  # push, then pop the largest, in one step
                largest = heappushpop(chosen, position - tokens * size) % size
                finish -= remaining[largest] / tokens_per_second
                kept[largest] = False
            else:
                heappush(chosen, position - tokens * size)
        while finish > deadline and chosen:
            largest = heappop(chosen) % size
            finish -= remaining[largest] / tokens_per_second
            kept[largest] = False
    return kept


def relegate_hopeless(
    queue: Sequence[Request], now: float, tokens_per_second: float, relegation: Relegation
) -> Triage:
    """QoServe's eager relegation, tested on every request of the queue: one that is not
    protected, has not started and cannot finish its prefill by its deadline at
    `tokens_per_second` is relegated for good; relegated requests go last."""
    for request in queue:
        if not request.protected:
            relegation.relegate_if_hopeless(request, now, tokens_per_second)
    relegated = relegation.ids
    keep = [r for r in queue if r.request_id not in relegated]
    give_up = [r for r in queue if r.request_id in relegated]
    return Triage(keep, give_up)
