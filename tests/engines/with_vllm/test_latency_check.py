"""`benchmarks/latency_check.py` end to end on the tiny model: profiled, two policies served
side by side at one rate, their twin, the table and the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import run_benchmark

pytest.importorskip("vllm", minversion="0.32")


def test_live_and_simulated_latencies_side_by_side(
    tiny_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--model", str(tiny_model), "--policies", "sarathi-edf,vllm:fcfs"]
    argv += ["--requests", "8", "--seeds", "2", "--noise-draws", "2", "--slo-scale", "2"]
    argv += ["--load", "0.5", "--out-dir", str(tmp_path)]
    printed = "\n".join(run_benchmark("latency_check.py", monkeypatch, capsys, *argv))
    assert "TTFT p50 live / sim" in printed
    rows = [line.split() for line in printed.splitlines()]
    assert {row[0] for row in rows if row and row[0] in ("sarathi-edf", "vllm:fcfs")} == {
        "sarathi-edf",
        "vllm:fcfs",
    }
    saved = json.loads((tmp_path / "latency-check.json").read_text())
    assert saved["slo_scale"] == 2 and saved["rate"] > 0
    assert (tmp_path / "steps.json").is_file()  # profiled first
    live, simulated = saved["live"], saved["simulated"]
    assert sorted((r["policy"], r["seed"]) for r in live) == [
        ("sarathi-edf", 0), ("sarathi-edf", 1), ("vllm:fcfs", 0), ("vllm:fcfs", 1)
    ]  # fmt: skip
    assert len(simulated) == 2 * len(live)  # two noise draws of each trial
    for row in live + simulated:
        assert 0 < row["ttft_p50"] <= row["ttft_p99"] and 0 <= row["violating"] <= 1
    # A live server the machine stalls can stream a request's tokens in one chunk, and its
    # TPOT is then 0, as vLLM's benchmark reads it; the twin's decode steps always take time.
    assert all(row["tpot_p50"] >= 0 for row in live)
    assert all(row["tpot_p50"] > 0 for row in simulated)
