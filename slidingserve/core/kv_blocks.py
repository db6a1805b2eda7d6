"""KV-cache block accounting (paged attention): who holds how many blocks."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from slidingserve.core.request import Request
    from slidingserve.core.view import KVView

BlockGrowth = list[tuple["Request", int]]  # (request, blocks it adds) of each that adds some


def blocks_for_tokens(tokens: int, block_size: int) -> int:
    """Blocks needed to hold `tokens` cached tokens."""
    return -(-tokens // block_size)


def next_token_blocks(kv: KVView, requests: Iterable[Request]) -> int:
    """Blocks `requests` must add together to cache one more token each (decodes: the room
    the engine makes and `PlanBuilder` keeps for them). One pass, no call per request: it
    runs over every decode at every iteration."""
    if isinstance(kv, KVBlockManager):
        return kv.next_token_blocks(requests)
    held, block_size = kv.held, kv.block_size
    total = 0
    for request in requests:
        extra = -(-(request.num_computed + 1) // block_size) - held(request)
        if extra > 0:
            total += extra
    return total


class KVBlockManager:
    """Counts free KV blocks and the blocks each request holds.

    Blocks are allocated when a chunk is scheduled (for the tokens it will write) and freed
    when the request finishes or is preempted. Allocation never over-commits: a request that
    asks for more than is free gets an error, so callers check `can_grow` first.
    """

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"KV cache needs blocks: {num_blocks} blocks of {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._num_free = num_blocks
        self._held: dict[str, int] = {}

    @property
    def num_free(self) -> int:
        """Blocks no request holds."""
        return self._num_free

    def held(self, request: Request) -> int:
        """Blocks `request` holds now."""
        return self._held.get(request.request_id, 0)

    def extra_blocks(self, request: Request, new_tokens: int) -> int:
        """Blocks `request` must add to cache `new_tokens` more tokens."""
        needed = -(-(request.num_computed + new_tokens) // self.block_size)  # blocks_for_tokens
        extra = needed - self._held.get(request.request_id, 0)
        return extra if extra > 0 else 0

    def next_token_blocks(self, requests: Iterable[Request]) -> int:
        """`kv_blocks.next_token_blocks` read from the table itself (no call per request)."""
        held, block_size = self._held.get, self.block_size
        total = 0
        for request in requests:
            extra = -(-(request.num_computed + 1) // block_size) - held(request.request_id, 0)
            if extra > 0:
                total += extra
        return total

    def can_grow(self, request: Request, new_tokens: int) -> bool:
        """Whether the free blocks can hold `new_tokens` more tokens of `request`."""
        return self.extra_blocks(request, new_tokens) <= self.num_free

    def grow(self, request: Request, new_tokens: int) -> None:
        """Allocate the blocks for `new_tokens` more cached tokens of `request`."""
        self.grow_each(((request, new_tokens),))

    def grow_each(self, growths: Iterable[tuple[Request, int]]) -> None:
        """`grow` for each (request, new tokens) pair in turn, in one pass (no call per
        request: the simulator grows every request of a batch at every iteration)."""
        table, block_size = self._held, self.block_size
        for request, new_tokens in growths:
            request_id = request.request_id
            held = table.get(request_id, 0)
            extra = -(-(request.num_computed + new_tokens) // block_size) - held
            if extra <= 0:
                continue
            if extra > self._num_free:
                raise RuntimeError(
                    f"KV over-commit: request {request_id} needs {extra} blocks, "
                    f"{self._num_free} free"
                )
            table[request_id] = held + extra
            self._num_free -= extra

    def extra_blocks_each(self, growths: Iterable[tuple[Request, int]]) -> int:
        """Σ `extra_blocks` over (request, new tokens) pairs, in one pass."""
        return sum(extra for _, extra in self.block_growth(growths))

    def block_growth(self, growths: Iterable[tuple[Request, int]]) -> BlockGrowth:
        """The (request, blocks) of each (request, new tokens) pair that adds blocks, in
        order (a plan's chunks: each request once), for `grow_by`."""
        held, block_size = self._held.get, self.block_size
        growing = []
        for request, new_tokens in growths:
            extra = -(-(request.num_computed + new_tokens) // block_size) - held(
                request.request_id, 0
            )
            if extra > 0:
                growing.append((request, extra))
        return growing

    def grow_by(self, growing: BlockGrowth) -> None:
        """Allocate what `block_growth` counted, nothing having changed since: `grow_each`
        of the same pairs, without counting them again (the simulator counts a plan's blocks
        when it validates it)."""
        total = sum(extra for _, extra in growing)
        if total > self._num_free:
            raise RuntimeError(f"KV over-commit: {total} blocks needed, {self._num_free} free")
        table = self._held
        for request, extra in growing:
            request_id = request.request_id
            table[request_id] = table.get(request_id, 0) + extra
        self._num_free -= total

    def free(self, request: Request) -> None:
        """Release every block of `request` (finished or preempted)."""
        self._num_free += self._held.pop(request.request_id, 0)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free
