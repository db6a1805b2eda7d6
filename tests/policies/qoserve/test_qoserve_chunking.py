"""QoServe's dynamic chunking: decode selection, the grid search and its fallbacks."""

from __future__ import annotations

import math

import pytest
from factories import make_decoding
from hypothesis import given
from hypothesis import strategies as st

from slidingserve.policies.common import is_low_memory
from slidingserve.policies.qoserve.chunking import (
    capped_grid,
    choose_total,
    decode_deadline,
    largest_fitting,
    reanchored_deadlines,
    select_decodes,
)
from slidingserve.policies.qoserve.config import LOW_MEMORY_GRID, TOKEN_GRID

GRID = capped_grid(TOKEN_GRID, 2048)


def linear(total: int) -> float:
    """A stub prediction: 10 ms plus 10 µs a token."""
    return 0.010 + 1e-5 * total


def test_grid_values_above_the_budget_are_lowered_to_it() -> None:
    assert GRID == (128, 256, 512, 768, 1024, 1280, 1536, 1792, 2048)
    assert capped_grid(TOKEN_GRID, 600) == (128, 256, 512, 600)
    assert capped_grid(TOKEN_GRID, 100) == (100,)


@pytest.mark.parametrize(
    ("slack", "total"),
    [
        (0.030, 1280),  # 1.2 × T̂ ≤ 30 ms ⇔ total ≤ 1500
        (0.020, 512),  # ≤ 666
        (0.0275, 1280),  # ≤ 1291.7
        (0.0120, 128),  # ≤ 0: nothing fits, the smallest grid value
        (1.0, 2048),
    ],
)
def test_largest_grid_total_within_the_slack(slack: float, total: int) -> None:
    choice = choose_total(GRID, slack, linear, 1.2, 128)
    assert choice.total_tokens == total
    assert choice.reason == ("none-fits" if slack == 0.012 else "grid")


def test_the_safety_factor_is_applied_at_the_boundary() -> None:
    exact = linear(1024) * 1.2
    assert choose_total(GRID, exact, linear, 1.2, 128).total_tokens == 1024
    below = math.nextafter(exact, 0.0)
    assert choose_total(GRID, below, linear, 1.2, 128).total_tokens == 768
    # Without the factor the same slack would allow 1280 tokens.
    assert choose_total(GRID, exact, linear, 1.0, 128).total_tokens == 1280


@pytest.mark.parametrize("slack", [0.0, -0.5])
def test_a_late_decode_gets_the_fallback_chunk(slack: float) -> None:
    assert choose_total(GRID, slack, linear, 1.2, 128) == (128, "late-decode")


def test_without_decodes_the_largest_grid_value() -> None:
    assert choose_total(GRID, math.inf, linear, 1.2, 128) == (2048, "no-decodes")


@pytest.mark.parametrize("limit", range(0, 2600, 37))
def test_binary_search_matches_a_scan_on_a_monotone_test(limit: int) -> None:
    fitting = [g for g in GRID if g <= limit]
    expected = fitting[-1] if fitting else None
    assert largest_fitting(GRID, lambda total: total <= limit) == expected


@pytest.mark.parametrize(
    ("free_blocks", "low"),
    [(1999, True), (2000, False)],  # 2000 × 16 / 32 = 1000 tokens
)
def test_low_memory_test(free_blocks: int, low: bool) -> None:
    assert is_low_memory(free_blocks, 16, 32, 1000) is low


def test_the_low_memory_grid_caps_the_batch() -> None:
    choice = choose_total(LOW_MEMORY_GRID, 1.0, linear, 1.2, 128)
    assert choice == (512, "grid")


class TestSelectDecodes:
    def test_decodes_by_slack_with_the_smallest_slack_tracked(self) -> None:
        late = make_decoding("late", ttft=0.2, tbt=0.05, generated=2)  # next deadline 0.3
        early = make_decoding("early", ttft=0.1, tbt=0.05, generated=1, prompt=40)  # 0.15
        chosen = select_decodes([late, early], now=0.1, limit=256)
        assert [r.request_id for r in chosen.requests] == ["early", "late"]
        assert chosen.min_slack == pytest.approx(0.05)
        assert chosen.context == 40 + (100 + 1)

    def test_only_the_decode_chunk_size_is_added(self) -> None:
        decodes = [make_decoding(f"d{i}", ttft=1.0 + i / 1000) for i in range(300)]
        chosen = select_decodes(reversed(decodes), now=0.0, limit=256)
        assert [r.request_id for r in chosen.requests] == [f"d{i}" for i in range(256)]

    def test_no_decodes_no_tbt_limit(self) -> None:
        assert select_decodes([], now=0.0, limit=256) == ([], math.inf, 0)


@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 1e5), st.floats(0.01, 30.0), st.floats(0.001, 1.0),
            st.integers(1, 500), st.one_of(st.none(), st.floats(0.0, 1e5)),
        ),
        max_size=12,
    )
)  # fmt: skip
def test_the_one_pass_deadlines_are_decode_deadline_s(
    rows: list[tuple[float, float, float, int, float | None]],
) -> None:
    """Arrival, TTFT, TBT, tokens emitted and the first token's time (None: not recorded):
    the deadlines read in one pass are the very floats `decode_deadline` gives."""
    decodes = []
    for i, (arrival, ttft, tbt, generated, first) in enumerate(rows):
        request = make_decoding(f"d{i}", arrival=arrival, ttft=ttft, tbt=tbt, generated=1)
        request.num_generated = generated
        request.token_times = [] if first is None else [first]
        decodes.append(request)
    assert reanchored_deadlines(decodes) == [decode_deadline(r, True) for r in decodes]
