from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slidingserve.core.batch import BatchShape
from slidingserve.predictor import (
    BatchFeatures,
    Features,
    PrefillQueueProfile,
    Scenario,
    batch_features,
    scenario_of,
)


def greedy_shape(decodes: list[int], candidates: list[tuple[int, int]], b: int) -> BatchShape:
    """The batch of the decodes plus the first b queue tokens, built the slow way."""
    chunks: list[tuple[int, int]] = []
    left = b
    for remaining, cached in candidates:
        if left == 0:
            break
        take = min(remaining, left)
        chunks.append((take, cached))
        left -= take
    return BatchShape(tuple(decodes), tuple(chunks))


class TestBatchFeatures:
    def test_hand_made_mixed_batch(self) -> None:
        shape = BatchShape(decode_contexts=(100, 300), prefill_chunks=((10, 5), (4, 0)))
        scenario, x = batch_features(shape)
        assert scenario is Scenario.MIXED
        # x1 = 10·(5+10) + 4·(0+4) = 150 + 16; x2 = 100 + 16; x3 = 100+300+5+0
        # x8 = 2 chunks; x9 = 10·5 + 4·0; T = 2 + 14 = 16 tokens: one tile, no segment
        assert x == Features(166, 116, 405, 2, 400, 14, 10, 2, 50, 1, 0, 0, 0)

    def test_decode_only(self) -> None:
        result = batch_features(BatchShape((7, 9, 11), ()))
        x = Features(0, 0, 27, 3, 27, 0, 0, 0, 0, 1, 0, 0, 0)
        assert result == BatchFeatures(Scenario.DECODE_ONLY, x)

    def test_prefill_only_one_token_chunk_is_still_a_prefill(self) -> None:
        scenario, x = batch_features(BatchShape((), ((1, 50),)))
        assert scenario is Scenario.PREFILL_ONLY
        assert x == Features(51, 1, 50, 0, 0, 1, 1, 1, 50, 1, 0, 0, 0)

    def test_empty_batch_is_invalid(self) -> None:
        with pytest.raises(ValueError, match="empty"):
            batch_features(BatchShape((), ()))

    @pytest.mark.parametrize(
        ("decodes", "prefills", "expected"),
        [(1, 0, Scenario.DECODE_ONLY), (0, 2, Scenario.PREFILL_ONLY), (3, 1, Scenario.MIXED)],
    )
    def test_scenario_of(self, decodes: int, prefills: int, expected: Scenario) -> None:
        assert scenario_of(decodes, prefills) is expected


class TestPrefillQueueProfile:
    def test_partial_request_in_the_middle(self) -> None:
        profile = PrefillQueueProfile([20], [(5, 100), (8, 3), (2, 0)])
        assert profile.capacity == 15
        scenario, x = profile.features_at(7)  # request 0 full (5), request 1 takes 2
        assert scenario is Scenario.MIXED
        paper = (5 * 105 + 2 * 5, 25 + 4, 20 + 100 + 3, 1, 20, 7, 5)
        assert x == Features(*paper, 2, 5 * 100 + 2 * 3, 1, 0, 0, 0)

    def test_zero_tokens_is_decode_only(self) -> None:
        profile = PrefillQueueProfile([4, 6], [(3, 0)])
        assert profile.features_at(0) == batch_features(BatchShape((4, 6), ()))

    def test_no_decodes_and_no_tokens_is_invalid(self) -> None:
        with pytest.raises(ValueError, match="empty"):
            PrefillQueueProfile([], [(3, 0)]).features_at(0)

    @pytest.mark.parametrize("b", [-1, 4])
    def test_out_of_range(self, b: int) -> None:
        with pytest.raises(ValueError, match="outside"):
            PrefillQueueProfile([1], [(3, 0)]).features_at(b)

    def test_max_requests_caps_the_queue(self) -> None:
        profile = PrefillQueueProfile([1], [(3, 0), (4, 0), (5, 0)], max_requests=2)
        assert profile.capacity == 7  # 3 + 4: the third request is cut off

    def test_rejects_an_empty_candidate(self) -> None:
        with pytest.raises(ValueError, match="remaining=0"):
            PrefillQueueProfile([1], [(0, 5)])

    @given(
        decodes=st.lists(st.integers(0, 10_000), max_size=6),
        candidates=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 2_000)), max_size=8),
        max_requests=st.one_of(st.none(), st.integers(0, 8)),
    )
    def test_matches_the_explicit_batch_for_every_b(
        self,
        decodes: list[int],
        candidates: list[tuple[int, int]],
        max_requests: int | None,
    ) -> None:
        profile = PrefillQueueProfile(decodes, candidates, max_requests)
        kept = candidates if max_requests is None else candidates[:max_requests]
        assert profile.capacity == sum(r for r, _ in kept)
        for b in range(0 if decodes else 1, profile.capacity + 1):
            expected = batch_features(greedy_shape(decodes, kept, b))
            assert profile.features_at(b) == expected, b
