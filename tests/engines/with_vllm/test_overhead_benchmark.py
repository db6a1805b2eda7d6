"""`benchmarks/vllm_overhead.py` runs on a real engine and prints a row a policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import run_benchmark

pytest.importorskip("vllm", minversion="0.32")


def test_each_policy_gets_a_row_of_timings(
    tiny_model: Path,
    offline_process: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--model", str(tiny_model), "--requests", "6", "--max-num-seqs", "4"]
    policies = ["vllm", "sarathi-edf"]
    lines = run_benchmark("vllm_overhead.py", monkeypatch, capsys, *argv, "--policies", *policies)
    cells = [line.split() for line in lines]
    assert ["policy", "adapter", "med/p99", "ms"] in [row[:4] for row in cells]
    rows = {row[0]: row[1:] for row in cells if row and row[0] in policies}  # vLLM logs too
    assert list(rows) == policies
    for median, _, p99, vllm_ms, step_ms, steps, off_plan in rows.values():
        assert 0 < float(median) <= float(p99)
        assert float(vllm_ms) > 0 and float(step_ms) > 0
        # 6 prompts of at most 300 tokens and 32 outputs each, 4 at a time: 48+ steps
        assert int(steps) >= 48 and int(off_plan) >= 0
