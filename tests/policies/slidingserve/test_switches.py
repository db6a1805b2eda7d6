"""Each option of SlidingServe seen through the policy (`make_policy` with the option, then
`schedule` or the queue it sorts), for the options no other test drives that way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from factories import TokenLinearModel, make_decoding, make_request, make_view, seats_view

from slidingserve.core import EngineLimits, Plan, Request, SchedulerView
from slidingserve.policies import PolicyContext, make_policy
from slidingserve.policies.slidingserve import SlidingServePolicy
from slidingserve.predictor import Features, Scenario

# 10 ms a batch plus 10 µs a token: TimeToBudget(t) = (t − 10 ms) / 10 µs tokens.
AFFINE = TokenLinearModel(0.010, 1e-5)
NOW = 1.0


def build(
    name: str = "slidingserve",
    model: Any = AFFINE,
    limits: EngineLimits | None = None,
    **options: Any,
) -> SlidingServePolicy:
    built = make_policy(name, PolicyContext(limits or EngineLimits(), model), options)
    assert isinstance(built, SlidingServePolicy)
    return built


def ids(requests: Sequence[Request]) -> list[str]:
    return [r.request_id for r in requests]


def chunks(plan: Plan) -> list[tuple[str, int]]:
    return [(c.request.request_id, c.tokens) for c in plan.chunks]


def order(policy: SlidingServePolicy, view: SchedulerView) -> list[str]:
    return ids(policy._sorted_queue(view))


class TestOrdering:
    def test_alpha(self) -> None:
        # ρ = 1000 tok/s, both due in 1 s: a's urgency 0.6, b's 0.3. Urgent (u > α) first.
        a = make_request("a", arrival=0.0, ttft=2.0, prompt=600)
        b = make_request("b", arrival=0.0, ttft=2.0, prompt=300)
        view, _ = make_view(now=NOW, waiting=[a, b])
        for alpha, expected in ((1.0, ["b", "a"]), (0.5, ["a", "b"])):
            policy = build("slidingserve-paper", alpha=alpha)
            policy.rate.value = 1000.0
            assert order(policy, view) == expected

    def test_epsilon(self) -> None:
        # tiny: 5 tokens, 0.1 ms of slack: u = 5 / (1000 · max(0.1 ms, ε)); other: 1 token.
        tiny = make_request("tiny", arrival=0.0, ttft=NOW + 0.0001, prompt=5)
        other = make_request("other", arrival=0.0, ttft=NOW + 5.0, prompt=1)
        view, _ = make_view(now=NOW, waiting=[tiny, other])
        for epsilon, expected in ((0.001, ["tiny", "other"]), (0.01, ["other", "tiny"])):
            policy = build("slidingserve-paper", epsilon=epsilon)
            policy.rate.value = 1000.0
            assert order(policy, view) == expected  # u = 5 urgent; u = 0.5 not

    def test_lost_last(self) -> None:
        lost = make_request("lost", arrival=0.0, ttft=0.5, prompt=100)
        live = make_request("live", arrival=0.5, ttft=1.0, prompt=100)
        view, _ = make_view(now=NOW, waiting=[lost, live])
        assert order(build(overload="none", lost_last=True), view) == ["live", "lost"]
        assert order(build(overload="none", lost_last=False), view) == ["lost", "live"]


def triage_view(decode_tbt: float) -> SchedulerView:
    """big (10 000 tokens, due in 0.2 s) then small (100, due in 0.3 s), one decode."""
    big = make_request("big", arrival=0.9, ttft=0.3, prompt=10_000)
    small = make_request("small", arrival=0.9, ttft=0.4, prompt=100)
    decode = make_decoding("d", arrival=0.0, ttft=0.96, tbt=decode_tbt, generated=1)
    view, _ = make_view(now=NOW, waiting=[big, small], running=[decode])
    return view


class TestTriage:
    def test_triage_rate(self) -> None:
        # ema: ρ_0 = 2048 / 30.48 ms = 67 192 tok/s, big takes 0.149 s: both kept.
        # predicted: 2047 tokens beside the decode in 50 ms = 40 940 tok/s, big takes
        # 0.244 s > 0.2 s: given up.
        view = triage_view(decode_tbt=0.05)
        assert order(build(triage_rate="ema"), view) == ["big", "small"]
        assert order(build(triage_rate="predicted"), view) == ["small", "big"]

    def test_a_predicted_rate_of_zero_gives_nothing_up(self) -> None:
        # A 5 ms TBT: the decode alone (10.01 ms) fills it, so the predicted rate is 0 and
        # the triage steps aside, though at 1000 tok/s (the EMA's here) big is hopeless.
        view = triage_view(decode_tbt=0.005)
        predicted = build(triage_rate="predicted")
        predicted.rate.value = 1000.0
        assert predicted._triage_rate(view, "predicted") == 0.0
        assert order(predicted, view) == ["big", "small"]
        ema = build(triage_rate="ema")
        ema.rate.value = 1000.0
        assert order(ema, view) == ["small", "big"]

    def test_relegation_is_for_good_where_drop_largest_reconsiders(self) -> None:
        view = triage_view(decode_tbt=0.05)
        for overload, later in (("relegate", ["small", "big"]), ("drop-largest", ["big", "small"])):
            policy = build(overload=overload)
            policy.rate.value = 20_000.0  # big takes 0.5 s: hopeless
            assert order(policy, view) == ["small", "big"]
            policy.rate.value = 1e9  # now big would make it
            assert order(policy, view) == later


class TestBudget:
    def tight_view(self) -> SchedulerView:
        # The decode's next deadline is 10 ms away: the decode alone (10.01 ms) exceeds it.
        decode = make_decoding("d", arrival=0.0, ttft=0.96, tbt=0.02, generated=1)
        waiting = make_request("p", arrival=0.9, prompt=5000, ttft=5.0)
        view, _ = make_view(now=0.97, waiting=[waiting], running=[decode])
        return view

    def test_chunker_fixed_ignores_the_decode_deadline(self) -> None:
        window = build(token_quantum=0).schedule(self.tight_view())
        assert window.path == "chunker:decodes-only" and chunks(window) == [("d", 1)]
        fixed = build(chunker="fixed", token_quantum=0).schedule(self.tight_view())
        assert fixed.path == "chunker:fixed" and chunks(fixed) == [("d", 1), ("p", 2047)]

    def test_window(self) -> None:
        decode = make_decoding("d", arrival=0.0, ttft=0.96, tbt=0.03, generated=1)
        waiting = make_request("p", arrival=0.9, prompt=5000, ttft=5.0)
        view, _ = make_view(now=0.97, waiting=[waiting], running=[decode])
        for window in (1, 2, 3):
            plan = build(window=window, time_margin=1.0, token_quantum=0).schedule(view)
            assert plan.path == f"chunker:window-{window}"

    def test_release_decodes(self) -> None:
        # Two decodes of 1,999 tokens fill 10.02 ms of a 10.5 ms window. The tight one (slack
        # 15 ms) leaves 497 prefill tokens; released, the rich one (slack 3 s) bounds the
        # budget and the prompt runs up to B_max. The forecast over the tight decode's 21 s
        # left: 213,000 prompt tokens due, 97,000 let through with it bounding (38 prompts
        # short), 382,000 with the rich one (none short).
        tight = make_decoding("tight", ttft=NOW + 0.0045, tbt=0.0105, output=2000)
        rich = make_decoding("rich", ttft=NOW + 2.9895, tbt=0.0105, output=2000)
        waiting = make_request("p", arrival=0.9, prompt=3000, ttft=5.0)
        view, _ = make_view(now=NOW, waiting=[waiting], running=[tight, rich])
        options: dict[str, Any] = {"token_quantum": 0, "time_margin": 1.0, "iteration_cap": 0}
        kept = build(**options).schedule(view)
        assert chunks(kept) == [("tight", 1), ("rich", 1), ("p", 497)]
        policy = build(release_decodes=1, **options)
        policy.demand.observe(NOW, view.waiting)
        policy.demand.rate = 10_000.0
        released = policy.schedule(view)
        assert chunks(released) == [("tight", 1), ("rich", 1), ("p", 2046)]

    def test_token_quantum_leaves_the_constructors_plans_whole(self) -> None:
        view, limits = seats_view(max_num_seqs=3)
        plan = build("slidingserve-paper", limits=limits, sorter="edf", token_quantum=128)
        assert chunks(plan.schedule(view)) == [("a", 300), ("c", 50), ("d", 50)]  # 400


class CachedTokensModel:
    """10 ms + 10 µs a token + 2 µs per cached token: a selection within the budget in
    tokens can be predicted over its limit (test_constructor's TestVerifyRounds)."""

    def predict_features(self, scenario: Scenario, x: Features) -> float:
        return 0.010 + 1e-5 * (x.num_decodes + x.prefill_tokens) + 2e-6 * x.cached_tokens


class TestConstructorSettings:
    def schedule(self, view: SchedulerView, limits: EngineLimits, **options: Any) -> Plan:
        return build("slidingserve-paper", limits=limits, sorter="edf", **options).schedule(view)

    def test_max_knapsack_items(self) -> None:
        view, limits = seats_view(max_num_seqs=4)
        assert chunks(self.schedule(view, limits)) == [("a", 300), ("c", 50), ("d", 50)]
        # One item, b (1000 tokens), does not fit: a runs alone.
        only_b = self.schedule(view, limits, max_knapsack_items=1)
        assert only_b.path == "constructor" and chunks(only_b) == [("a", 300)]

    def test_knapsack_quantum(self) -> None:
        # Cells of 128 tokens: 225 tokens are one cell, c and d take one each: one fits.
        view, limits = seats_view(max_num_seqs=4)
        plan = self.schedule(view, limits, knapsack_quantum=128)
        assert chunks(plan) == [("a", 300), ("c", 50)]

    def test_max_anchors(self) -> None:
        # z (2000 tokens, 15 ms) is the first anchor and cannot finish in time; a is the
        # second. With one anchor tried there is no selection and the chunker plans.
        view, limits = seats_view(max_num_seqs=4)
        z = make_request("z", arrival=0.9, prompt=2000, ttft=0.115)
        view, _ = make_view(now=NOW, waiting=[z, *view.waiting], limits=limits)
        assert self.schedule(view, limits).path == "constructor"
        assert self.schedule(view, limits, max_anchors=1).path == "chunker:no-tbt-limit"

    def test_verify_rounds(self) -> None:
        # a (r = 100, slack 15.005 ms) is at risk. First knapsack, capacity 400: y and z,
        # predicted 17 ms with y's 1000 cached tokens, over the limit; the second round
        # (capacity 341) takes z alone: 14 ms. With one round there is no selection.
        queue = [
            make_request("a", prompt=100, ttft=NOW + 0.015005),
            make_request("x", prompt=1000, ttft=NOW + 1.0),
            make_request("z", prompt=300, ttft=NOW + 1.0),
        ]
        y = make_request("y", prompt=1100, computed=1000, ttft=NOW + 3.0)
        limits = EngineLimits()
        view, _ = make_view(now=NOW, waiting=queue, running=[y], limits=limits)
        model = CachedTokensModel()
        plan = build("slidingserve-paper", model, sorter="edf").schedule(view)
        assert plan.path == "constructor" and chunks(plan) == [("a", 100), ("z", 300)]
        one = build("slidingserve-paper", model, sorter="edf", verify_rounds=1).schedule(view)
        assert one.path == "chunker:no-tbt-limit"


@pytest.mark.parametrize("record", [True, False])
def test_record_decisions(record: bool) -> None:
    view, limits = seats_view(max_num_seqs=4)
    policy = build(limits=limits, record_decisions=record)
    policy.schedule(view)
    assert len(policy.decisions) == int(record)
