from __future__ import annotations

import pytest
from factories import make_decoding, make_request, make_view
from hypothesis import given
from hypothesis import strategies as st

from slidingserve.core import (
    EngineLimits,
    InvalidPlanError,
    KVBlockManager,
    Plan,
    PlanBuilder,
    ScheduledChunk,
    SchedulerView,
    blocks_for_tokens,
    validate_plan,
)


class TestKVBlocks:
    def test_blocks_round_up(self) -> None:
        assert [blocks_for_tokens(n, 16) for n in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]

    def test_grow_allocates_only_new_blocks(self) -> None:
        kv = KVBlockManager(10, 16)
        request = make_request(prompt=40)
        kv.grow(request, 20)  # 2 blocks
        request.num_computed = 20
        assert kv.extra_blocks(request, 12) == 0  # 32 tokens still fit in 2 blocks
        assert kv.extra_blocks(request, 13) == 1
        kv.grow(request, 13)
        assert (kv.held(request), kv.num_free) == (3, 7)
        kv.free(request)
        assert kv.num_free == 10

    def test_over_commit_raises(self) -> None:
        kv = KVBlockManager(2, 16)
        with pytest.raises(RuntimeError, match="over-commit"):
            kv.grow(make_request(prompt=100), 33)
        with pytest.raises(RuntimeError, match="over-commit"):
            kv.grow_by(kv.block_growth([(make_request(prompt=100), 33)]))

    @given(
        st.lists(st.tuples(st.integers(0, 100), st.integers(0, 90), st.integers(1, 70)), max_size=8)
    )
    def test_growth_counted_once_then_allocated_is_grow_each(
        self, requests: list[tuple[int, int, int]]
    ) -> None:
        """`block_growth` then `grow_by` leave the table as `grow_each` does (each request
        holding `held` tokens' blocks, `computed` cached, adding `tokens`)."""
        tables = []
        for counted in (False, True):
            kv = KVBlockManager(1_000, 16)
            growths = []
            for i, (held, computed, tokens) in enumerate(requests):
                request = make_request(f"r{i}", prompt=300)
                kv.grow(request, held)
                request.num_computed = computed
                growths.append((request, tokens))
            expected = kv.extra_blocks_each(growths)
            if counted:
                growth = kv.block_growth(growths)
                assert sum(extra for _, extra in growth) == expected
                assert all(extra > 0 for _, extra in growth)
                kv.grow_by(growth)
            else:
                kv.grow_each(growths)
            tables.append((kv.num_free, [kv.held(r) for r, _ in growths]))
        assert tables[0] == tables[1]


