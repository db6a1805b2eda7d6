"""The SlidingServe policy as a whole: the check of the constructor's plan and its fallback,
the leftover fill, and the prefill-throughput EMA ρ_t."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from factories import TokenLinearModel, make_request, make_view, seats_view

from slidingserve.core import BatchShape, EngineLimits, Plan, PlanBuilder
from slidingserve.policies import IterationRecord, PolicyContext, make_policy
from slidingserve.policies.slidingserve import SlidingServePolicy
from slidingserve.policies.slidingserve.constructor import Selection
from slidingserve.policies.slidingserve.policy import grants_in_full

# 10 ms a batch plus 10 µs a token, decodes and prefill alike.
AFFINE = TokenLinearModel(0.010, 1e-5)
NOW = 1.0


def policy(limits: EngineLimits, **options: Any) -> SlidingServePolicy:
    built = make_policy("slidingserve-paper", PolicyContext(limits, AFFINE), options)
    assert isinstance(built, SlidingServePolicy)
    return built


def chunks(plan: Plan) -> list[tuple[str, int]]:
    return [(c.request.request_id, c.tokens) for c in plan.chunks]


class TestConstructorFallback:
    def test_a_selection_over_the_batch_size_cap_falls_back_to_the_chunker(self) -> None:
        # Two seats for the three requests a, c, d: PlanBuilder would drop d, so the
        # selection is not granted. The chunker runs instead: no TBT limit, the two seats
        # filled in EDF order, a 300 and b 1000.
        view, limits = seats_view(max_num_seqs=2)
        sliding = policy(limits, sorter="edf")
        plan = sliding.schedule(view)
        assert plan.path == "chunker:no-tbt-limit:constructor-fallback"
        assert chunks(plan) == [("a", 300), ("b", 1000)]
        assert sliding.constructor_fallbacks == 1
        assert sliding.decisions[-1].path == plan.path
        sliding.schedule(view)
        assert sliding.constructor_fallbacks == 2  # counted once per iteration

    def test_the_same_selection_with_a_third_seat_is_the_constructors(self) -> None:
        view, limits = seats_view(max_num_seqs=3)
        sliding = policy(limits, sorter="edf")
        plan = sliding.schedule(view)
        assert plan.path == "constructor"
        assert chunks(plan) == [("a", 300), ("c", 50), ("d", 50)]
        assert plan.predicted_time == pytest.approx(0.014)
        assert sliding.constructor_fallbacks == 0

    @pytest.mark.parametrize(("free_blocks", "fallback"), [(20, True), (23, False)])
    def test_a_selection_over_the_free_kv_blocks_falls_back(
        self, free_blocks: int, fallback: bool
    ) -> None:
        # Blocks of 16 tokens; EDF order a, b, c0..c9 at t = 1 s.
        #   a: waiting, r = 200 (13 blocks), slack 12.655 ms
        #   b: prefilling, 16 cached (1 block held), r = 2000, slack 4 s
        #   c0..c9: waiting, one token each (one block each), slack ~ 5 s
        # Candidate with 20 free blocks: a takes 13; b 7 more blocks, (1 + 7)·16 − 16 = 112
        # tokens; c0 finds no block and admission stops. 312 tokens: 13.12 ms > 12.655 ms,
        # a is at risk. TimeToBudget(12.655 ms) = 265, capacity 65: the knapsack takes all
        # ten c (b's 2000 cannot fit). a + c0..c9 = 210 tokens (12.1 ms) but 13 + 10 = 23
        # blocks: with 20 free, c7 is refused. With 23 free, it is granted.
        a = make_request("a", arrival=0.9, prompt=200, ttft=0.112655)
        b = make_request("b", arrival=0.0, prompt=2016, computed=16, ttft=5.0)
        small = [make_request(f"c{i}", arrival=0.95, prompt=1, ttft=5.0) for i in range(10)]
        limits = EngineLimits(max_num_batched_tokens=2048)
        view, kv = make_view(
            now=NOW, waiting=[a, *small], running=[b], limits=limits, kv_blocks=1 + free_blocks
        )
        assert kv.num_free == free_blocks
        sliding = policy(limits, sorter="edf")
        plan = sliding.schedule(view)
        if fallback:
            assert plan.path == "chunker:no-tbt-limit:constructor-fallback"
            assert chunks(plan) == [("a", 200), ("b", 112)]
        else:
            assert plan.path == "constructor"
            assert chunks(plan) == [("a", 200), *((f"c{i}", 1) for i in range(10))]
        assert sliding.constructor_fallbacks == int(fallback)

    def test_grants_in_full_needs_every_request_with_all_its_remaining_prefill(self) -> None:
        whole = make_request("whole", prompt=100)
        part = make_request("part", prompt=300, computed=100)  # r = 200
        view, _ = make_view(waiting=[whole], running=[part])
        selection = Selection(whole, (whole, part), 1.0, 300, 0.013, 0.02)
        builder = PlanBuilder(view)
        builder.add(whole, 100)
        assert not grants_in_full(builder.build(), selection)  # part missing
        builder.add(part, 199)
        assert not grants_in_full(builder.build(), selection)  # one token short
        builder = PlanBuilder(view)
        builder.add(part, 200)
        builder.add(whole, 100)
        assert grants_in_full(builder.build(), selection)  # order does not matter


def test_leftover_fill_gives_the_next_request_a_partial_chunk() -> None:
    # The seats scenario with four seats: a + c + d (400 tokens) leaves 525 − 400 = 125 of
    # TimeToBudget(15.255 ms) for the rest of the queue in order: b takes 125.
    view, limits = seats_view(max_num_seqs=4)
    plan = policy(limits, sorter="edf", leftover_fill=True).schedule(view)
    assert plan.path == "constructor"
    assert chunks(plan) == [("a", 300), ("c", 50), ("d", 50), ("b", 125)]
    assert plan.predicted_time == pytest.approx(0.01525)


class TestPrefillRateEma:
    """ρ ← decay·ρ + (1 − decay)·(prefill tokens / duration); decay 0.9 by default."""

    def record(
        self, duration: float, prefills: tuple[tuple[int, int], ...], decodes: int = 0
    ) -> IterationRecord:
        shape = BatchShape((100,) * decodes, prefills)
        return IterationRecord(NOW, duration, Plan(), shape)

    def updated(self, throughput: float, *records: IterationRecord, **options: Any) -> float:
        sliding = policy(EngineLimits(), **options)
        sliding.rate.value = throughput
        for record in records:
            sliding.on_iteration_end(record)
        return sliding.rate.value

    def test_seeded_from_a_full_prefill_batch(self) -> None:
        # 2048 tokens in 10 ms + 20.48 ms: 2048 / 0.03048 = 67 191.6 tok/s.
        assert policy(EngineLimits()).rate.value == pytest.approx(67_191.6, abs=0.1)

    def test_moves_a_tenth_of_the_way_to_the_observed_rate(self) -> None:
        # 200 + 300 prefill tokens in 0.25 s = 2000 tok/s: 0.9·1000 + 0.1·2000 = 1100.
        assert self.updated(1000.0, self.record(0.25, ((200, 0), (300, 50)))) == (
            pytest.approx(1100.0)
        )

    def test_decodes_do_not_count_as_prefill_tokens(self) -> None:
        # 100 prefill tokens and 20 decodes in 0.1 s: 1000 tok/s, not 1200.
        # 0.9·2000 + 0.1·1000 = 1900.
        record = self.record(0.1, ((100, 0),), decodes=20)
        assert self.updated(2000.0, record) == pytest.approx(1900.0)

    def test_decay_option(self) -> None:
        # decay 0.5: 0.5·1000 + 0.5·2000 = 1500.
        record = self.record(0.25, ((500, 0),))
        assert self.updated(1000.0, record, throughput_decay=0.5) == pytest.approx(1500.0)

    @pytest.mark.parametrize(
        "options", [{"duration": 0.02, "prefills": (), "decodes": 8}, {"duration": 0.0}]
    )
    def test_decode_only_and_zero_duration_steps_leave_it_unchanged(
        self, options: Mapping[str, Any]
    ) -> None:
        record = self.record(**{"prefills": ((500, 0),), **options})
        assert self.updated(1234.5, record) == 1234.5
