"""What a policy returns: which requests run in the next iteration and with how many tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, NamedTuple

from slidingserve.core.batch import BatchShape
from slidingserve.core.kv_blocks import KVBlockManager, next_token_blocks
from slidingserve.core.request import DECODING, FINISHED, WAITING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from slidingserve.core.kv_blocks import BlockGrowth
    from slidingserve.core.request import Request
    from slidingserve.core.view import KVView, SchedulerView


class InvalidPlanError(ValueError):
    """A plan breaks an engine limit: a policy bug, never silently repaired."""


class ScheduledChunk(NamedTuple):
    """One entry of a plan."""

    request: Request
    tokens: int  # tokens computed for this request in the iteration (1 for a decode)


# A chunk from a (request, tokens) pair without the call of ScheduledChunk's __new__ (the
# decodes of every iteration are added so)
_new_chunk = partial(tuple.__new__, ScheduledChunk)


@dataclass(slots=True)
class Plan:
    """An ordered list of (request, tokens) plus what the policy wants to report about it."""

    chunks: list[ScheduledChunk] = field(default_factory=list)
    path: str = ""  # which decision path produced it (for instrumentation)
    predicted_time: float | None = None  # the policy's prediction of the iteration, seconds
    # Waiting requests the policy refuses (admission control): the engine finishes them at
    # once, before the iteration, with no token; never in `chunks`.
    refused: list[Request] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return sum(chunk.tokens for chunk in self.chunks)

    def __len__(self) -> int:
        return len(self.chunks)


class PlanBuilder:
    """Fills a plan under a token budget, the batch-size cap and the free KV blocks.

    Every policy builds through it, so no policy can exceed an engine limit by accident.
    KV follows vLLM's allocation: a new request is admitted only if its whole chunk fits,
    and the first one that does not fit stops admission for the iteration; a running
    prefill may take a shorter chunk; the blocks the decodes need for their next token are
    kept for them, whatever order the policy adds requests in.
    """

    def __init__(self, view: SchedulerView, token_budget: int | None = None) -> None:
        limit = view.limits.max_num_batched_tokens
        self._view = view
        self.tokens_left = limit if token_budget is None else min(token_budget, limit)
        self.seats_left = view.limits.max_num_seqs
        # vLLM keeps at most max_num_seqs requests running; a new one needs a free place.
        room = view.limits.max_num_seqs - view.num_running
        self.admissions_left = max(0, room) if view.admit else 0
        self.blocks_left = view.kv.num_free
        self._reserved = view.decode_reserve()
        self.chunks: list[ScheduledChunk] = []
        # The batch of `chunks` as `BatchShape.from_chunks` gives it, kept as they are added
        self._decode_contexts: list[int] = []
        self._prefill_chunks: list[tuple[int, int]] = []

    def _extra_blocks(self, request: Request, tokens: int) -> int:
        kv = self._view.kv
        extra = -(-(request.num_computed + tokens) // kv.block_size) - kv.held(request)
        return extra if extra > 0 else 0

    def _kv_room(self, request: Request) -> int:
        """Tokens `request` can cache in the blocks it holds plus those it may take."""
        kv = self._view.kv
        free = self.blocks_left
        if request.phase is not DECODING:
            free -= self._reserved
        return (kv.held(request) + max(0, free)) * kv.block_size - request.num_computed

    def add(self, request: Request, want: int) -> int:
        """Schedule up to `want` tokens of `request`; return how many were granted."""
        if self.seats_left == 0 or (request.phase is WAITING and not self.admissions_left):
            return 0
        tokens = min(want, self.tokens_left)
        room = self._kv_room(request)
        if tokens > room:
            if request.phase is WAITING:
                self.admissions_left = 0  # all or nothing, and no admission after a miss
                return 0
            tokens = room
        if tokens <= 0:
            return 0
        needed = self._extra_blocks(request, tokens)
        self.blocks_left -= needed
        phase = request.phase
        if phase is DECODING:
            self._reserved -= needed
            self._decode_contexts.append(request.num_computed)
        elif phase is WAITING:
            self.admissions_left -= 1
            self._prefill_chunks.append((tokens, 0))
        else:
            self._prefill_chunks.append((tokens, request.num_computed))
        self.tokens_left -= tokens
        self.seats_left -= 1
        self.chunks.append(ScheduledChunk(request, tokens))
        return tokens

    def add_decodes(
        self, requests: Iterable[Request], contexts: Sequence[int] | None = None
    ) -> None:
        """One token for each decode, in the order of `requests`; at once when they are all
        of `view.decoding` (itself or in another order) and fit. `contexts`: the
        `num_computed` of each of `requests`, when the caller has read them."""
        decoding = self._view.decoding
        if len(decoding) <= min(self.seats_left, self.tokens_left) and _same_requests(
            requests, decoding
        ):
            self.chunks.extend(map(_new_chunk, zip(requests, repeat(1))))
            if contexts is None:
                contexts = [r.num_computed for r in requests]
            self._decode_contexts.extend(contexts)
            self.blocks_left -= self._reserved  # the engine made room: the reserve is free
            self._reserved = 0
            self.seats_left -= len(decoding)
            self.tokens_left -= len(decoding)
            return
        if self._add_some_decodes(requests, contexts):
            return
        for request in requests:
            self.add(request, 1)

    def _add_some_decodes(
        self, requests: Iterable[Request], contexts: Sequence[int] | None
    ) -> bool:
        """`add_decodes` at once for some of `view.decoding`, each once, when they fit in
        the seats, the tokens and the free blocks together (then every one would get its
        token from `add`, with the same blocks): QoServe's decodes under its decode chunk
        size. False, having added nothing, otherwise."""
        if not isinstance(requests, list | tuple) or len(requests) > min(
            self.seats_left, self.tokens_left
        ):
            return False
        chosen = set(map(id, requests))
        if len(chosen) != len(requests) or not chosen.issubset(map(id, self._view.decoding)):
            return False
        needed = next_token_blocks(self._view.kv, requests)
        if needed > self.blocks_left:
            return False
        self.chunks.extend(map(_new_chunk, zip(requests, repeat(1))))
        self._decode_contexts.extend(
            [r.num_computed for r in requests] if contexts is None else contexts
        )
        self.blocks_left -= needed
        self._reserved -= needed
        self.seats_left -= len(requests)
        self.tokens_left -= len(requests)
        return True

    def add_prefills(self, requests: Iterable[Request]) -> None:
        """Greedy fill: each request takes min(remaining, what is left). Waiting requests
        after the admissions ran out are passed over without a call (`add` grants them
        nothing): an overloaded queue holds hundreds."""
        for request in requests:
            if self.tokens_left == 0 or self.seats_left == 0:
                return
            if request.phase is WAITING and not self.admissions_left:
                continue
            self.add(request, request.remaining_prefill)

    def build(self, path: str = "", predicted_time: float | None = None) -> Plan:
        return Plan(self.chunks, path, predicted_time)

    def shape(self) -> BatchShape:
        """The batch of the chunks added so far: `BatchShape.from_chunks(self.chunks)`,
        without a pass over them."""
        return BatchShape(tuple(self._decode_contexts), tuple(self._prefill_chunks))


def _same_requests(requests: Iterable[Request], decoding: Sequence[Request]) -> bool:
    """Whether `requests` holds exactly the requests of `decoding`, each once, in any order."""
    if requests is decoding:
        return True
    if not isinstance(requests, list | tuple) or len(requests) != len(decoding):
        return False
    return set(map(id, requests)) == set(map(id, decoding))


def validate_plan(plan: Plan, view: SchedulerView) -> BlockGrowth | None:
    """Raise `InvalidPlanError` if `plan` breaks a limit of `view`'s engine (the first of:
    the batch-size cap, the token budget, the admissions, a chunk, the free KV blocks).
    Returns the blocks each chunk adds when they were counted on a plain block table
    (`KVBlockManager.block_growth`): the engine allocates them (`grow_by`) without counting
    again. None otherwise."""
    limits = view.limits
    if len(plan.chunks) > limits.max_num_seqs:
        raise InvalidPlanError(f"{len(plan.chunks)} requests > max_num_seqs {limits.max_num_seqs}")
    totals = _plan_totals(plan, view)
    if totals.tokens > limits.max_num_batched_tokens:
        raise InvalidPlanError(
            f"{totals.tokens} tokens > max_num_batched_tokens {limits.max_num_batched_tokens}"
        )
    admitted = totals.admitted
    if admitted and not view.admit:
        raise InvalidPlanError(f"plan admits {admitted} requests in an iteration that preempted")
    if admitted > limits.max_num_seqs - view.num_running:
        raise InvalidPlanError(
            f"plan admits {admitted} requests beside {view.num_running} running; "
            f"max_num_seqs is {limits.max_num_seqs}"
        )
    if totals.bad_chunk is not None:
        raise totals.bad_chunk
    if totals.blocks > view.kv.num_free:
        raise InvalidPlanError(f"plan needs {totals.blocks} KV blocks, {view.kv.num_free} free")
    return totals.growth


class _PlanTotals(NamedTuple):
    tokens: int  # tokens in the plan
    admitted: int  # waiting requests it starts
    blocks: int  # KV blocks its chunks add
    bad_chunk: InvalidPlanError | None  # the first chunk scheduled twice or given bad tokens
    growth: BlockGrowth | None  # the blocks each chunk adds, on a plain block table


def _plan_totals(plan: Plan, view: SchedulerView) -> _PlanTotals:
    """What `validate_plan` checks, in one pass over the chunks (it runs every iteration)
    and one over the KV blocks they add."""
    tokens_total = admitted = 0
    bad_chunk: InvalidPlanError | None = None
    seen: set[str] = set()
    for request, tokens in plan.chunks:
        tokens_total += tokens
        phase = request.phase
        if phase is WAITING:
            admitted += 1
        if bad_chunk is None:
            if phase is DECODING and tokens == 1 and request.request_id not in seen:
                seen.add(request.request_id)  # the common chunk, checked inline
            else:
                bad_chunk = _chunk_error(request, tokens, seen)
    kv, block_size, growth = view.kv, view.limits.block_size, None
    if type(kv) is KVBlockManager and kv.block_size == block_size:
        growth = kv.block_growth(plan.chunks)
        blocks = sum(extra for _, extra in growth)
    else:
        blocks = _added_blocks(kv, block_size, plan.chunks)
    return _PlanTotals(tokens_total, admitted, blocks, bad_chunk, growth)


def _added_blocks(kv: KVView, block_size: int, chunks: Sequence[ScheduledChunk]) -> int:
    """KV blocks the chunks add to what their requests hold, in blocks of `block_size`."""
    if isinstance(kv, KVBlockManager) and kv.block_size == block_size:
        return kv.extra_blocks_each(chunks)
    held = kv.held
    blocks = 0
    for request, tokens in chunks:
        needed = -(-(request.num_computed + tokens) // block_size) - held(request)
        if needed > 0:
            blocks += needed
    return blocks


def _chunk_error(request: Request, tokens: int, seen: set[str]) -> InvalidPlanError | None:
    """The error of a chunk scheduled twice or with tokens its phase cannot take (None if
    neither); adds `request` to `seen`."""
    request_id, phase = request.request_id, request.phase
    if request_id in seen:
        return InvalidPlanError(f"request {request_id} scheduled twice")
    seen.add(request_id)
    if phase is DECODING:
        if tokens != 1:
            return InvalidPlanError(f"decode {request_id} given {tokens} tokens, not 1")
        return None
    if phase is FINISHED:
        return InvalidPlanError(f"request {request_id} is finished")
    if not 1 <= tokens <= request.remaining_prefill:
        return InvalidPlanError(
            f"prefill {request_id} given {tokens} tokens, {request.remaining_prefill} remain"
        )
    return None
