"""The project's view of vLLM's requests: one core `Request` mirrored per vLLM request.

Each step the mirrors are synced to vLLM's queues into the policy's `SchedulerView`
(`view`), and what vLLM then scheduled is read back through them as the step's `BatchShape`
(`batch`); both are built by the core constructors the simulator uses too.
No vLLM import: the mirror reads only attributes every vLLM v1 `Request` has, so it can
be tested with plain stand-ins.

Under async scheduling the view of step t+1 is built while step t runs: vLLM's
`AsyncScheduler` has already counted step t's tokens as computed, and its sampled tokens as
`num_output_placeholders`. The mirror counts those in-flight tokens as generated (the next
token's deadline is the one after them, never theirs a second time), so a request with a
token in flight is decoding, with its context counting that token; one whose in-flight
tokens complete its `max_tokens` is finished (vLLM would not schedule it again). vLLM's
synchronous scheduler keeps the placeholders at 0, and the mirror reads as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from slidingserve.core.batch import BatchShape
from slidingserve.core.request import DECODING, FINISHED, PREFILLING, SLO, WAITING, Request
from slidingserve.core.view import SchedulerView

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from slidingserve.core.view import EngineLimits, KVView


class EngineRequest(Protocol):
    """What the mirror reads of a vLLM v1 request."""

    request_id: str
    arrival_time: float  # wall clock (time.time()), seconds
    num_prompt_tokens: int
    num_computed_tokens: int  # under async scheduling, counting the tokens in flight
    max_tokens: int
    num_output_placeholders: int  # sampled tokens in flight (async scheduling), else 0

    @property
    def num_tokens(self) -> int: ...

    @property
    def num_output_tokens(self) -> int: ...


class RequestMirror:
    """Core requests kept in step with the engine's, by request id."""

    def __init__(self) -> None:
        self._mirrors: dict[str, Request] = {}

    def add(self, request: EngineRequest, slo: SLO) -> Request:
        mirror = Request(
            request.request_id,
            request.arrival_time,
            request.num_prompt_tokens,
            max(1, request.max_tokens),
            slo,
        )
        self._mirrors[request.request_id] = mirror
        return mirror

    def get(self, request_id: str) -> Request | None:
        return self._mirrors.get(request_id)

    def sync(self, request: EngineRequest, waiting: bool) -> Request | None:
        """Copy the engine's progress into the mirror; None for an unknown request."""
        synced = self._synced((request,), waiting)
        return synced[0] if synced else None

    def view(
        self,
        now: float,
        waiting: Iterable[EngineRequest],
        running: Iterable[EngineRequest],
        limits: EngineLimits,
        kv: KVView,
    ) -> SchedulerView:
        """The policy's view of the engine's queues, in their order, at `now` (wall clock,
        seconds), after syncing every mirror; requests without a mirror are left out."""
        waiting_mirrors = self._synced(waiting, waiting=True)
        running_mirrors = self._synced(running, waiting=False)
        return SchedulerView.from_queues(now, waiting_mirrors, running_mirrors, limits, kv)

    def _synced(self, requests: Iterable[EngineRequest], waiting: bool) -> list[Request]:
        """The mirrors of `requests` that have one, each synced: its computed tokens, its
        output tokens counting those in flight (async scheduling), and its phase: waiting
        (nothing cached, or preempted), finished (its tokens in flight are its last),
        decoding (one token to feed) or prefilling. One loop without a call per request:
        it runs over every request in the engine at every step."""
        mirrors = self._mirrors
        synced: list[Request] = []
        for request in requests:
            mirror = mirrors.get(request.request_id)
            if mirror is None:
                continue
            computed = request.num_computed_tokens
            in_flight = request.num_output_placeholders
            generated = request.num_output_tokens + in_flight
            mirror.num_computed = computed
            mirror.num_generated = generated
            if waiting:
                mirror.phase = WAITING
            elif in_flight and generated >= request.max_tokens:
                mirror.phase = FINISHED
            elif generated > 0 and request.num_tokens + in_flight - computed <= 1:
                mirror.phase = DECODING
            else:
                mirror.phase = PREFILLING
            synced.append(mirror)
        return synced

    def batch(self, scheduled: Mapping[str, int]) -> BatchShape:
        """The batch of `scheduled` (request id: tokens), by phase as the mirrors saw it when
        last synced (before the step); requests without a mirror are left out."""
        return BatchShape.from_chunks(
            (mirror, int(tokens))
            for request_id, tokens in scheduled.items()
            if (mirror := self._mirrors.get(request_id)) is not None
        )

    def note_first_tokens(
        self, requests: Mapping[str, EngineRequest], scheduled: Iterable[str], now: float
    ) -> None:
        """`note_first_token` for each request of `scheduled` the engine still holds in
        `requests` (by id): called right after the model step."""
        for request_id in scheduled:
            request = requests.get(request_id)
            if request is not None:
                self.note_first_token(request, now)

    def note_first_token(self, request: EngineRequest, now: float) -> None:
        """Record `now` (wall clock, seconds) as the time of the request's first token, if it
        has one and none is recorded yet.

        Only that first time is kept in `token_times` (state bounded per request): QoServe
        anchors a late request's TBT deadlines at it. vLLM's engine-core request carries no
        token times (the front end stamps them), so the adapter calls this right after the
        model step that produced the token.
        """
        mirror = self._mirrors.get(request.request_id)
        if mirror is not None and not mirror.token_times and request.num_output_tokens > 0:
            mirror.token_times.append(now)

    def forget_all_but(self, live_ids: set[str]) -> None:
        """Drop the mirrors of requests the engine no longer holds (finished, aborted)."""
        for request_id in [r for r in self._mirrors if r not in live_ids]:
            del self._mirrors[request_id]

    def __len__(self) -> int:
        return len(self._mirrors)
