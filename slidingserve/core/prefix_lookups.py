"""The hits of the requests waiting for a prefix cache, kept up to date between lookups.

A simulator looks up every waiting request at every step, and Mooncake's prompts run to
hundreds of blocks: scanning each from its first block each time would cost more than the
rest of the simulation. So each lookup is kept, and changes reach it: when a block's key
is evicted, every kept hit that holds it is cut there at once (each waiting request's keys
are indexed by position); when keys are cached, a lookup carries on from where its hit
ended, since the blocks before it are still there. The result is the same as a scan from
the first block (tests/core/test_prefix_cache.py checks it against one).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class KeptHit:
    """A waiting request's hit as last found, and what was true then."""

    blocks: int  # leading blocks found (cut at once when one of them is evicted)
    registrations: int  # keys the cache had cached when it was found
    target: int  # the request's prefill target then
    shared: int = 0  # of `blocks`, those running requests hold, as counted
    shared_stamp: tuple[int, int] = (-1, -1)  # (blocks, holder changes) when counted


class KeptHits:
    """Every waiting request's `KeptHit`, and which of them each key's eviction cuts."""

    def __init__(self) -> None:
        self._hits: dict[str, KeptHit] = {}
        self._watchers: dict[int, dict[str, int]] = {}  # key -> {request id: its position}

    def get(self, request_id: str) -> KeptHit | None:
        return self._hits.get(request_id)

    def keep(self, request_id: str, keys: list[int], registrations: int, target: int) -> KeptHit:
        """A new, empty hit for `request_id` with these block keys, watched from now on."""
        hit = self._hits[request_id] = KeptHit(0, registrations, target)
        watchers = self._watchers
        for position, key in enumerate(keys):
            watching = watchers.get(key)
            if watching is None:
                watchers[key] = {request_id: position}
            else:
                watching[request_id] = position
        return hit

    def evicted(self, key: int) -> None:
        """`key` left the cache: cut every kept hit that reaches past it."""
        watching = self._watchers.get(key)
        if not watching:
            return
        hits = self._hits
        for request_id, position in watching.items():
            hit = hits[request_id]
            if position < hit.blocks:
                hit.blocks = position

    def forget(self, request_id: str, keys: list[int]) -> None:
        """Stop keeping `request_id`'s hit (it started or left); `keys` as kept."""
        if self._hits.pop(request_id, None) is None:
            return
        watchers = self._watchers
        for key in keys:
            watching = watchers.get(key)
            if watching is not None:
                watching.pop(request_id, None)
                if not watching:
                    del watchers[key]

    def __len__(self) -> int:
        return len(self._hits)
