"""The simulated engine's queues, KV cache and clock, and how a plan changes them."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING

from slidingserve.core.kv_blocks import KVBlockManager
from slidingserve.core.prefix_cache import PrefixCachingKV
from slidingserve.core.request import DECODING, FINISHED, PREFILLING, WAITING, Phase
from slidingserve.core.view import SchedulerView

if TYPE_CHECKING:
    from slidingserve.core.kv_blocks import BlockGrowth
    from slidingserve.core.plan import Plan
    from slidingserve.core.request import Request
    from slidingserve.core.view import EngineLimits
    from slidingserve.sim.tracing import RequestTracer

VictimChoice = Callable[[Sequence["Request"], float], "Request"]
"""Which running request a preemption takes: (running in admission order, now) -> it (the
policy's `preemption_victim`)."""


class EngineState:
    """Queues (waiting, running in admission order), the KV cache and the clock; `tracer`,
    when given, is told of every first chunk and preemption."""

    def __init__(
        self,
        requests_by_arrival: list[Request],
        kv: KVBlockManager,
        tracer: RequestTracer | None = None,
    ) -> None:
        self.all_requests = requests_by_arrival
        self.kv = kv
        self.tracer = tracer
        self._prefix = kv if isinstance(kv, PrefixCachingKV) else None
        self.now = 0.0
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self._next_pending = 0
        self._num_finished = 0
        # KV blocks the decodes need for their next token, counted by
        # `make_room_for_decodes` and valid until the running requests change; None: unknown
        self._decode_blocks: int | None = None

    @property
    def all_finished(self) -> bool:
        return self._num_finished == len(self.all_requests)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    @property
    def has_pending_arrivals(self) -> bool:
        return self._next_pending < len(self.all_requests)

    @property
    def next_arrival(self) -> float:
        if self.has_pending_arrivals:
            return self.all_requests[self._next_pending].arrival
        return math.inf

    @property
    def pending(self) -> list[Request]:
        """Requests handed to the engine that it has not admitted yet (in arrival order)."""
        return self.all_requests[self._next_pending :]

    @property
    def num_queued(self) -> int:
        """Requests waiting or prefilling (O(running): for recording only)."""
        return len(self.waiting) + sum(1 for r in self.running if r.phase is Phase.PREFILLING)

    def decode_slack(self) -> float | None:
        """Seconds from now to the earliest next deadline of a decoding request (negative:
        one is late already); None without decodes. O(running): for recording only."""
        deadlines = [r.next_deadline for r in self.running if r.phase is Phase.DECODING]
        return min(deadlines) - self.now if deadlines else None

    def admit_arrivals(self) -> None:
        pending = self.all_requests
        while self._next_pending < len(pending) and pending[self._next_pending].arrival <= self.now:
            self.waiting.append(pending[self._next_pending])
            self._next_pending += 1

    def view(self, limits: EngineLimits, admit: bool = True) -> SchedulerView:
        """The policy's view; `admit` False after a preemption in this iteration (as vLLM),
        unless nothing is running any more."""
        admit = admit or not self.running
        if self._prefix is not None:
            lookup = self._prefix.lookup
            for request in self.waiting:
                request.num_computed = lookup(request)
        return SchedulerView.from_queues(
            self.now, self.waiting, self.running, limits, self.kv, admit, self._decode_blocks
        )

    def make_room_for_decodes(self, choose_victim: VictimChoice) -> int:
        """Preempt running requests until every decode can cache one more token, each
        chosen by `choose_victim(running, now)`.

        Returns the number of preemptions (vLLM's recompute preemption).
        """
        preempted = 0
        needed = self._blocks_for_next_decode()
        while needed > self.kv.num_free:
            self.preempt(choose_victim(self.running, self.now))
            preempted += 1
            needed = self._blocks_for_next_decode()
        self._decode_blocks = needed
        return preempted

    def _blocks_for_next_decode(self) -> int:
        return self.kv.next_token_blocks([r for r in self.running if r.phase is DECODING])

    def preempt(self, request: Request) -> None:
        """Drop `request`'s KV cache; it waits at the head of the queue to recompute."""
        self._decode_blocks = None
        self.kv.free(request)
        request.num_computed = 0
        request.phase = Phase.WAITING
        request.num_preemptions += 1
        if self.tracer is not None:
            self.tracer.preempted(request, self.now)
        self.running.remove(request)
        self.waiting.insert(0, request)

    def execute(self, plan: Plan, end: float, growth: BlockGrowth | None = None) -> None:
        """Apply `plan`, which ran until time `end`: cache tokens, emit tokens, finish.
        `growth`: the blocks its chunks add, as its validation counted them on this plain
        block table (`validate_plan`); None: counted here."""
        self._decode_blocks = None
        admitted = finished = False
        chunks = plan.chunks
        if growth is not None and type(self.kv) is KVBlockManager:
            self.kv.grow_by(growth)
        else:
            self.kv.grow_each(chunks)  # each request is in a plan once: its growth is its own
        for request, tokens in chunks:
            request.num_computed += tokens
            phase = request.phase
            if phase is not DECODING:
                if phase is WAITING:
                    if self.tracer is not None:
                        self.tracer.started(request, self.now)
                    request.phase = PREFILLING
                    self.running.append(request)
                    admitted = True
                if request.num_computed != request.prompt_len + request.num_generated:
                    continue  # prefill_target not reached: no token yet
                request.phase = DECODING
            # emit a token at `end`
            request.token_times.append(end)
            request.num_generated += 1
            if request.num_generated >= request.output_len:
                self._finish(request)
                finished = True
        if admitted:
            self.waiting = [r for r in self.waiting if r.phase is WAITING]
        if finished:
            self.running = [r for r in self.running if r.phase is not FINISHED]
        self.now = end

    def execute_decode_run(self, ends: list[float]) -> None:
        """Apply len(ends) decode-only iterations of every running request, ending at `ends`."""
        self._decode_blocks = None
        steps = len(ends)
        finished = False
        self.kv.grow_each(zip(self.running, repeat(steps)))
        for request in self.running:
            request.num_computed += steps
            request.token_times.extend(ends)
            request.num_generated += steps
            if request.num_generated >= request.output_len:
                finished = True
                self._finish(request)
        if finished:
            self.running = [r for r in self.running if r.phase is not FINISHED]
        self.now = ends[-1]

    def refuse(self, requests: list[Request]) -> None:
        """Finish waiting `requests` now without a token (admission control)."""
        for request in requests:
            if request.phase is not Phase.WAITING or request.num_generated:
                raise ValueError(f"request {request.request_id} cannot be refused: it has started")
            request.phase = Phase.FINISHED
            request.refused = True
            self.kv.free(request)  # it holds nothing; a prefix cache forgets its lookup
            self._num_finished += 1
        ids = {id(r) for r in requests}
        self.waiting = [r for r in self.waiting if id(r) not in ids]

    def _finish(self, request: Request) -> None:
        request.phase = Phase.FINISHED
        self.kv.free(request)
        self._num_finished += 1
