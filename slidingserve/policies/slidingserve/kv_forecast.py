"""Forecast admission (option `kv_forecast`) [beyond the paper].

Where the KV cache binds, a request started now holds its blocks for seconds, and the
decodes it joins keep growing by a token a step. vLLM starts a waiting request once its
first chunk fits in the free blocks; when the running requests then outgrow the cache,
one of them is preempted and recomputed. With this option a waiting request starts only
when the blocks the running requests and it are forecast to hold stay within a share of
the cache at every later step.

**The forecast.** Each request is taken to emit one token a step until it has emitted
its expected remaining output, learned from the requests that have left
(`OutputLengths.remaining`: the mean excess over what it has emitted of the longer output
lengths seen; no policy is told a request's output length), rounded up. A decode of
context c holds (c + t)/s + ½ blocks t steps from now (s tokens a block, half a block of
rounding on average), a prefill or a waiting request the same from its whole prompt. The
forecast occupancy is the sum over the requests still running at step t; it grows between
departures, so its peak is at step 0 or just before a departure.

**The rule.** The queue keeps its order. Walking it, each waiting request is added to the
forecast if the peak stays within `share` of the cache's blocks; the first that does not
stops the starts for the step, as vLLM's admission does (requests already started keep
their places). A share above 1 over-commits: the expectations are means of a heavy-tailed
distribution, so the peak is rarely reached. With nothing running and nothing ahead, a
request starts whatever the forecast, so that the engine never stalls. Only the waiting
requests before the requests kept ahead hold more prefill than a step can run are tested
(no later one can start this step), all in one array pass (`first_over`), and none is
when a bound shows the cache holds even if every request ran to the longest output seen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from slidingserve.core.request import DECODING, WAITING
from slidingserve.policies.slidingserve.whole_prefills import starts_stopped_at

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView
    from slidingserve.policies.output_lengths import OutputLengths

FloatArray = npt.NDArray[np.float64]
ROUNDING = 0.5  # blocks: a request's last block is half full on average


def forecast_startable(
    queue: list[Request], view: SchedulerView, lengths: OutputLengths, share: float
) -> list[Request]:
    """`queue` (a prefill queue in the policy's order) without the waiting requests that
    may not start this step under the forecast (module docstring); `queue` itself when
    every one may. `lengths`: the output lengths learned so far; `share` (> 0): the part of
    the cache's blocks the forecast peak may reach."""
    positions = _within_reach(queue, view.limits.max_num_batched_tokens)
    if not positions:
        return queue
    kv = view.kv
    limit = share * kv.num_blocks
    running = view.running
    held = held_after_step(running)
    waiting = [queue[p] for p in positions]
    prompts = [r.prefill_target for r in waiting]
    if _most_blocks(held, prompts, lengths.most_remaining(), kv.block_size) <= limit:
        return queue  # even if every request ran to the longest output, the cache holds
    # one pass of the learned lengths for both: the running requests, then the waiting
    steps = _steps(lengths, [r.num_generated for r in (*running, *waiting)])
    count = len(held)
    refused = first_over(
        Forecast(np.array(held, dtype=np.float64), steps[:count], kv.block_size),
        np.array(prompts, dtype=np.float64),
        steps[count:],
        limit,
        first_free=not running,
    )
    if refused is None:
        return queue
    return starts_stopped_at(queue, positions[refused])


class Forecast(NamedTuple):
    """Requests as the forecast sees them: tokens held after this step, steps to run."""

    contexts: FloatArray
    steps: FloatArray  # whole steps, at least 1
    block_size: int


def first_over(
    running: Forecast,
    contexts: FloatArray,
    steps: FloatArray,
    limit: float,
    *,
    first_free: bool = False,
) -> int | None:
    """The index of the first of the candidates (`contexts`, `steps`, in the queue's order)
    whose start, after those before it, takes the forecast peak of `running` and them above
    `limit` blocks; None if none does. `first_free`: the first candidate starts whatever the
    peak (nothing runs), and counts for the others.

    The occupancy is evaluated at step 0 and at each request's last step, which holds
    every peak (it grows between departures); a point where some candidate not yet added
    has its last step is a value the occupancy takes, so evaluating every candidate at
    every such point finds the same peaks."""
    size = running.block_size
    at = np.concatenate(([0.0], running.steps - 1, steps - 1))
    order = np.argsort(running.steps)
    ordered_steps = running.steps[order]
    # at i: the contexts of the running requests from i on in `ordered_steps`, summed
    tails = np.append(np.cumsum(running.contexts[order][::-1])[::-1], 0.0)
    first = np.searchsorted(ordered_steps, at, side="right")  # running ones alive at `at`
    alive = ordered_steps.size - first
    base = (tails[first] + alive * at) / size + alive * ROUNDING
    own = (contexts[:, None] + at) / size + ROUNDING
    own[at >= steps[:, None]] = 0.0
    peaks = (base + np.cumsum(own, axis=0)).max(axis=1)
    over = np.flatnonzero(peaks > limit)
    if first_free:
        over = over[over > 0]
    return int(over[0]) if over.size else None


def _within_reach(queue: list[Request], step_tokens: int) -> list[int]:
    """The positions in `queue` of the waiting requests that could start this step: those
    before the requests kept ahead hold more prefill than a step can run."""
    positions = []
    ahead = 0  # prefill tokens of the requests before
    for position, request in enumerate(queue):
        if ahead >= step_tokens:
            break
        if request.phase is WAITING:
            positions.append(position)
        ahead += request.remaining_prefill
    return positions


def _steps(lengths: OutputLengths, generated: list[int]) -> FloatArray:
    """Whole steps each request is expected still to run, at least 1."""
    steps: FloatArray = np.ceil(np.maximum(lengths.remaining_each(generated), 1.0))
    return steps


def _most_blocks(held: list[int], prompts: list[int], longest: float, block_size: int) -> float:
    """A bound on the forecast peak: every request at its context grown by `longest`."""
    count = len(held) + len(prompts)
    return (sum(held) + sum(prompts) + count * longest) / block_size + count * ROUNDING


def held_after_step(requests: Sequence[Request]) -> list[int]:
    """Tokens each of `requests` (running) is taken to hold once this step has run: a
    decode its context and its next token, a prefill its whole prompt (one pass, no call
    per request: the forecast reads every running request at every step)."""
    return [
        r.num_computed + 1 if r.phase is DECODING else r.prompt_len + r.num_generated
        for r in requests
    ]
