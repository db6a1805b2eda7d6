"""What the simulator records of each request, only when asked (`trace_requests`): when its
first chunk started, when it lost its KV cache, when the policy relegated it.

These are the events a diagnosis needs to say why a request missed its SLO; the normal
path records none of them (the engine state holds no tracer then).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from slidingserve.core.request import PREFILLING
from slidingserve.policies.base import ReportsRelegations

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

    from slidingserve.core.kv_blocks import KVBlockManager
    from slidingserve.core.request import Request
    from slidingserve.policies.base import Policy


@dataclass(slots=True)
class RequestTrace:
    """The scheduling events of one request, seconds on the run's clock."""

    first_chunk: float | None = None  # start of the first iteration that ran a chunk of it
    preemptions: list[float] = field(default_factory=list)  # starts of the iterations that
    # preempted it (its KV cache dropped, to be recomputed)
    relegated: float | None = None  # start of the iteration in which the policy first
    # relegated it (policies that are `ReportsRelegations`)


class RequestTracer:
    """Collects a `RequestTrace` per request id while a simulation runs."""

    def __init__(self, policy: Policy) -> None:
        self.traces: dict[str, RequestTrace] = {}
        self._relegating = policy if isinstance(policy, ReportsRelegations) else None

    def started(self, request: Request, now: float) -> None:
        """`request`, waiting, gets a chunk in the iteration starting at `now`."""
        trace = self._trace(request.request_id)
        if trace.first_chunk is None:
            trace.first_chunk = now

    def preempted(self, request: Request, now: float) -> None:
        """`request` loses its KV cache at `now`."""
        self._trace(request.request_id).preemptions.append(now)

    def scheduled(self, now: float) -> None:
        """The policy has just planned the iteration starting at `now`: note the requests
        it relegated for the first time."""
        if self._relegating is None:
            return
        for request_id in self._relegating.relegated_ids():
            trace = self._trace(request_id)
            if trace.relegated is None:
                trace.relegated = now

    def _trace(self, request_id: str) -> RequestTrace:
        trace = self.traces.get(request_id)
        if trace is None:
            trace = self.traces[request_id] = RequestTrace()
        return trace


def decode_run_slacks(
    running: Sequence[Request], starts: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """The tightest decode slack at the start of each iteration of a decode-only run:
    min over `running` (all decoding, one token each per iteration) of the next deadline
    minus the iteration's start, seconds."""
    earliest: dict[float, float] = {}  # by TBT: the earliest next deadline
    for request in running:
        tbt, deadline = request.slo.tbt, request.next_deadline
        if deadline < earliest.get(tbt, np.inf):
            earliest[tbt] = deadline
    steps = np.arange(starts.size, dtype=np.float64)
    deadlines = np.min([deadline + tbt * steps for tbt, deadline in earliest.items()], axis=0)
    slacks: npt.NDArray[np.float64] = deadlines - starts
    return slacks


def blocks_while_running(kv: KVBlockManager, chunks: Sequence[tuple[Request, int]]) -> int:
    """KV blocks held while an iteration runs `chunks` ((request, tokens) pairs), planned
    with `kv` as it is now: those held now and those its chunks add."""
    return kv.num_used + sum(kv.extra_blocks(request, tokens) for request, tokens in chunks)


def prefilling_blocks(kv: KVBlockManager, running: Sequence[Request]) -> int:
    """KV blocks held by the running requests whose prefill has started and not finished
    (`Phase.PREFILLING`): blocks that emit nothing until their request's last chunk."""
    held = kv.held
    return sum(held(r) for r in running if r.phase is PREFILLING)


def decode_run_blocks(
    running: Sequence[Request], kv: KVBlockManager, steps: int
) -> npt.NDArray[np.int64]:
    """KV blocks held while each of the `steps` iterations of a decode-only run runs (every
    request in `running` decodes once per iteration; step j caches its (j + 1)-th token)."""
    size = kv.block_size
    computed = np.array([r.num_computed for r in running], dtype=np.int64)
    held = np.array([kv.held(r) for r in running], dtype=np.int64)
    after = np.arange(1, steps + 1, dtype=np.int64)[:, None] + computed[None, :]
    extra = np.maximum(-(-after // size) - held[None, :], 0).sum(axis=1)
    blocks: npt.NDArray[np.int64] = kv.num_used + extra
    return blocks
