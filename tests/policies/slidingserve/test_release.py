"""The decode release (`release.py`): the forecast, the supply of prefill, the choice."""

from __future__ import annotations

import dataclasses
import math

import pytest
from factories import make_decoding, make_request

from slidingserve.core import Request
from slidingserve.policies.output_lengths import OutputLengths
from slidingserve.policies.slidingserve.release import (
    DEMAND_WINDOW,
    DecodeCosts,
    PromptDemand,
    bounding_decodes,
    prefill_supply,
)

# Decodes alone 45 ms of a 50 ms window, 0.1 ms a prefill token beside them.
COSTS = DecodeCosts(decode_time=0.045, per_token=1e-4, max_tokens=2048)
NOW = 1.0


def decodes(protected: bool = False, output: int = 2000) -> list[Request]:
    """Two decodes, slack 50 ms and 3 s, expected to emit 2,000 tokens more (`OUTPUTS`)
    whatever their true `output`."""
    tight = make_decoding("tight", ttft=1.0, output=output)
    tight.slo = dataclasses.replace(tight.slo, protected=protected)
    return [tight, make_decoding("rich", ttft=3.95, output=output)]


OUTPUTS = OutputLengths(prior=2000)  # no request has left: every decode 2,000 tokens more


def demand(rate: float) -> PromptDemand:
    observed = PromptDemand()
    observed.rate, observed.mean_prompt = rate, 2000.0
    return observed


def bounding(rate: float, protected: bool = False, output: int = 2000) -> list[str]:
    queue = [make_request("p", arrival=0.9, prompt=3000, ttft=5.0)]
    running = decodes(protected, output)
    kept = bounding_decodes(running, queue, NOW, 1.1, COSTS, demand(rate), OUTPUTS, 4)
    return [r.request_id for r in kept]


def test_the_tightest_decode_is_released_when_that_saves_three_first_tokens_or_more() -> None:
    # Over the 60 s horizon 3,000 + 1,200 × 60 = 75,000 prompt tokens come; with the tight
    # decode bounding, about 60,400 get through (7.3 prompts short), with the rich one
    # about 84,500 (none short).
    assert bounding(1200.0) == ["rich"]


def test_the_forecast_reads_the_learned_output_not_the_true_one() -> None:
    # A tight decode with 2 tokens left in truth would end within 0.1 s: a forecast told
    # that would never release it. No policy is told it, so the decision stays.
    assert bounding(1200.0, output=3) == ["rich"]


def test_no_release_when_it_saves_fewer() -> None:
    # At 1,000 tokens/s the tight decode costs 1.3 prompts: not worth a late decode.
    assert bounding(1000.0) == ["tight", "rich"]


def test_a_protected_decode_is_never_released() -> None:
    assert bounding(1200.0, protected=True) == ["tight", "rich"]


def test_the_supply_is_the_slack_in_full_batches_then_the_room_under_each_window() -> None:
    per_burst = COSTS.per_token + COSTS.decode_time / COSTS.max_tokens
    assert prefill_supply(0.5, slack=1.0, costs=COSTS, tbt=0.05) == pytest.approx(0.5 / per_burst)
    # Past the slack, each 50 ms window leaves 5 ms: 50 tokens.
    paced = (10.0 - 0.045 * (10.0 - 1.0) / 0.05) / 1e-4
    assert prefill_supply(10.0, slack=1.0, costs=COSTS, tbt=0.05) == pytest.approx(paced)
    # Decodes that alone fill the window let nothing through past the slack.
    full = DecodeCosts(decode_time=0.06, per_token=1e-4, max_tokens=2048)
    burst = 1.0 / full.per_burst_token
    assert prefill_supply(10.0, slack=1.0, costs=full, tbt=0.05) == pytest.approx(burst)


def test_demand_counts_each_arrival_once_and_decays() -> None:
    observed = PromptDemand()
    first = make_request("a", arrival=1.0, prompt=600)
    observed.observe(1.0, [first])
    assert observed.rate == pytest.approx(600 / DEMAND_WINDOW)
    assert observed.mean_prompt == 600
    second = make_request("b", arrival=2.0, prompt=1200)
    requeued = make_request("old", arrival=0.5, prompt=5000)  # preempted, back in the queue
    observed.observe(2.0, [requeued, first, second])
    decayed = 600 / DEMAND_WINDOW * math.exp(-1.0 / DEMAND_WINDOW)
    assert observed.rate == pytest.approx(decayed + 1200 / DEMAND_WINDOW)
    assert observed.mean_prompt == pytest.approx(900)
