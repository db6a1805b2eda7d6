"""The prefix cache: block keys, hits, sharing, eviction order and its accounting."""

from __future__ import annotations

import dataclasses

import pytest
from factories import make_request
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.core import Phase, Request
from slidingserve.core.prefix import block_keys, leading_runs
from slidingserve.core.prefix_cache import PrefixCachingKV

SYSTEM, OTHER = 1, 2


def with_content(request: Request, *prompt_runs: tuple[int, int]) -> Request:
    """`request` whose prompt is `prompt_runs` and whose output is its own segment."""
    output = (1000 + hash(request.request_id) % 1000, request.output_len)
    return dataclasses.replace(request, content=(*prompt_runs, output))


def start(kv: PrefixCachingKV, request: Request, tokens: int) -> None:
    """What the simulator does: read the hit, then run a first chunk of `tokens`."""
    request.num_computed = kv.lookup(request)
    kv.grow(request, tokens)
    request.num_computed += tokens
    request.phase = Phase.PREFILLING


class TestBlockKeys:
    def test_requests_share_keys_exactly_as_far_as_their_runs_agree(self) -> None:
        first = block_keys([(SYSTEM, 40), (OTHER, 24)], 16)
        second = block_keys([(SYSTEM, 40), (3, 24)], 16)
        assert len(first) == len(second) == 4
        assert first[:2] == second[:2]  # tokens 0–31: the system prompt in both
        assert first[2] != second[2]  # tokens 32–47 hold different text after token 40
        assert len(set(first[2:]) & set(second)) == 0  # the chain: nothing later is equal

    def test_only_full_blocks_have_keys(self) -> None:
        assert len(block_keys([(SYSTEM, 47)], 16)) == 2

    def test_a_segment_used_again_continues_where_it_left_off(self) -> None:
        split = block_keys([(SYSTEM, 10), (SYSTEM, 22)], 16)
        assert split == block_keys([(SYSTEM, 32)], 16)

    def test_leading_runs_trim_the_tail(self) -> None:
        assert leading_runs([(1, 10), (2, 10)], 15) == ((1, 10), (2, 5))
        assert leading_runs([(1, 10), (2, 10)], 10) == ((1, 10),)

    def test_content_must_cover_the_request(self) -> None:
        with pytest.raises(ValueError, match="cover 50 tokens, the request has 110"):
            Request("x", 0.0, 100, 10, make_request().slo, content=((SYSTEM, 50),))


class TestHits:
    def test_a_second_request_hits_the_system_prompt_the_first_computed(self) -> None:
        kv = PrefixCachingKV(100, 16)
        first = with_content(make_request("a", prompt=120), (SYSTEM, 100), (OTHER, 20))
        second = with_content(make_request("b", prompt=130), (SYSTEM, 100), (3, 30))
        assert kv.lookup(second) == 0
        start(kv, first, 120)
        assert kv.lookup(second) == 96  # six full blocks of the system prompt
        start(kv, second, 130 - 96)
        assert (kv.queried_tokens, kv.hit_tokens) == (250, 96)
        assert kv.num_used == 8 + 9 - 6  # the six blocks are held once

    def test_a_hit_leaves_the_last_token_to_compute(self) -> None:
        kv = PrefixCachingKV(100, 16)
        first = with_content(make_request("a", prompt=64, output=5), (SYSTEM, 64))
        start(kv, first, 64)
        twin = with_content(make_request("b", prompt=64, output=5), (SYSTEM, 64))
        assert kv.lookup(twin) == 48  # not 64: the last token's logits are needed

    def test_sharing_a_running_request_s_blocks_costs_nothing(self) -> None:
        kv = PrefixCachingKV(100, 16)
        first = with_content(make_request("a", prompt=64), (SYSTEM, 64))
        start(kv, first, 64)
        second = with_content(make_request("b", prompt=80), (SYSTEM, 64), (OTHER, 16))
        second.num_computed = kv.lookup(second)
        assert second.num_computed == 64
        assert kv.held(second) == 4 and kv.extra_blocks(second, 16) == 1
        kv.free(first)  # now its blocks are free but resident: sharing takes them from the pool
        second.num_computed = kv.lookup(second)
        assert kv.held(second) == 0 and kv.extra_blocks(second, 16) == 5

    def test_a_preempted_request_finds_its_own_blocks(self) -> None:
        kv = PrefixCachingKV(100, 16)
        request = with_content(make_request("a", prompt=100, output=40), (SYSTEM, 100))
        start(kv, request, 100)
        kv.grow(request, 20)  # 20 decodes: 120 tokens cached, 7 full blocks
        request.num_computed, request.num_generated = 120, 21
        kv.free(request)
        request.num_computed, request.phase = 0, Phase.WAITING
        assert kv.lookup(request) == 112  # prompt and output blocks alike


