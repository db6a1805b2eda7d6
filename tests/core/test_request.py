from __future__ import annotations

import math

import pytest
from factories import make_decoding, make_request

from slidingserve.core import SLO, Phase, Request
from slidingserve.core.request import next_deadlines, remaining_prefills


class TestDeadlines:
    def test_deadline_of_each_token_follows_eq1(self) -> None:
        request = make_request(arrival=10.0, ttft=2.0, tbt=0.05)
        assert request.deadline(0) == pytest.approx(12.0)
        assert request.deadline(1) == pytest.approx(12.05)
        assert request.deadline(40) == pytest.approx(14.0)

    def test_slack_of_a_waiting_request_is_the_ttft_slack(self) -> None:
        request = make_request(arrival=1.0, ttft=0.5)
        assert request.slack(now=1.2) == pytest.approx(0.3)
        assert not request.is_lost(1.2)
        assert request.is_lost(1.5)

    def test_slack_of_a_decoding_request_is_its_next_token_deadline(self) -> None:
        # 3 tokens emitted: the next is token 4 (k = 3), due at a + ttft + 3·tbt.
        request = make_decoding("d", arrival=0.0, ttft=1.0, tbt=0.1, generated=3)
        assert request.next_deadline == pytest.approx(1.3)
        assert request.slack(1.25) == pytest.approx(0.05)

    def test_early_first_token_banks_slack(self) -> None:
        request = make_decoding("d", arrival=0.0, ttft=1.0, tbt=0.05, generated=1)
        # First token came out early; at t = 0.5 the second token still has 0.55 s.
        assert request.slack(0.5) == pytest.approx(0.55)


class TestProgress:
    def test_remaining_prefill_counts_down(self) -> None:
        request = make_request(prompt=300, computed=128)
        assert request.phase is Phase.PREFILLING
        assert request.remaining_prefill == 172

    def test_decoding_request_has_no_prefill_left(self) -> None:
        assert make_decoding("d", prompt=50, generated=4).remaining_prefill == 0

    def test_preempted_request_recomputes_prompt_and_generated_tokens(self) -> None:
        request = make_request(prompt=100, output=20, generated=5, phase=Phase.WAITING)
        assert request.prefill_target == 105
        assert request.remaining_prefill == 105
        assert request.next_deadline == pytest.approx(request.deadline(5))


class TestValidation:
    @pytest.mark.parametrize("ttft", [0.0, -1.0, math.nan, math.inf])
    def test_bad_ttft_is_rejected(self, ttft: float) -> None:
        with pytest.raises(ValueError, match="ttft"):
            SLO(ttft, 0.05)

    def test_milliseconds_by_mistake_are_rejected(self) -> None:
        with pytest.raises(ValueError, match="milliseconds"):
            SLO(6000.0, 0.05)  # 6000 ms meant

    def test_non_numeric_slo_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="number"):
            SLO("2", 0.05)  # type: ignore[arg-type]

    def test_empty_prompt_or_output_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="prompt"):
            make_request(prompt=0)
        with pytest.raises(ValueError, match="output"):
            make_request(output=0)

    def test_scaled_slo_multiplies_both_targets(self) -> None:
        slo = SLO(2.0, 0.05, protected=True).scaled(1.5)
        assert slo.ttft == pytest.approx(3.0)
        assert slo.tbt == pytest.approx(0.075)
        assert slo.protected


def test_written_out_deadlines_equal_the_formula() -> None:
    """`next_deadline` and `next_deadlines` give the float `SLO.deadline` gives."""
    requests = []
    for i in range(50):
        slo = SLO(0.1 + i * 0.037, 0.013 + i * 0.0011)
        request = Request(f"r{i}", 1.0 / (i + 3) + i * 0.61, 10, 100, slo)
        request.num_generated = (i * 7) % 40
        requests.append(request)
    formula = [r.slo.deadline(r.arrival, r.num_generated) for r in requests]
    assert [r.next_deadline for r in requests] == formula
    assert next_deadlines(requests) == formula


def test_remaining_prefills_equal_the_property_in_every_phase() -> None:
    requests = []
    for phase in Phase:
        request = make_request(f"r-{phase.value}", prompt=300, computed=120, generated=0)
        request.phase, request.num_generated = phase, 7
        requests.append(request)
    assert remaining_prefills(requests) == [r.remaining_prefill for r in requests]
    assert sorted(set(remaining_prefills(requests))) == [0, 300 + 7 - 120]
