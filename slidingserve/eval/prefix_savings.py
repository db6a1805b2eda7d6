"""The most prefill a prefix cache could save: what the bounds charge when it is on.

The bounds (capacity, SLO-aware, memory-aware) charge every prompt token. With a prefix
cache a request computes only what it does not find cached, so a run can pass a bound that
ignores the cache. They charge instead the prompt less its *best-case hit*: the leading
full blocks whose keys an earlier request (in arrival order) had computed, prompt or
output, at most the prompt less one token, as a cache that never evicts and a schedule
that always finishes earlier requests first would find. No run finds more, so the bounds
stay upper bounds; eviction, concurrency and the order requests run in only lower the hits
a real run gets (the run's own hit rate, printed beside it, says how far).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from slidingserve.core.prefix import Run, block_keys

IntArray = npt.NDArray[np.int64]


def best_case_hits(
    contents: Sequence[Sequence[Run]], prompts: Sequence[int], outputs: Sequence[int], block: int
) -> IntArray:
    """Per request, in arrival order, the prompt tokens an unbounded cache could find
    (module docstring); 0 for a request without content."""
    seen: set[int] = set()
    hits = np.zeros(len(prompts), dtype=np.int64)
    for i, (runs, prompt, output) in enumerate(zip(contents, prompts, outputs, strict=True)):
        if not runs:
            continue
        keys = block_keys(runs, block)
        most = min(len(keys), (prompt - 1) // block)
        found = 0
        while found < most and keys[found] in seen:
            found += 1
        hits[i] = found * block
        seen.update(keys[: (prompt + output - 1) // block])  # the blocks it computes
    return hits


def computed_prompts(
    contents: Sequence[Sequence[Run]] | None,
    prompts: IntArray,
    outputs: IntArray,
    block: int,
    prefix_caching: bool,
) -> IntArray:
    """The prompt tokens the bounds charge: all of them without a prefix cache or content,
    else each prompt less its best-case hit (≥ 1)."""
    if not prefix_caching or contents is None or not any(contents):
        return prompts
    hits = best_case_hits(contents, prompts.tolist(), outputs.tolist(), block)
    charged: IntArray = prompts - hits
    return charged
