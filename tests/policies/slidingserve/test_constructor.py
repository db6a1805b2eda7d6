"""BatchConstructor parts on hand-worked numbers: the violation checker, the knapsack values,
the verify/shrink rounds and the leftover fill."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from factories import TokenLinearModel, make_request

from slidingserve.core import Request
from slidingserve.policies.slidingserve.constructor import (
    BatchConstructor,
    ConstructorConfig,
    Selection,
    knapsack_values,
    risky_prefills,
)
from slidingserve.policies.slidingserve.knapsack import KnapsackSolution, solve_knapsack
from slidingserve.predictor import Features, Scenario

# 10 ms a batch plus 10 µs a token (decodes and prefill alike).
AFFINE = TokenLinearModel(0.010, 1e-5)


class CachedTokensModel:
    """10 ms + 10 µs a token + `per_cached` seconds per cached token (x3, Σ u).

    The queue profile that TimeToBudget walks and a knapsack selection can differ in x3
    (a selection may skip the queue's head for a request with a long cached context), so
    a selection within the budget in tokens can still be predicted over its limit.
    """

    def __init__(self, per_cached: float) -> None:
        self.per_cached = per_cached

    def predict_features(self, scenario: Scenario, x: Features) -> float:
        tokens = x.num_decodes + x.prefill_tokens
        return 0.010 + 1e-5 * tokens + self.per_cached * x.cached_tokens


def ids(requests: Sequence[Request]) -> list[str]:
    return [r.request_id for r in requests]


def settings(rounds: int = 3, quantum: int = 1) -> ConstructorConfig:
    return ConstructorConfig(knapsack_quantum=quantum, verify_rounds=rounds)


class TestRiskyPrefills:
    # now = 1 s, the candidate predicted at 62.5 ms; every number a binary fraction, so the
    # boundaries are exact.
    NOW, PREDICTED = 1.0, 0.0625

    def prefill(self, name: str, slack: float) -> Request:
        return make_request(name, arrival=0.0, ttft=self.NOW + slack, prompt=100)

    def test_strict_bounds_and_order_by_slack(self) -> None:
        queue = [
            self.prefill("at-limit", 0.0625),  # slack == predicted: in time, not risky
            self.prefill("late-b", 0.046875),
            self.prefill("safe", 0.125),
            self.prefill("late-a", 0.03125),
            self.prefill("late-c", 0.0078125),
        ]
        risky = risky_prefills(queue, self.NOW, self.PREDICTED)
        assert ids(risky) == ["late-c", "late-a", "late-b"]

    def test_lost_prefills_are_not_risky(self) -> None:
        lost = make_request("lost", arrival=0.0, ttft=0.5, prompt=100)  # deadline 0.5 s
        due_now = make_request("due-now", arrival=0.0, ttft=1.0, prompt=100)  # slack exactly 0
        assert risky_prefills([lost, due_now], self.NOW, self.PREDICTED) == []


class TestKnapsackValues:
    def test_hand_worked_values(self) -> None:
        # Σs = 0.1 + 0.3 + 0.6 = 1.0, Σr = 200 + 600 + 200 = 1000:
        # v = 1/(0.1 + 0.2) = 10/3, 1/(0.3 + 0.6) = 10/9, 1/(0.6 + 0.2) = 5/4.
        values = knapsack_values([0.1, 0.3, 0.6], [200, 600, 200])
        assert values == pytest.approx([10 / 3, 10 / 9, 5 / 4])

    def test_a_lone_item_is_worth_one_half(self) -> None:
        # s/Σs = r/Σr = 1.
        assert knapsack_values([0.7], [123]) == pytest.approx([0.5])


class TestVerifyRounds:
    """`_for_anchor`'s re-solves, watched through the capacities given to the knapsack.

    Queue a, x, y, z at t = 0; the anchor a has slack 15.005 ms and no decodes (T_cur = ∞):
      a: waiting, r = 100, u = 0          x: waiting, r = 1000, slack 1 s
      y: r = 100 but u = 1000 cached, slack 3 s       z: waiting, r = 300, slack 1 s
    TimeToBudget walks a then x (x3 = 0): 10 ms + 10 µs·b ≤ 15.005 ms → b = 500, so the
    first capacity is 500 − 100 = 400. Values over S_a = {x, y, z} (Σs = 5, Σr = 1400):
    x 1/(0.2 + 0.714) = 1.09, y 1/(0.6 + 0.071) = 1.49, z 1/(0.2 + 0.214) = 2.41.
    """

    def queue(self, *, with_z: bool = True) -> list[Request]:
        queue = [
            make_request("a", prompt=100, ttft=0.015005),
            make_request("x", prompt=1000, ttft=1.0),
            make_request("y", prompt=1100, computed=1000, ttft=3.0),
            make_request("z", prompt=300, ttft=1.0),
        ]
        return queue if with_z else queue[:3]

    def select(
        self,
        monkeypatch: pytest.MonkeyPatch,
        per_cached: float,
        queue: list[Request],
        rounds: int = 3,
        quantum: int = 1,
    ) -> tuple[Selection | None, list[int]]:
        """The constructor's answer for anchor a, and every capacity it tried."""
        capacities: list[int] = []

        def spy(
            values: Sequence[float], weights: Sequence[int], capacity: int, quantum: int = 1
        ) -> KnapsackSolution:
            capacities.append(capacity)
            return solve_knapsack(values, weights, capacity, quantum)

        monkeypatch.setattr(f"{BatchConstructor.__module__}.solve_knapsack", spy)
        built = BatchConstructor(CachedTokensModel(per_cached), settings(rounds, quantum))
        return built.select([], queue, queue[:1], 0.0, math.inf, 2048), capacities

    def test_an_overshoot_shrinks_by_its_tokens_at_the_selections_rate(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # 2 µs per cached token. Round 1, capacity 400: {y, z} (400 tokens) fits the tokens;
        # a + y + z = 500 tokens with x3 = 1000: 10 + 5 + 2 = 17 ms, 1.995 ms over. Its rate
        # is 500 / 17 ms = 29 412 tok/s: ceil(1.995 ms · 29 412) = ceil(58.68) = 59 tokens
        # off → 341. Round 2: y and z no longer both fit; z is worth more: a + z = 400
        # tokens, x3 = 0, 14 ms ≤ 15.005 ms.
        selection, capacities = self.select(monkeypatch, 2e-6, self.queue())
        assert capacities == [400, 341]
        assert selection is not None
        assert ids(selection.requests) == ["a", "z"]
        assert selection.tokens == 400
        assert selection.predicted_time == pytest.approx(0.014)
        assert selection.limit == pytest.approx(0.015005)

    def test_the_shrink_is_at_least_one_quantum(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # As above, but 59 tokens < one quantum of 100: the capacity drops by 100 to 300
        # (3 cells: z's 3 or y's 1, not both), and a + z fits.
        selection, capacities = self.select(monkeypatch, 2e-6, self.queue(), quantum=100)
        assert capacities == [400, 300]
        assert selection is not None and ids(selection.requests) == ["a", "z"]

    @pytest.mark.parametrize("rounds", [1, 3, 4])
    def test_gives_up_after_verify_rounds(
        self, monkeypatch: pytest.MonkeyPatch, rounds: int
    ) -> None:
        # No z; 5 µs per cached token. a + y: 10 + 2 + 5 = 17 ms, 1.995 ms over at
        # 200 / 17 ms = 11 765 tok/s: ceil(23.47) = 24 tokens a round. y (100) fits every
        # capacity tried, so every round overshoots the same way.
        queue = self.queue(with_z=False)
        selection, capacities = self.select(monkeypatch, 5e-6, queue, rounds=rounds)
        assert selection is None
        assert capacities == [400, 376, 352, 328][:rounds]

    def test_gives_up_when_the_capacity_goes_negative(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # A bigger anchor (r = 400): capacity 500 − 400 = 100, y (100) fits. a + y = 500
        # tokens, 10 + 5 + 50 = 65 ms at 50 µs per cached token: 49.995 ms over at
        # 500 / 65 ms = 7692 tok/s, ceil(384.58) = 385 tokens off → −285: no second round.
        queue = self.queue(with_z=False)
        queue[0] = make_request("a", prompt=400, ttft=0.015005)
        selection, capacities = self.select(monkeypatch, 5e-5, queue, rounds=5)
        assert selection is None
        assert capacities == [100]

    def test_a_capacity_of_zero_still_runs_the_anchor_alone(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Anchor r = 400, quantum 100: capacity 100 (one cell) takes y; a + y is 17 ms at
        # 2 µs per cached token, 59 tokens over, rounded up to one quantum: 100 − 100 = 0.
        # Not negative, so a second round runs: a alone, 400 tokens, 14 ms.
        queue = self.queue(with_z=False)
        queue[0] = make_request("a", prompt=400, ttft=0.015005)
        selection, capacities = self.select(monkeypatch, 2e-6, queue, quantum=100)
        assert capacities == [100, 0]
        assert selection is not None and ids(selection.requests) == ["a"]
        assert selection.predicted_time == pytest.approx(0.014)


class TestLeftover:
    """Prefill tokens of the rest of the queue that still fit the selection's limit.

    Affine model: a batch of n tokens takes 10 ms + 10 µs·n. The selection a (100) + z (300)
    has the limit 15.005 ms; the rest of the queue is x (1000 tokens).
    """

    def leftover(
        self, decodes: int = 0, max_tokens: int = 2048, rest: int = 1000, limit: float = 0.015005
    ) -> int:
        a = make_request("a", prompt=100)
        z = make_request("z", prompt=300)
        x = make_request("x", prompt=rest)
        selection = Selection(a, (a, z), 1.0, 400, 0.014, limit)
        built = BatchConstructor(AFFINE, settings())
        return built.leftover([50] * decodes, [x, z, a], selection, max_tokens)

    def test_fills_up_to_the_limit(self) -> None:
        # 10 ms + 10 µs·b ≤ 15.005 ms → b = 500 prefill tokens, 400 already chosen: 100.
        assert self.leftover() == 100

    def test_decodes_count_against_the_limit(self) -> None:
        # 4 decodes: 10 µs·(4 + b) ≤ 5.005 ms → b = 496, so 96 left.
        assert self.leftover(decodes=4) == 96

    def test_capped_by_the_token_budget(self) -> None:
        # B_max = 450 with 4 decodes: b ≤ 446, so 46 left.
        assert self.leftover(decodes=4, max_tokens=450) == 46

    def test_capped_by_the_rest_of_the_queue(self) -> None:
        # Only 30 more tokens queued.
        assert self.leftover(rest=30) == 30

    def test_nothing_when_the_decodes_alone_are_too_slow(self) -> None:
        # 600 decodes: 10 ms + 6 ms > 15.005 ms.
        assert self.leftover(decodes=600) == 0
