"""`benchmarks/sim_speed.py`: every policy measurable, the calibration timed apart."""

from __future__ import annotations

import pytest
from factories import run_benchmark

SCRIPT = "sim_speed.py"


def rows(lines: list[str]) -> dict[str, list[str]]:
    """The table's rows by policy: rate, iterations, fast-forwarded, simulated s, wall s,
    req/wall-s, ratio to Vidur."""
    names = ("sarathi", "qoserve", "slidingserve", "vllm", "scorpio", "random-chunk")
    cells = [line.split() for line in lines]
    return {row[0]: row[1:] for row in cells if row and row[0] in names}


def test_the_default_policies_are_all_timed_after_one_calibration(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = run_benchmark(SCRIPT, monkeypatch, capsys, "--requests", "20", "--repeats", "1")
    assert lines[0].startswith("20 arxiv requests at 1.0 req/s")
    assert len([line for line in lines if line.startswith("calibration (4000 timed")]) == 1
    table = rows(lines)
    assert list(table) == ["sarathi", "qoserve", "slidingserve"]
    for rate, iterations, fast_forwarded, simulated, wall, speed, ratio in table.values():
        assert rate == "1.00"
        assert int(iterations) >= int(fast_forwarded) >= 0
        assert float(simulated) > 10.0  # 20 arrivals at 1 req/s span about 20 s
        assert float(wall) < 5.0 and float(speed) >= 20 / 5.0
        assert float(ratio.removesuffix("x")) == pytest.approx(float(speed) / 152, abs=0.06)


def test_baselines_alone_need_no_calibration(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("--requests", "10", "--repeats", "1", "--policy", "vllm", "sarathi")
    lines = run_benchmark(SCRIPT, monkeypatch, capsys, *argv)
    assert not any(line.startswith("calibration") for line in lines)
    assert list(rows(lines)) == ["vllm", "sarathi"]


def test_at_goodput_runs_each_policy_at_its_own_goodput(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("--workload", "sharegpt", "--requests", "10", "--repeats", "1", "--at-goodput")
    policies = ("--policy", "sarathi", "scorpio", "random-chunk")
    table = rows(run_benchmark(SCRIPT, monkeypatch, capsys, *argv, *policies, "--rate", "0.5"))
    assert table["sarathi"][0] == "2.03g"  # docs/results.md §1.1
    assert table["scorpio"][0] == "1.16g"  # measured by the same protocol
    assert table["random-chunk"][0] == "0.50"  # no goodput known: --rate


def test_at_goodput_refuses_a_workload_without_known_goodputs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        run_benchmark(SCRIPT, monkeypatch, capsys, "--at-goodput", "--policy", "sarathi")
    assert "--at-goodput" in capsys.readouterr().err
