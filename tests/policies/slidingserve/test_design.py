"""`slidingserve` (the measured design) against `slidingserve-paper`: the switches the
design adds, each checked on a hand-made view."""

from __future__ import annotations

from typing import Any

import pytest
from factories import TokenLinearModel, make_decoding, make_request, make_view

from slidingserve.core import EngineLimits, Plan
from slidingserve.policies import PolicyContext, make_policy
from slidingserve.policies.slidingserve import DESIGN, PAPER, SlidingServePolicy
from slidingserve.policies.slidingserve.ordering import MlpsOrder

# 10 ms a batch plus 10 µs a token: TimeToBudget(t) = (t − 10 ms) / 10 µs tokens.
AFFINE = TokenLinearModel(0.010, 1e-5)
OTHER = TokenLinearModel(0.010, 2e-5)  # twice the cost per token


def build(name: str = "slidingserve", **options: Any) -> SlidingServePolicy:
    context = PolicyContext(EngineLimits(), AFFINE, predictors={"paper": OTHER, "rich": AFFINE})
    built = make_policy(name, context, options)
    assert isinstance(built, SlidingServePolicy)
    return built


def tokens(plan: Plan) -> dict[str, int]:
    return {c.request.request_id: c.tokens for c in plan.chunks}


def test_the_default_runs_the_design_and_the_paper_variant_the_paper() -> None:
    assert build().config == DESIGN
    assert build("slidingserve-paper").config == PAPER


def test_user_options_override_the_design() -> None:
    assert build(sorter="mlps").config.ordering == MlpsOrder()


def test_each_variant_plans_with_the_predictor_of_its_feature_set() -> None:
    assert build().model.model is AFFINE  # rich
    assert build("slidingserve-paper").model.model is OTHER
    # Without a predictor per set (a live server), the context's predictor serves.
    lone = make_policy("slidingserve-paper", PolicyContext(EngineLimits(), AFFINE))
    assert isinstance(lone, SlidingServePolicy)
    assert lone.model.model is AFFINE


def decode_view(tbt: float = 0.05) -> Any:
    """One decode whose next deadline is 40 ms away, and a long prompt waiting."""
    decode = make_decoding("d", arrival=0.0, ttft=0.96, tbt=tbt, generated=1)
    waiting = make_request("p", arrival=0.9, prompt=5000, ttft=5.0)
    view, _ = make_view(now=0.97, waiting=[waiting], running=[decode])
    return view


def test_the_budget_fills_the_tightest_decode_slack() -> None:
    # Slack 40 ms: (40 − 10) ms / 10 µs = 3000 tokens, capped by the 2048-token budget.
    plan = build(token_quantum=0, time_margin=1.0).schedule(decode_view())
    assert sum(tokens(plan).values()) == 2048


def test_time_margin_shrinks_the_slack_and_the_quantum_rounds_the_total_down() -> None:
    # 40 ms ÷ 1.6 = 25 ms → 1500 tokens in all; rounded down to a multiple of 128: 1408.
    plan = build(time_margin=1.6, token_quantum=0).schedule(decode_view())
    assert sum(tokens(plan).values()) == 1500
    plan = build(time_margin=1.6, token_quantum=128).schedule(decode_view())
    assert sum(tokens(plan).values()) == 1408
    assert tokens(plan)["d"] == 1


def test_iteration_cap_bounds_an_iteration_by_the_tightest_tbt() -> None:
    # Cap 0.4 × 50 ms = 20 ms → 1000 tokens, though the slack would allow 2048.
    plan = build(iteration_cap=0.4, token_quantum=0, time_margin=1.0).schedule(decode_view())
    assert sum(tokens(plan).values()) == 1000


def test_a_cap_above_one_leaves_prefill_room_when_the_decodes_alone_exceed_the_tbt() -> None:
    # TBT 5 ms, the decode alone 10.01 ms, slack 35 ms. Cap 1 allows only the decode; cap 2
    # allows the decodes' time + one TBT, 15.01 ms: about 500 prefill tokens.
    decode = make_decoding("d", arrival=0.0, ttft=1.0, tbt=0.005, generated=1)
    waiting = make_request("p", arrival=0.9, prompt=5000, ttft=5.0)
    view, _ = make_view(now=0.97, waiting=[waiting], running=[decode])
    options: dict[str, Any] = {"token_quantum": 0, "time_margin": 1.0}
    assert tokens(build(iteration_cap=1.0, **options).schedule(view)) == {"d": 1}
    capped = tokens(build(iteration_cap=2.0, **options).schedule(view))
    assert capped["d"] == 1 and 495 <= capped["p"] <= 500


