"""What to do with the prefill queue when not every request can make its first-token
deadline [beyond the paper].

`drop_largest` is Moore and Hodgson's rule for a single machine: walk the queue in
deadline order, accumulating the time each prefill would finish at the given rate; when a
request would finish late, give up the largest job seen so far (it frees the most time).
With every job known in advance it minimises the number of late jobs; here it runs again
at every iteration on the requests present, so a request given up now may be served
later. Given-up requests go behind the others (they are served when the queue has room),
and protected requests are never given up.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.request import Request


class Triage(NamedTuple):
    """A deadline-ordered queue split into the requests to serve and those given up."""

    keep: list[Request]  # in the order given
    give_up: list[Request]  # in the order given


def drop_largest(queue: Sequence[Request], now: float, tokens_per_second: float) -> Triage:
    """Moore–Hodgson on `queue` (in deadline order): the most requests that can each finish
    their prefill by their next deadline at `tokens_per_second`, the rest given up.

    A request already late is given up at once (no order makes it on time). Protected
    requests are kept and their time counted, so unprotected ones are given up for them.
    """
    if tokens_per_second <= 0:
        return Triage(list(queue), [])
    finish = now
    chosen: list[tuple[int, int]] = []  # max-heap by remaining: (−remaining, position)
    given_up: set[int] = set()
    for position, request in enumerate(queue):
        deadline = request.next_deadline
        if deadline <= now and not request.protected:
            given_up.add(position)
            continue
        finish += request.remaining_prefill / tokens_per_second
        if not request.protected:
            heapq.heappush(chosen, (-request.remaining_prefill, position))
        while finish > deadline and chosen:
            negative, largest = heapq.heappop(chosen)
            finish += negative / tokens_per_second
            given_up.add(largest)
    keep = [r for i, r in enumerate(queue) if i not in given_up]
    give_up = [r for i, r in enumerate(queue) if i in given_up]
    return Triage(keep, give_up)


def relegate_hopeless(
    queue: Sequence[Request], now: float, tokens_per_second: float, relegated: set[str]
) -> Triage:
    """QoServe's eager relegation, tested on every request of the queue: one that has not
    started and cannot finish its prefill by its deadline even at `tokens_per_second` is
    relegated for good (its id joins `relegated`); relegated requests go last."""
    for request in queue:
        if request.num_computed or request.protected or request.request_id in relegated:
            continue
        seconds = request.remaining_prefill / tokens_per_second if tokens_per_second > 0 else 0
        if now + seconds > request.next_deadline:
            relegated.add(request.request_id)
    keep = [r for r in queue if r.request_id not in relegated]
    give_up = [r for r in queue if r.request_id in relegated]
    return Triage(keep, give_up)
