"""The read-only picture of the engine that a policy receives at each iteration."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from slidingserve.core.checks import require_int
from slidingserve.core.kv_blocks import next_token_blocks
from slidingserve.core.request import DECODING, PREFILLING

if TYPE_CHECKING:
    from slidingserve.core.request import Request


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """Hard limits of the serving engine, the same for every policy."""

    max_num_batched_tokens: int = 2048  # B_max: tokens per iteration, decodes included
    max_num_seqs: int = 256  # requests per iteration (batch-size cap)
    block_size: int = 16  # tokens per KV block
    # vLLM's automatic prefix caching, on by default as in vLLM: requests whose content is
    # known share the cached blocks of their common prefix (`core/prefix_cache.py`)
    prefix_caching: bool = True

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size"):
            require_int(name, getattr(self, name))
        if not isinstance(self.prefix_caching, bool):
            raise ValueError(f"prefix_caching must be true or false, got {self.prefix_caching!r}")


class KVView(Protocol):
    """What a policy may read of the KV cache."""

    @property
    def num_free(self) -> int: ...

    @property
    def num_blocks(self) -> int: ...  # the blocks requests can hold, free or not

    @property
    def block_size(self) -> int: ...

    def held(self, request: Request) -> int: ...


@dataclass(frozen=True, slots=True)
class SchedulerView:
    """The queues and the time at the start of an iteration.

    Policies read it and return a `Plan`; they never mutate requests or queues. Decoding
    requests in `decoding` are guaranteed room in the KV cache for one more token (the
    engine preempts before asking if need be); `PlanBuilder` keeps that room for them.
    """

    now: float  # seconds, from the engine's clock
    # arrived, nothing held; arrival order (preempted first). With a prefix cache, a waiting
    # request's `num_computed` is the hit it would start with if scheduled now
    waiting: Sequence[Request]
    running: Sequence[Request]  # prefilling and decoding together, admission order
    prefilling: Sequence[Request]  # partly prefilled; admission order
    decoding: Sequence[Request]  # generating; admission order
    limits: EngineLimits
    kv: KVView
    admit: bool = True  # False after a preemption this iteration: vLLM admits nothing then
    # KV blocks kept for the decodes, beyond the reach of prefill chunks: those of their next
    # token (`kv_blocks.next_token_blocks`) when the engine counted them already, plus any
    # headroom a policy adds; None: the next token's, counted when read (`decode_reserve`)
    decode_blocks: int | None = None

    @classmethod
    def from_queues(
        cls,
        now: float,
        waiting: Sequence[Request],
        running: Sequence[Request],
        limits: EngineLimits,
        kv: KVView,
        admit: bool = True,
        decode_blocks: int | None = None,
    ) -> SchedulerView:
        """The view of an engine's two queues: `running` split by phase into `prefilling`
        and `decoding` (each in admission order). Both engines build their view here."""
        decoding: list[Request] = []
        prefilling: list[Request] = []
        for request in running:
            phase = request.phase
            if phase is DECODING:
                decoding.append(request)
            elif phase is PREFILLING:
                prefilling.append(request)
        return cls(now, waiting, running, prefilling, decoding, limits, kv, admit, decode_blocks)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def decode_reserve(self) -> int:
        """`decode_blocks`, or the blocks the decodes need for their next token when no one
        counted them."""
        if self.decode_blocks is not None:
            return self.decode_blocks
        return next_token_blocks(self.kv, self.decoding)

    def without(self, waiting: Sequence[Request]) -> SchedulerView:
        """The same view without these waiting requests (a policy refusing them)."""
        gone = {id(r) for r in waiting}
        kept = [r for r in self.waiting if id(r) not in gone]
        return dataclasses.replace(self, waiting=kept)

    def prefill_candidates(self) -> list[Request]:
        """Waiting and prefilling requests: the ones a policy sorts."""
        return [*self.prefilling, *self.waiting]