class TestEviction:
    def test_the_tail_of_a_freed_request_goes_before_its_prefix(self) -> None:
        kv = PrefixCachingKV(8, 16)
        first = with_content(make_request("a", prompt=64), (SYSTEM, 64))
        start(kv, first, 64)
        kv.free(first)
        assert kv.num_free == 8  # four free, four resident
        filler = with_content(make_request("f", prompt=96), (OTHER, 96))
        start(kv, filler, 96)  # six blocks: four plain, then two evicted from the tail
        again = with_content(make_request("b", prompt=80), (SYSTEM, 64), (3, 16))
        assert kv.lookup(again) == 32  # the first two blocks survived

    def test_a_hit_is_taken_before_the_step_s_other_allocations(self) -> None:
        kv = PrefixCachingKV(6, 16)
        for name, runs in (("a", ((SYSTEM, 64),)), ("x", ((OTHER, 32),))):
            done = with_content(make_request(name, prompt=runs[0][1]), *runs)
            start(kv, done, runs[0][1])
            kv.free(done)
        # Six free blocks, all resident: the system prompt's four least recently used.
        hit = with_content(make_request("b", prompt=80), (SYSTEM, 64), (3, 16))
        other = with_content(make_request("c", prompt=16), (4, 16))
        hit.num_computed = kv.lookup(hit)
        assert hit.num_computed == 64
        # `other` comes first but must not evict the blocks `hit` relies on.
        kv.grow_each([(other, 16), (hit, 16)])
        assert kv.num_free == 0 and kv.hit_tokens == 64


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    return draw(
        st.lists(
            st.tuples(
                st.sampled_from(["start", "grow", "free"]),
                st.integers(0, 7),  # which request
                st.integers(1, 70),  # tokens
            ),
            max_size=40,
        )
    )


def scanned_hit(kv: PrefixCachingKV, request: Request) -> int:
    """The hit found the slow way: every key from the first, against the resident ones."""
    keys = block_keys(request.content, 16)
    most = min(len(keys), (request.prefill_target - 1) // 16)
    hit = 0
    while hit < most and keys[hit] in kv._refs:
        hit += 1
    return hit * 16


@given(operations(), st.integers(4, 30))
@settings(max_examples=200, deadline=None)
def test_hits_are_those_of_a_scan_and_blocks_are_never_lost(
    ops: list[tuple[str, int, int]], size: int
) -> None:
    kv = PrefixCachingKV(size, 16)
    requests = {
        i: with_content(make_request(f"r{i}", prompt=150, output=60), (i % 3, 100), (10 + i, 50))
        for i in range(8)
    }
    for op, i, tokens in ops:
        request = requests[i]
        if op == "start" and request.phase is Phase.WAITING:
            request.num_computed = kv.lookup(request)
            tokens = min(tokens, request.prompt_len - request.num_computed)
            if kv.can_grow(request, tokens):
                kv.grow(request, tokens)
                request.num_computed += tokens
                request.phase = Phase.PREFILLING
        elif op == "grow" and request.phase is Phase.PREFILLING:
            tokens = min(tokens, 210 - request.num_computed - 1)
            if tokens > 0 and kv.can_grow(request, tokens):
                kv.grow(request, tokens)
                request.num_computed += tokens
        elif op == "free" and request.phase is Phase.PREFILLING:
            kv.free(request)
            request.num_computed, request.phase = 0, Phase.WAITING
        held = sum(kv.held(r) for r in requests.values() if r.phase is Phase.PREFILLING)
        assert 0 <= kv.num_free <= size
        assert kv.num_used <= held  # shared blocks are held by several, stored once
        for request in requests.values():
            if request.phase is Phase.WAITING:
                hit = kv.lookup(request)
                assert hit == scanned_hit(kv, request) < request.prefill_target
                assert kv.resident_prefix(request) == hit
    for request in requests.values():
        kv.free(request)
    assert kv.num_free == size


def test_a_resident_prefix_read_keeps_nothing() -> None:
    """A router asks each replica's cache about a request only one of them serves."""
    kv = PrefixCachingKV(40, 16)
    first = with_content(make_request("a", prompt=150), (SYSTEM, 100), (OTHER, 50))
    start(kv, first, 150)
    asker = with_content(make_request("b", prompt=150), (SYSTEM, 100), (3, 50))
    assert kv.resident_prefix(asker) == 96  # six full blocks of the system prompt
    assert kv._hits.get("b") is None and "b" not in kv._keys
    assert kv.lookup(asker) == 96
