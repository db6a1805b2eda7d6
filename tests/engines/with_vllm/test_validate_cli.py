"""`slidingserve validate` end to end on the tiny model, small enough for CI: a served
engine profiled, its capacity measured, two policies served at a rate set by it, the
simulated twin of the same trials, the tables, the JSON and the picture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm", minversion="0.32")

from slidingserve.cli import main  # noqa: E402


def test_validate_connects_profile_live_trials_and_their_twin(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "validate"
    argv = ["validate", "--model", str(tiny_model), "--policies", "sarathi-edf,vllm:fcfs"]
    argv += ["--requests", "12", "--seeds", "1", "--loads", "0.5", "--slo-scale", "2"]
    assert main([*argv, "--out-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "rank live" in printed and "TTFT p50 live" in printed
    assert "live capacity after the trials" in printed
    saved = json.loads((out / "validation.json").read_text())
    assert saved["settings"]["interleave"]  # the CPU build's default: servers side by side
    live, simulated = saved["live"], saved["simulated"]
    assert live["capacity"] > 0 and simulated["capacity"] > 0
    assert live["closing_capacity"] > 0 and simulated["closing_capacity"] is None
    assert live["rates"] == simulated["rates"] == [pytest.approx(0.5 * live["capacity"])]
    for venue in (live, simulated):
        for policy in ("sarathi-edf", "vllm:fcfs"):
            trials = venue["curves"][policy]["trials"]
            assert trials[0]["rate"] == live["rates"][0] and 1 <= len(trials) <= 3
            assert all(trial["requests"] == 12 and trial["seed"] == 0 for trial in trials)
    assert set(saved["summary"]["policies"]) == {"sarathi-edf", "vllm:fcfs"}
    assert (out / "steps.json").is_file() and (out / "validation.png").stat().st_size > 10_000
    kept = [json.loads(line) for line in (out / "live-curves.jsonl").read_text().splitlines()]
    venue = kept[0]["venue"]
    assert (venue["capacity"], venue["slo_scale"], venue["grid"]) == (
        live["capacity"], 2, live["rates"]
    )  # fmt: skip
    assert (venue["trials"]["requests"], venue["trials"]["seeds"]) == (12, [0])
    assert [curve["policy"] for curve in kept[1:-1]] == ["vllm:fcfs", "sarathi-edf"]
    assert kept[-1] == {"closing_capacity": live["closing_capacity"]}
