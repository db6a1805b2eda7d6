"""Live comparison pieces that need no server: server specs and the table."""

from __future__ import annotations

import pytest

from slidingserve.eval.goodput import GoodputEstimate, Probe
from slidingserve.live.compare import LiveComparison, LiveRow, LiveSettings, table
from slidingserve.live.servers import ServerSpec


def test_our_policies_run_through_the_adapter() -> None:
    command = ServerSpec("/models/tiny", "slidingserve").command(8100)
    assert "--scheduler-cls" in command
    assert command[command.index("--port") + 1] == "8100"
    assert "--scheduling-policy" not in command


def test_vllm_policies_run_without_it() -> None:
    command = ServerSpec("/models/tiny", "vllm:priority", max_num_seqs=8).command(8100)
    assert command[command.index("--scheduling-policy") + 1] == "priority"
    assert "--scheduler-cls" not in command
    assert command[command.index("--max-num-seqs") + 1] == "8"


@pytest.mark.parametrize(
    ("policy", "message"),
    [("vllm:lifo", "unknown vLLM policy 'vllm:lifo'"), ("fifo", "unknown policy 'fifo'")],
)
def test_unknown_policies_are_refused_before_any_server_starts(policy: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServerSpec("/models/tiny", policy)


def test_table_lists_every_run_and_the_searched_goodput() -> None:
    rows = [
        LiveRow("slidingserve", 16.0, 0.005, 0.0, 0.005, 15.2, 15.0, 0),
        LiveRow("vllm:fcfs", 16.0, 0.2, 0.15, 0.1, 11.0, 12.5, 1),
    ]
    estimate = GoodputEstimate(14.0, 14.3, (Probe(14.0, 0.0), Probe(15.0, 0.02)))
    text = table(LiveComparison(LiveSettings("/m"), 0.15, rows, {"slidingserve": estimate}))
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["policy", "rate", "viol%"]
    assert "14.00" in lines[2] and lines[2].split()[2] == "0.5"
    assert lines[3].rstrip().endswith("-")  # no search for vllm:fcfs


def test_a_single_noisy_run_does_not_decide_a_rate() -> None:
    from slidingserve.live.compare import median_violation

    assert median_violation([0.0, 0.04, 0.0]) == 0.0  # one run lost 8 of 200 requests
    assert median_violation([0.02, 0.03, 0.0]) == 0.02
