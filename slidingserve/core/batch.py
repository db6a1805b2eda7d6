"""The shape of a batch: what the latency of an iteration depends on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from slidingserve.core.request import DECODING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from slidingserve.core.plan import Plan
    from slidingserve.core.request import Request


@dataclass(frozen=True, slots=True)
class BatchShape:
    """Token counts of one iteration, by phase.

    Entries are classified by phase, not by chunk size: a prefill chunk of one token is
    still a prefill (docs/design.md §3).
    """

    decode_contexts: tuple[int, ...]  # u_i of each decode: tokens cached before this step
    prefill_chunks: tuple[tuple[int, int], ...]  # (c_i, u_i): chunk tokens, tokens cached

    @property
    def num_decodes(self) -> int:
        return len(self.decode_contexts)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(c for c, _ in self.prefill_chunks)

    @property
    def num_tokens(self) -> int:
        """Tokens in the batch, decodes included."""
        return self.num_decodes + self.num_prefill_tokens

    @property
    def decode_kv(self) -> int:
        """Σ u_i over decodes: KV tokens the decodes read."""
        return sum(self.decode_contexts)

    @classmethod
    def from_chunks(cls, chunks: Iterable[tuple[Request, int]]) -> BatchShape:
        """The batch that runs these (request, tokens) pairs, by each request's phase before
        the step; a waiting request's computed tokens are its prefix-cache hit (none without a
        prefix cache; docs/design.md §3). Both engines time
        batches built here: the simulator its plans, the vLLM adapter what vLLM scheduled."""
        decodes: list[int] = []
        prefills: list[tuple[int, int]] = []
        for request, tokens in chunks:
            phase = request.phase
            if phase is DECODING:
                decodes.append(request.num_computed)
            else:
                prefills.append((tokens, request.num_computed))  # a waiting one: its prefix hit
        return cls(tuple(decodes), tuple(prefills))

    @classmethod
    def from_plan(cls, plan: Plan) -> BatchShape:
        """The batch of `plan` (`from_chunks` of its chunks)."""
        return cls.from_chunks(plan.chunks)


class TimedBatch(NamedTuple):
    """A batch and how long it took on the engine's GPU: a profiling sample."""

    shape: BatchShape
    seconds: float  # measured (or ground-truth) iteration time
