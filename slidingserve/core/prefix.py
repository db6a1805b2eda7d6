"""What a request's tokens are, as far as a prefix cache needs to know: runs of content.

The simulator has no token ids. A workload that knows which requests share text (a system
prompt, earlier turns of a conversation, Mooncake's `hash_ids`) describes each request's
tokens, prompt then output, as *runs*: (segment id, tokens) pairs in order, where two runs
of one segment id hold the same text from their start. Two requests share a prefix exactly
as far as their runs agree.

A prefix cache identifies a full block of `block_size` tokens by a chain: the block's key is
a hash of the previous block's key and the pieces of segments it covers, so equal keys mean
equal tokens from the first one, as vLLM's block hashes do. Only full blocks have keys.
"""

from __future__ import annotations

from collections.abc import Sequence

Run = tuple[int, int]
"""(segment id, tokens): that many tokens of a segment, from where its last run left off
(or its start)."""

ROOT_KEY = 0x5EED
"""The key the chain starts from (any constant: keys only compare within one cache)."""


def check_runs(runs: Sequence[Run], total: int, owner: str) -> None:
    """ValueError unless `runs` is empty or its tokens add up to `total` in positive runs."""
    if not runs:
        return
    if any(tokens < 1 for _, tokens in runs):
        raise ValueError(f"{owner}: every content run needs at least one token, got {runs!r}")
    covered = sum(tokens for _, tokens in runs)
    if covered != total:
        raise ValueError(f"{owner}: content runs cover {covered} tokens, the request has {total}")


def block_keys(runs: Sequence[Run], block_size: int) -> list[int]:
    """The key of every full block of the tokens `runs` describe (module docstring)."""
    if block_size < 1:
        raise ValueError(f"block size must be at least 1 token, got {block_size}")
    keys: list[int] = []
    key, room = ROOT_KEY, block_size
    pieces: list[tuple[int, int, int]] = []  # (segment, first token, tokens) in this block
    offsets: dict[int, int] = {}  # tokens of each segment used so far
    for segment, tokens in runs:
        start = offsets.get(segment, 0)
        offsets[segment] = start + tokens
        while tokens:
            taken = min(tokens, room)
            if pieces and pieces[-1][0] == segment and sum(pieces[-1][1:]) == start:
                pieces[-1] = (segment, pieces[-1][1], pieces[-1][2] + taken)  # one stretch
            else:
                pieces.append((segment, start, taken))
            start, tokens, room = start + taken, tokens - taken, room - taken
            if not room:
                key = hash((key, tuple(pieces)))
                keys.append(key)
                pieces, room = [], block_size
    return keys


def leading_runs(runs: Sequence[Run], tokens: int) -> tuple[Run, ...]:
    """The runs of the first `tokens` tokens of `runs` (a trimmed request's content)."""
    kept: list[Run] = []
    for segment, length in runs:
        if tokens <= 0:
            break
        kept.append((segment, min(length, tokens)))
        tokens -= length
    return tuple(kept)
