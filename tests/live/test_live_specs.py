"""Live comparison pieces that need no server: server specs and the table."""

from __future__ import annotations

import dataclasses
from typing import Any

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


def test_a_fixed_rate_reports_its_median_run_and_every_runs_rate() -> None:
    from types import SimpleNamespace

    from slidingserve.live.compare import median_row

    def run(violation: float, goodput: float) -> SimpleNamespace:
        cumulative = SimpleNamespace(overall=violation, ttft=violation / 2, tbt=violation)
        per_gap = SimpleNamespace(overall=2 * violation)
        return SimpleNamespace(
            cumulative=cumulative,
            per_gap=per_gap,
            itl=SimpleNamespace(p99=violation),  # seconds; the row has ms
            goodput=goodput,
            goodput_vllm=goodput,
            failed=0,
        )

    row = median_row("qoserve", 32.0, [run(0.15, 20.0), run(0.0, 31.0), run(0.05, 28.0)])  # type: ignore[list-item]
    assert (row.violation_rate, row.goodput) == (0.05, 28.0)
    assert row.violation_runs == (0.0, 0.05, 0.15)
    assert (row.per_gap_violation_rate, row.itl_p99_ms) == (0.1, 50.0)  # the median run's
    with pytest.raises(ValueError, match="at least one run"):
        median_row("qoserve", 32.0, [])


@pytest.mark.parametrize("field", ["requests", "repeats"])
def test_settings_refuse_counts_below_one(field: str) -> None:
    changes: dict[str, Any] = {field: 0}
    with pytest.raises(ValueError, match=f"{field} must be a positive integer"):
        dataclasses.replace(LiveSettings("/m"), **changes)
