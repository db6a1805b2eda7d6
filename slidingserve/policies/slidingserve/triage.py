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

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

from slidingserve.policies.common import Relegation, prefill_seconds

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

    def split(self, queue: Sequence[Request], now: float, rate: float) -> Triage:
        """`queue` (in its order) split at `now` assuming `rate` prefill tokens per second.

        At a rate of zero nothing is given up: that rate means the decodes alone fill the
        tightest TBT window this iteration, a passing moment, not proof that every request
        is hopeless (see `policies.common`)."""
        if rate <= 0:
            return Triage(list(queue), [])
        if self.config.rule == "relegate":
            self.relegation.forget_departed((queue,))
            return relegate_hopeless(queue, now, rate, self.relegation)
        return drop_largest(queue, now, rate)


def drop_largest(queue: Sequence[Request], now: float, tokens_per_second: float) -> Triage:
    """Moore–Hodgson on `queue` (in deadline order): the most requests that can each finish
    their prefill by their next deadline at `tokens_per_second` (> 0), the rest given up.

    A request already late is given up at once (no order makes it on time). Protected
    requests are kept and their time counted, so unprotected ones are given up for them.
    """
    if tokens_per_second <= 0:
        raise ValueError(f"drop_largest needs a positive rate, got {tokens_per_second}")
    finish = now
    chosen: list[tuple[int, int]] = []  # max-heap by remaining: (−remaining, position)
    given_up: set[int] = set()
    for position, request in enumerate(queue):
        deadline = request.next_deadline
        protected = request.slo.protected
        if deadline <= now and not protected:
            given_up.add(position)
            continue
        remaining = request.remaining_prefill
        finish += prefill_seconds(remaining, tokens_per_second)
        if not protected:
            heapq.heappush(chosen, (-remaining, position))
        while finish > deadline and chosen:
            negative, largest = heapq.heappop(chosen)
            finish -= prefill_seconds(-negative, tokens_per_second)
            given_up.add(largest)
    if not given_up:
        return Triage(list(queue), [])
    keep = [r for i, r in enumerate(queue) if i not in given_up]
    give_up = [r for i, r in enumerate(queue) if i in given_up]
    return Triage(keep, give_up)


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