class TestPlanBuilder:
    def test_budget_is_shared_by_decodes_and_prefills(self) -> None:
        decodes = [make_decoding(f"d{i}") for i in range(3)]
        waiting = [make_request("w0", prompt=10), make_request("w1", prompt=50)]
        view, _ = make_view(waiting=waiting, running=decodes)
        builder = PlanBuilder(view, token_budget=20)
        builder.add_decodes(view.decoding)
        builder.add_prefills(view.waiting)
        plan = builder.build()
        assert [(c.request.request_id, c.tokens) for c in plan.chunks] == [
            ("d0", 1),
            ("d1", 1),
            ("d2", 1),
            ("w0", 10),
            ("w1", 7),
        ]
        assert plan.total_tokens == 20

    def test_a_new_request_is_admitted_only_whole_and_a_miss_stops_admission(self) -> None:
        big, small = make_request("big", prompt=100), make_request("small", prompt=10)
        view, _ = make_view(waiting=[big, small], kv_blocks=3)
        builder = PlanBuilder(view)
        assert builder.add(big, 100) == 0  # needs 7 blocks, 3 free: no partial admission
        assert builder.add(small, 10) == 0  # vLLM stops admitting after the first miss
        assert builder.chunks == []

    def test_a_running_prefill_may_take_a_shorter_chunk(self) -> None:
        running = make_request("p", prompt=100, computed=16)  # holds 1 block
        view, _ = make_view(running=[running], kv_blocks=3)
        assert PlanBuilder(view).add(running, 84) == 32  # 2 free blocks

    def test_blocks_for_the_next_decode_tokens_are_kept(self) -> None:
        # The decode has 32 tokens cached in 2 full blocks: its next token needs a third.
        decode = make_decoding("d", prompt=32, generated=1)
        prefill = make_request("p", prompt=100, computed=16)
        view, _ = make_view(running=[prefill, decode], kv_blocks=4)  # 1 block free
        builder = PlanBuilder(view)
        assert builder.add(prefill, 84) == 0  # the free block is the decode's
        assert builder.add(decode, 1) == 1

    def test_nothing_is_admitted_in_an_iteration_that_preempted(self) -> None:
        view, kv = make_view(waiting=[make_request("w")], running=[make_decoding("d")])
        no_admission = SchedulerView(
            view.now, view.waiting, view.running, view.prefilling, view.decoding,
            view.limits, kv, admit=False,
        )  # fmt: skip
        builder = PlanBuilder(no_admission)
        builder.add_decodes(no_admission.decoding)
        builder.add_prefills(no_admission.waiting)
        assert [c.request.request_id for c in builder.chunks] == ["d"]
        with pytest.raises(InvalidPlanError, match="preempted"):
            validate_plan(Plan([ScheduledChunk(view.waiting[0], 10)]), no_admission)

    def test_batch_size_cap_limits_admissions(self) -> None:
        limits = EngineLimits(max_num_seqs=2)
        running = [make_decoding("d0")]
        waiting = [make_request("w0"), make_request("w1")]
        view, _ = make_view(waiting=waiting, running=running, limits=limits)
        builder = PlanBuilder(view)
        builder.add_decodes(view.decoding)
        builder.add_prefills(view.waiting)
        assert [c.request.request_id for c in builder.chunks] == ["d0", "w0"]

    @given(
        st.lists(
            st.one_of(st.integers(1, 64), st.sampled_from([16, 32, 48])), min_size=1, max_size=10
        ),
        st.lists(st.integers(0, 9), max_size=12),
        st.integers(0, 12),
        st.integers(1, 12),
    )
    def test_some_decodes_added_at_once_as_one_by_one(
        self, prompts: list[int], picks: list[int], spare_blocks: int, seats: int
    ) -> None:
        """Some of the decodes (QoServe's, under its decode chunk size; maybe one twice)
        leave the builder as adding each in turn does, a prefill after them included:
        prompts of whole blocks put their next tokens in a new one, and few spare
        blocks or seats make some fail. The engine has made room for every decode's next
        token (`SchedulerView`)."""
        decodes = [make_decoding(f"d{i}", prompt=p) for i, p in enumerate(prompts)]
        chosen = [decodes[i % len(decodes)] for i in picks]
        prefill = make_request("p", prompt=100, computed=16)
        states = []
        for at_once in (True, False):
            held = sum(-(-r.num_computed // 16) for r in (*decodes, prefill))
            blocks = held + len([r for r in decodes if r.num_computed % 16 == 0]) + spare_blocks
            limits = EngineLimits(max_num_seqs=seats + len(decodes) + 1)
            view, _ = make_view(running=[prefill, *decodes], kv_blocks=blocks, limits=limits)
            builder = PlanBuilder(view, token_budget=len(decodes) + seats)
            if at_once:
                builder.add_decodes(chosen)
            else:
                for request in chosen:
                    builder.add(request, 1)
            granted = builder.add(prefill, 84)
            states.append(
                (builder.chunks, builder.shape(), builder.blocks_left, builder.tokens_left,
                 builder.seats_left, granted)
            )  # fmt: skip
        assert states[0] == states[1]


class TestValidatePlan:
    def test_a_builder_plan_is_valid(self) -> None:
        view, kv = make_view(waiting=[make_request("w", prompt=30)], running=[make_decoding("d")])
        builder = PlanBuilder(view)
        builder.add_decodes(view.decoding)
        builder.add_prefills(view.waiting)
        growth = validate_plan(builder.build(), view)
        assert growth is not None  # counted on the plain table, for the engine to allocate
        assert sum(extra for _, extra in growth) == kv.extra_blocks_each(builder.chunks) > 0

    def test_decode_with_two_tokens_is_invalid(self) -> None:
        decode = make_decoding("d")
        view, _ = make_view(running=[decode])
        with pytest.raises(InvalidPlanError, match="not 1"):
            validate_plan(Plan([ScheduledChunk(decode, 2)]), view)

    def test_more_than_remaining_prefill_is_invalid(self) -> None:
        request = make_request("w", prompt=30)
        view, _ = make_view(waiting=[request])
        with pytest.raises(InvalidPlanError, match="remain"):
            validate_plan(Plan([ScheduledChunk(request, 31)]), view)

    def test_over_budget_is_invalid(self) -> None:
        request = make_request("w", prompt=3000)
        view, _ = make_view(waiting=[request])
        with pytest.raises(InvalidPlanError, match="max_num_batched_tokens"):
            validate_plan(Plan([ScheduledChunk(request, 2049)]), view)

    def test_kv_over_commit_is_invalid(self) -> None:
        request = make_request("w", prompt=100)
        view, _ = make_view(waiting=[request], kv_blocks=2)
        with pytest.raises(InvalidPlanError, match="KV"):
            validate_plan(Plan([ScheduledChunk(request, 40)]), view)

    def test_duplicate_request_is_invalid(self) -> None:
        request = make_request("w", prompt=100)
        view, _ = make_view(waiting=[request])
        plan = Plan([ScheduledChunk(request, 10), ScheduledChunk(request, 10)])
        with pytest.raises(InvalidPlanError, match="twice"):
            validate_plan(plan, view)
