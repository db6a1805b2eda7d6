"""Violated requests yield to live ones (option `yield_violated`).

Under cumulative deadlines a request violates its SLO as soon as one token is late, and
nothing served later undoes that. Past the goodput, where decode attention fills the TBT
window (the A40 with Llama-2-7B, docs/results.md §8.1), the decodes of requests already
violated still run in every iteration: each lengthens it, so less prefill fits beside the
slack of the decodes still on time, and requests that could still make their first token
miss it. With this option a violated request's decode is left out of the iteration while
some request that has missed no deadline waits for its prefill. It keeps its blocks and
runs again when no live request waits; when the cache runs short, `preempt_lost_first`
takes lost requests first, as before. Where a start rule (`whole_prefills`, `kv_forecast`)
keeps every live waiting request from starting this step and no live request is
prefilling, the violated decodes run after all (`SlidingServePolicy._decide`): the blocks
they hold are what the rule waits for, so yielding would only hold both back. They do
only while all the decodes together are predicted to fit in the tightest TBT of the
decodes still on time, or while none is (`SlidingServePolicy._violated_may_run`): where
the cache's bandwidth binds, running every violated decode at once made the decode-only
iterations several TBTs long, and the decodes still on time went late (docs/results.md
§8.13).

A request is known violated once its next token's deadline has passed at the start of a
step (that token will be late) or its first token came after its first-token deadline.
Both engines show the policy these (the vLLM mirror keeps the first token's time), so the
simulator and the plug-in make the same decisions. A request late by less than a step that
catches up is not caught, and keeps running: the rule errs towards serving. Once known, a
request stays violated until it leaves the engine's queues.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView

_PRUNE_SLACK = 256  # ids kept beyond twice the queues' size before the set is pruned


class ViolatedRequests:
    """The ids of the requests seen violating, across steps (module docstring)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def observe(self, view: SchedulerView) -> None:
        """Mark the requests of `view` known to violate; forget those no longer in it."""
        ids = self._ids
        ids.update(violating_ids(view.running, view.now))
        ids.update(violating_ids(view.waiting, view.now))
        present = len(view.running) + len(view.waiting)
        if len(ids) > 2 * present + _PRUNE_SLACK:
            ids.intersection_update(r.request_id for r in (*view.running, *view.waiting))

    def any_live(self, requests: Iterable[Request]) -> bool:
        """Whether some of `requests` is not known to violate."""
        ids = self._ids
        return any(r.request_id not in ids for r in requests)

    def yielding(self, view: SchedulerView) -> SchedulerView:
        """`view` after `observe`, without its violated decodes when a live request waits
        for prefill; `view` itself otherwise."""
        self.observe(view)
        ids = self._ids
        if not ids:
            return view
        gone = {id(r) for r in view.decoding if r.request_id in ids}
        if not gone or not (self.any_live(view.prefilling) or self.any_live(view.waiting)):
            return view
        blocks = view.decode_reserve()
        # Still running: they keep their seats (max_num_seqs) and the blocks of their next
        # token, which the engine makes room for at every step.
        return dataclasses.replace(
            view, decoding=[r for r in view.decoding if id(r) not in gone], decode_blocks=blocks
        )


def violating_ids(requests: Iterable[Request], now: float) -> list[str]:
    """The ids of `requests` whose next token's deadline is past at `now` or whose first
    token came after its deadline. One pass without a call per request (it runs over every
    queued request at every step); the deadlines are `Request.next_deadline` and
    `Request.ttft_deadline` written out with their operations in their order, so every
    verdict is theirs (tests/policies/slidingserve/test_violated.py checks it)."""
    return [
        r.request_id
        for r in requests
        if (first := r.arrival + (slo := r.slo).ttft) + r.num_generated * slo.tbt <= now
        or ((times := r.token_times) and times[0] > first)
    ]
