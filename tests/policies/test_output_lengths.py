"""Output lengths learned from the requests that leave (`policies/output_lengths.py`)."""

from __future__ import annotations

from collections import deque

import pytest
from factories import make_decoding, make_request
from hypothesis import given
from hypothesis import strategies as st

from slidingserve.policies.output_lengths import MIN_SAMPLES, MIN_TAIL, OutputLengths


def learned(lengths: list[int], prior: float = 439.0) -> OutputLengths:
    """An `OutputLengths` that has seen requests of `lengths` tokens run and leave."""
    outputs = OutputLengths(prior)
    running = [make_decoding(f"r{i}", generated=n) for i, n in enumerate(lengths)]
    outputs.observe(running, [])
    outputs.observe([], [])
    return outputs


def test_the_prior_until_enough_requests_have_left() -> None:
    outputs = learned([100] * (MIN_SAMPLES - 1))
    assert (outputs.mean, outputs.remaining(50)) == (439.0, 439.0)
    outputs = learned([100] * MIN_SAMPLES)
    assert outputs.mean == 100.0


def test_a_preempted_request_is_not_counted_nor_one_that_never_emitted() -> None:
    outputs = OutputLengths(439.0)
    preempted, prefilling = make_decoding("p", generated=50), make_request("w")
    outputs.observe([preempted, prefilling], [])
    outputs.observe([], [preempted])  # preempted: back in the waiting queue
    assert list(outputs.lengths) == []


def test_a_request_is_counted_with_the_tokens_it_left_with() -> None:
    outputs = OutputLengths(439.0)
    request = make_decoding("r", generated=10, output=40)
    outputs.observe([request], [])
    request.num_generated = 40  # its last tokens ran where the policy did not look
    outputs.observe([], [])
    assert list(outputs.lengths) == [40]


def test_the_remaining_output_is_the_mean_excess_of_the_longer_requests() -> None:
    outputs = learned([10] * 20 + [100, 200, 300, 400, 500])
    assert outputs.remaining(50) == pytest.approx(300 - 50)
    assert outputs.remaining(0) == pytest.approx(outputs.mean)


def test_past_nearly_every_length_seen_a_mean_output_more() -> None:
    outputs = learned([10] * 20 + [100, 200, 300, 400, 500])
    assert outputs.remaining(150) == pytest.approx(outputs.mean)  # 4 longer: too few


@given(
    st.lists(st.integers(1, 5000), min_size=MIN_SAMPLES, max_size=200),
    st.integers(0, 5000),
)
def test_the_remaining_output_agrees_with_its_definition(lengths: list[int], done: int) -> None:
    outputs = learned(lengths)
    longer = [n - done for n in lengths if n > done]
    mean = sum(lengths) / len(lengths)
    expected = sum(longer) / len(longer) if len(longer) >= MIN_TAIL else mean
    assert outputs.remaining(done) == pytest.approx(expected)


def test_only_the_most_recent_lengths_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("slidingserve.policies.output_lengths.MAX_SAMPLES", 25)
    outputs = OutputLengths(439.0)
    outputs.lengths = deque(maxlen=25)
    for round_, length in enumerate([1000] * 5 + [10] * 25):
        request = make_decoding(f"r{round_}", generated=length)
        outputs.observe([request], [])
        outputs.observe([], [])
    assert list(outputs.lengths) == [10] * 25  # the five long ones left the window
    assert (outputs.mean, outputs.remaining(5)) == (10.0, 5.0)