def test_lost_requests_go_last_and_triage_serves_the_ones_that_can_make_it() -> None:
    lost = make_request("lost", arrival=0.0, prompt=100, ttft=0.5)
    big = make_request("big", arrival=0.9, prompt=15000, ttft=0.3)  # due 1.2 s
    small = make_request("small", arrival=0.9, prompt=2000, ttft=0.31)  # due 1.21 s
    view, _ = make_view(now=1.0, waiting=[lost, big, small])
    policy = build(token_quantum=0)
    order = [r.request_id for r in policy._sorted_queue(view)]
    # EDF would run lost, big, small; big and small cannot both make it (> 0.2 s of work
    # at the initial rate): Moore–Hodgson gives up big, the largest.
    rate = policy.rate.value
    assert (15000 + 2000) / rate > 0.2 and 2000 / rate < 0.2
    assert order == ["small", "big", "lost"]
    edf = build(overload="none", lost_last=False)
    assert [r.request_id for r in edf._sorted_queue(view)] == ["lost", "big", "small"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("overload", "drop", "unknown overload"),
        ("triage_rate", "guess", "unknown triage_rate"),
        ("iteration_cap", -1, "iteration_cap"),
        ("time_margin", 0.9, "time_margin"),
        ("token_quantum", -128, "token_quantum"),
        ("features", "deep", "unknown features"),
        ("lost_last", "yes", "lost_last"),
    ],
)
def test_bad_switches_are_refused_with_their_name(option: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build(**{option: value})


def tight_cache_case(kv_blocks: int, tbt: float = 0.03) -> tuple[Any, EngineLimits]:
    """One decode (320 cached tokens) 55 ms from its deadline, a long prompt waiting, and
    a cache of `kv_blocks` blocks; a budget of 8192 tokens, so that only time bounds it."""
    limits = EngineLimits(max_num_batched_tokens=8192)
    decode = make_decoding("d", prompt=320, arrival=0.0, ttft=1.0, tbt=tbt, generated=1)
    waiting = make_request("p", arrival=0.9, prompt=20_000, ttft=5.0)
    view, _ = make_view(
        now=1.0 + tbt - 0.055,
        waiting=[waiting],
        running=[decode],
        limits=limits,
        kv_blocks=kv_blocks,
    )
    return view, limits


def capped_total(view: Any, limits: EngineLimits, **options: Any) -> int:
    context = PolicyContext(limits, AFFINE, predictors={"paper": OTHER, "rich": AFFINE})
    base = {"token_quantum": 0, "time_margin": 1.0, "kv_forecast": 0}  # the forecast off
    policy = make_policy("slidingserve", context, base | options)
    return sum(tokens(policy.schedule(view)).values())


def test_while_the_cache_is_tight_the_tight_cache_cap_bounds_an_iteration() -> None:
    # Cap 2 allows 60 ms, so the 55 ms slack bounds: (55 − 10) ms / 10 µs = 4500 tokens.
    # With the cache tight (about 400 free blocks, fewer than a full plan could take), a
    # tight cap of 1 allows one TBT, 30 ms: 2000 tokens.
    tight, limits = tight_cache_case(kv_blocks=21 + 400)
    ample, _ = tight_cache_case(kv_blocks=100_000)
    assert abs(capped_total(ample, limits) - 4500) <= 1
    assert abs(capped_total(tight, limits, tight_cache_cap=0) - 4500) <= 1  # the option off
    assert abs(capped_total(tight, limits) - 2000) <= 1  # the design: on
    assert abs(capped_total(ample, limits) - 4500) <= 1


def test_the_tight_cache_cap_waits_while_the_decodes_take_over_half_a_tbt() -> None:
    # TBT 15 ms: the decode alone (10 ms) takes two thirds of it, and a cap of one TBT
    # would leave the prefill 5 ms, so the cap of 2 stays: max(30, 10 + 15) ms, and the
    # 55 ms slack is cut to 30 ms.
    tight, limits = tight_cache_case(kv_blocks=21 + 400, tbt=0.015)
    plain = capped_total(tight, limits, tight_cache_cap=0)
    assert abs(plain - 2000) <= 1
    assert capped_total(tight, limits) == plain


def test_a_bad_tight_cache_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="tight_cache_cap"):
        build(tight_cache_cap=-1)
    with pytest.raises(ValueError, match="tight_cache_cap does nothing"):
        build(chunker="fixed", tight_cache_cap=1.0)
