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
request starts whatever the forecast, so that the engine never stalls. The walk stops once
the requests kept ahead hold more prefill than a step can run (no later one can start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from slidingserve.core.request import DECODING, WAITING

if TYPE_CHECKING:
    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView
    from slidingserve.policies.output_lengths import OutputLengths

FloatArray = npt.NDArray[np.float64]
ROUNDING = 0.5  # blocks: a request's last block is half full on average


class Occupancy:
    """The forecast blocks of a set of requests, each (c tokens held after this step, R
    steps still to run); queried at the steps where the peak can be (module docstring)."""

    def __init__(self, contexts: FloatArray, steps: FloatArray, block_size: int) -> None:
        order = np.argsort(steps, kind="stable")
        self._steps = steps[order]  # ascending
        self._block_size = block_size
        tails = np.zeros(steps.size + 1)
        tails[:-1] = np.cumsum(contexts[order][::-1])[::-1]
        self._context_tails = tails  # at i: the contexts of the requests from i on, summed
        self._added: list[tuple[float, float]] = []  # (c, R) of each request added since
        # the steps where the peak can be, and the occupancy there
        self._at = np.concatenate(([0.0], np.maximum(self._steps - 1, 0)))
        first = np.searchsorted(self._steps, self._at, side="right")  # those still running
        alive = self._steps.size - first
        self._blocks = (tails[first] + alive * self._at) / block_size + alive * ROUNDING

    def peak_with(self, context: float, steps: float) -> float:
        """The forecast peak, in blocks, with a request of `context` tokens and `steps`
        steps to run added."""
        own = np.where(self._at < steps, (context + self._at) / self._block_size + ROUNDING, 0.0)
        last = steps - 1
        at_its_end = self.blocks_at(last) + (context + last) / self._block_size + ROUNDING
        return max(float(np.max(self._blocks + own)), at_its_end)

    def add(self, context: float, steps: float) -> None:
        """Take a request of `context` tokens and `steps` steps to run into the forecast."""
        last = steps - 1
        at_its_end = self.blocks_at(last) + (context + last) / self._block_size + ROUNDING
        own = np.where(self._at < steps, (context + self._at) / self._block_size + ROUNDING, 0.0)
        self._blocks = np.append(self._blocks + own, at_its_end)
        self._at = np.append(self._at, last)
        self._added.append((context, steps))

    def blocks_at(self, step: float) -> float:
        """The forecast occupancy `step` steps from now, in blocks."""
        blocks = self._base(step)
        for context, steps in self._added:
            if step < steps:
                blocks += (context + step) / self._block_size + ROUNDING
        return blocks

    def _base(self, step: float) -> float:
        """The occupancy of the requests the forecast was made with, `step` steps on."""
        first = int(np.searchsorted(self._steps, step, side="right"))  # those still running
        alive = self._steps.size - first
        tokens = self._context_tails[first] + alive * step
        return float(tokens / self._block_size + alive * ROUNDING)


def forecast_startable(
    queue: list[Request], view: SchedulerView, lengths: OutputLengths, share: float
) -> list[Request]:
    """`queue` (a prefill queue in the policy's order) without the waiting requests that
    may not start this step under the forecast (module docstring); `queue` itself when
    every one may. `lengths`: the output lengths learned so far; `share` (> 0): the part of
    the cache's blocks the forecast peak may reach."""
    kv = view.kv
    limit = share * kv.num_blocks
    running = view.running
    occupancy = Occupancy(
        np.array([held_after_step(r) for r in running], dtype=np.float64),
        np.ceil(np.maximum(lengths.remaining_each([r.num_generated for r in running]), 1.0)),
        kv.block_size,
    )
    step_tokens = view.limits.max_num_batched_tokens
    ahead = 0  # prefill tokens of the requests kept so far
    for position, request in enumerate(queue):
        if ahead >= step_tokens:
            return queue
        if request.phase is WAITING:
            context = float(request.prefill_target)
            steps = float(np.ceil(max(lengths.remaining(request.num_generated), 1.0)))
            if occupancy.peak_with(context, steps) > limit and (running or position):
                return queue[:position] + [r for r in queue[position:] if r.phase is not WAITING]
            occupancy.add(context, steps)
        ahead += request.remaining_prefill
    return queue


def held_after_step(request: Request) -> int:
    """Tokens `request` is taken to hold once this step has run: a decode its context and
    its next token, a prefill its whole prompt."""
    if request.phase is DECODING:
        return request.num_computed + 1
    return request.prefill_target
