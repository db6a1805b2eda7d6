"""One request's latencies and verdict, on hand-made timelines."""

from __future__ import annotations

import numpy as np
import pytest
from factories import finished_request, make_request, make_timeline

from slidingserve.core import SLO
from slidingserve.metrics import Outcome, TbtReading, Timeline, Verdict


class TestLatencies:
    def test_follow_vllm_from_the_send_time(self) -> None:
        # Due at 1.0, sent at 1.1, first chunk at 1.6: TTFT 0.5; e2e 2.0 − 1.1 = 0.9;
        # TPOT (0.9 − 0.5) / 2 = 0.2; gaps 0.1 and 0.3.
        line = make_timeline([1.6, 1.7, 2.0], arrival=1.0, sent=1.1)
        assert line.ttft == pytest.approx(0.5)
        assert line.e2e == pytest.approx(0.9)
        assert line.tpot == pytest.approx(0.2)
        assert line.itl.tolist() == pytest.approx([0.1, 0.3])

    def test_tpot_counts_tokens_and_itl_counts_chunks(self) -> None:
        # Two chunks, four tokens (a merged chunk): TPOT = 0.3 / 3, one gap of 0.3.
        line = make_timeline([1.0, 1.3], tokens=[1, 3])
        assert line.num_tokens == 4
        assert line.tpot == pytest.approx(0.1)
        assert line.itl.tolist() == pytest.approx([0.3])
        assert line.token_times.tolist() == [1.0, 1.3, 1.3, 1.3]

    def test_tokens_counted_beyond_the_chunks_arrived_by_the_last_one(self) -> None:
        line = make_timeline([1.0, 1.2], usage=4)
        assert line.token_times.tolist() == [1.0, 1.2, 1.2, 1.2]

    def test_tokens_counted_below_the_chunks_keep_the_last_arrival(self) -> None:
        line = make_timeline([1.0, 1.2, 1.5], usage=2)
        assert line.token_times.tolist() == [1.0, 1.5]
        assert make_timeline([1.0, 1.2], usage=0).token_times.size == 0

    def test_no_chunk_no_latency(self) -> None:
        line = make_timeline([], outcome=Outcome.FAILED)
        assert line.ttft is None and line.e2e is None and line.tpot is None
        assert line.itl.size == 0

    def test_one_token_has_no_tpot_and_meets_vllm_goodput_on_ttft_alone(self) -> None:
        line = make_timeline([0.9], ttft=1.0, tbt=0.01)
        assert line.tpot is None and line.meets_vllm_goodput()
        assert not make_timeline([1.1], ttft=1.0).meets_vllm_goodput()

    def test_vllm_goodput_reads_the_measured_ttft_and_tpot(self) -> None:
        # Sent 0.3 s late: TTFT 0.8 ≤ 1.0 although the deadline (1.0) was missed.
        late_send = make_timeline([1.1, 1.15], sent=0.3, ttft=1.0, tbt=0.2)
        assert late_send.meets_vllm_goodput()
        assert late_send.verdict() == Verdict(ttft=True, tbt=False, tbt_per_gap=False)
        slow = make_timeline([0.5, 0.62, 0.74], ttft=1.0, tbt=0.1)  # TPOT 0.12
        assert not slow.meets_vllm_goodput()


class TestVerdict:
    def test_deadlines_count_from_the_due_time(self) -> None:
        # Due at 1.0 but sent at 1.2; TTFT SLO 0.5. First token at 1.6: vLLM's TTFT 0.4 is
        # within the SLO, but the deadline 1.0 + 0.5 = 1.5 was missed.
        line = make_timeline([1.6], arrival=1.0, sent=1.2, ttft=0.5)
        assert line.ttft == pytest.approx(0.4)
        assert line.verdict() == (True, False, False)

    def test_cumulative_banks_slack_per_gap_does_not(self) -> None:
        # Deadlines 1.0, 1.1, 1.2; tokens at 0.1, 0.6, 0.65: in time cumulatively, but a
        # 0.5 s gap is over the 0.1 s TBT.
        verdict = make_timeline([0.1, 0.6, 0.65], ttft=1.0, tbt=0.1).verdict()
        assert verdict is not None
        assert not verdict.cumulative and verdict.per_gap
        assert not verdict.tbt_late(TbtReading.CUMULATIVE)
        assert verdict.tbt_late(TbtReading.PER_GAP)

    def test_late_later_token(self) -> None:
        # Deadlines 1.0, 1.1, 1.2: the third token at 1.21 is late, its gap 0.16 too.
        assert make_timeline([0.5, 1.05, 1.21]).verdict() == (False, True, True)

    def test_on_the_deadline_is_in_time(self) -> None:
        on_time = make_timeline([1.0, 1.125], ttft=1.0, tbt=0.125)  # exact in binary
        assert on_time.verdict() == (False, False, False)

    def test_merged_chunks_are_judged_token_by_token(self) -> None:
        # Tokens at 0.5, 1.15, 1.15: the third is due at 1.2, the second at 1.1.
        assert make_timeline([0.5, 1.15], tokens=[1, 2]).verdict() == (False, True, True)

    def test_failed_requests_violate_cancelled_are_not_judged(self) -> None:
        no_token = make_timeline([], outcome=Outcome.FAILED)
        cut = make_timeline([0.1], outcome=Outcome.FAILED)
        stopped = make_timeline([0.1], outcome=Outcome.CANCELLED)
        assert no_token.verdict() == (True, False, False)
        assert cut.verdict() == (False, True, True)
        assert stopped.verdict() is None


class TestOfRequest:
    def test_a_simulated_request_is_judged_as_a_streamed_one(self) -> None:
        # Arrives at 1 s; TTFT 0.5 s, TBT 0.1 s: tokens due at 1.5, 1.6, 1.7 s.
        on_time = Timeline.of_request(finished_request("r0", 1.0, [1.4, 1.59, 1.69], ttft=0.5))
        assert (on_time.start, on_time.num_tokens) == (1.0, 3)  # sent on arrival, a token a chunk
        assert on_time.token_times.tolist() == [1.4, 1.59, 1.69]
        assert on_time.verdict() == (False, False, True)  # the 0.19 s gap
        late = Timeline.of_request(finished_request("r1", 1.0, [1.55, 1.6, 1.75], ttft=0.5))
        assert late.verdict() == (True, True, True)

    def test_a_request_without_a_token_did_not_finish(self) -> None:
        with pytest.raises(ValueError, match="request x emitted no token"):
            Timeline.of_request(make_request("x"))


def test_deadlines_are_the_scheduler_s() -> None:
    # The metrics judge token k+1 by the deadline the scheduler plans for: SLO.deadline.
    request = make_request(arrival=10.0, ttft=2.0, tbt=0.05)
    k = np.arange(50)
    assert SLO(2.0, 0.05).deadline(10.0, k).tolist() == [request.deadline(i) for i in range(50)]
    assert request.ttft_deadline == 12.0
