"""The decode release (option `release_decodes`, docs/design.md §8.2) [beyond the paper]:
Moore and Hodgson's trade across the two queues, on a forecast.

Where decode attention fills most of a TBT window, the budget is the room the tightest decode
leaves, and a long-lived decode with little slack keeps it small for the rest of its life
while prompts queue behind it. Releasing the m tightest decodes (they stop bounding the
budget and will likely be late) lets the next one's slack bound it instead. The release is
made when the forecast says that keeping those decodes on time costs at least `RELEASE_GAIN`
× m first tokens:

- over the tightest decode's remaining life (at most `FORECAST_HORIZON`), the prompts to
  prefill are those queued now plus those arriving at the observed rate (`PromptDemand`);
  that life is the policy's estimate from the outputs of the requests that have left
  (`OutputLengths.remaining`), never the request's own output length;
- the prefill the decodes let through in that time is `prefill_supply`: the slack of the
  tightest decode still bounding, spent in full batches, then the room under each TBT
  window beside the decodes;
- the shortfall, in mean prompts, is the first tokens lost.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.request import Request
    from slidingserve.policies.output_lengths import OutputLengths

RELEASE_GAIN = 3.0  # first tokens a release must save per decode released (measured: 1 and 2
# released decodes the A100 with Llama-2-7B could have kept; docs/results.md §8.1)
FORECAST_HORIZON = 60.0  # seconds: the longest future the forecast looks at
DEMAND_WINDOW = 60.0  # seconds: time constant of the arrival rate of prompt tokens


class DecodeCosts(NamedTuple):
    """What an iteration costs beside today's decodes, from the predictor."""

    decode_time: float  # seconds of an iteration of the decodes alone
    per_token: float  # seconds per prefill token added to it
    max_tokens: int  # B_max of the step: the largest batch it may plan

    @property
    def per_burst_token(self) -> float:
        """Seconds per prefill token in full batches: the token's own cost and its share of
        the decodes' time."""
        return self.per_token + self.decode_time / self.max_tokens


class PromptDemand:
    """Prompt tokens arriving per second (an EMA over `DEMAND_WINDOW`) and the mean prompt,
    from the requests that reach the waiting queue."""

    def __init__(self) -> None:
        self.rate = 0.0  # prompt tokens per second
        self.mean_prompt = 0.0  # tokens, over the last 100 arrivals (0 before any)
        self._count = 0
        self._latest_arrival = -math.inf
        self._last_seen = -math.inf

    def observe(self, now: float, waiting: Sequence[Request]) -> None:
        """Fold in the requests of `waiting` that arrived since the last call (the queue
        holds arrivals in order at its end; a preempted request, re-queued, is not new)."""
        if now > self._last_seen > -math.inf:
            self.rate *= math.exp(-(now - self._last_seen) / DEMAND_WINDOW)
        self._last_seen = max(self._last_seen, now)
        latest = self._latest_arrival
        for request in reversed(waiting):
            if request.arrival <= self._latest_arrival:
                break
            latest = max(latest, request.arrival)
            self.rate += request.prompt_len / DEMAND_WINDOW
            self._count += 1
            self.mean_prompt += (request.prompt_len - self.mean_prompt) / min(self._count, 100)
        self._latest_arrival = latest


def prefill_supply(seconds: float, slack: float, costs: DecodeCosts, tbt: float) -> float:
    """Most prefill tokens in the next `seconds` while a decode of `slack` seconds and pace
    `tbt` stays on time: its slack spent in full batches, then the room each TBT window
    leaves beside the decodes (none where they alone fill it)."""
    if seconds <= 0:
        return 0.0
    burst = min(seconds, slack) / costs.per_burst_token
    if seconds <= slack:
        return burst
    paced = (seconds - costs.decode_time * (seconds - slack) / tbt) / costs.per_token
    return max(burst, min(seconds / costs.per_burst_token, paced))


def bounding_decodes(
    decoding: Sequence[Request],
    queue: Sequence[Request],
    now: float,
    time_margin: float,
    costs: DecodeCosts,
    demand: PromptDemand,
    outputs: OutputLengths,
    max_released: int,
) -> list[Request]:
    """The decodes that still bound the budget: all but the m ≤ `max_released` tightest,
    m chosen to lose the fewest requests (decodes released + first tokens the forecast says
    are lost), each release saving at least `RELEASE_GAIN` first tokens a decode. A protected
    decode is never released, nor any decode behind it in slack order."""
    safe = sorted((r for r in decoding if r.next_deadline > now), key=lambda r: r.next_deadline)
    queued = sum(r.remaining_prefill for r in queue if r.next_deadline > now)
    if not safe or not queued or demand.mean_prompt <= 0:
        return list(decoding)
    tightest = safe[0]
    remaining = outputs.remaining(tightest.num_generated)
    horizon = min(FORECAST_HORIZON, remaining * tightest.slo.tbt)
    need = queued + demand.rate * horizon
    tbt = min(r.slo.tbt for r in safe)
    slacks = [(r.next_deadline - now) / time_margin for r in safe] + [math.inf]

    def first_tokens_lost(released: int) -> float:
        short = need - prefill_supply(horizon, slacks[released], costs, tbt)
        return max(0.0, short) / demand.mean_prompt

    releasable = next((i for i, r in enumerate(safe) if r.protected), len(safe))
    kept_lost = first_tokens_lost(0)
    best, best_count = kept_lost, 0
    for count in range(1, min(max_released, releasable) + 1):
        lost = first_tokens_lost(count)
        if kept_lost - lost >= RELEASE_GAIN * count and count + lost < best:
            best, best_count = count + lost, count
    released = {id(r) for r in safe[:best_count]}
    return [r for r in decoding if id(r) not in released]
