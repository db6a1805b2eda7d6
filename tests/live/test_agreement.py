"""A live comparison beside its simulated prediction (`compare --simulate --against`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from factories import linear_engine_steps

from slidingserve.cli import main
from slidingserve.eval.goodput import GoodputEstimate, Probe
from slidingserve.live.agreement import (
    MeasuredComparison,
    agreement_table,
    load_measured,
    ranks,
)
from slidingserve.live.compare import LiveComparison, LiveRow, LiveSettings
from slidingserve.predictor.steps import save_engine_steps
from slidingserve.reporting import write_json
from slidingserve.workloads import ArrivalConfig
from slidingserve.workloads.prefixes import SystemPrompt


def measured_comparison() -> LiveComparison:
    settings = LiveSettings("/models/small", "sharegpt", 30, 4, repeats=1)
    rows = [
        LiveRow("vllm:fcfs", 2.0, 0.1, 0.05, 0.1, 1.7, 1.6, 0, (0.1,)),
        LiveRow("sarathi-edf", 2.0, 0.0, 0.0, 0.0, 1.9, 1.9, 0, (0.0,)),
    ]
    goodput = {
        "vllm:fcfs": GoodputEstimate(1.5, 1.6, (Probe(1.5, 0.0),)),
        "sarathi-edf": GoodputEstimate(2.5, 2.6, (Probe(2.5, 0.0),)),
    }
    return LiveComparison(settings, 0.4, rows, goodput)


def test_a_written_comparison_reads_back(tmp_path: Path) -> None:
    write_json(tmp_path / "compare.json", measured_comparison())
    measured = load_measured(tmp_path / "compare.json")
    assert (measured.workload, measured.requests, measured.seed, measured.repeats) == (
        "sharegpt", 30, 4, 1,
    )  # fmt: skip
    assert measured.policies == ["vllm:fcfs", "sarathi-edf"] and measured.rates == [2.0]
    assert measured.slo_scale == 0.4 and measured.searched
    assert measured.goodput == {"vllm:fcfs": 1.5, "sarathi-edf": 2.5}


def test_a_shared_system_prompt_reads_back_and_reaches_the_workload(tmp_path: Path) -> None:
    live = measured_comparison()
    prompt = SystemPrompt(256, 0.8)
    shared = dataclasses.replace(
        live, settings=dataclasses.replace(live.settings, system_prompt=prompt)
    )
    write_json(tmp_path / "compare.json", shared)
    assert load_measured(tmp_path / "compare.json").system_prompt == prompt
    assert shared.settings.workload_config(0.5).system_prompt == prompt
    write_json(tmp_path / "plain.json", live)
    assert load_measured(tmp_path / "plain.json").system_prompt is None


def test_ranks_put_the_best_first_and_share_ties() -> None:
    assert ranks({"a": 3.0, "b": 5.0, "c": 3.0, "d": 1.0}) == {"a": 2, "b": 1, "c": 2, "d": 4}


def test_the_table_sets_each_live_cell_beside_its_prediction() -> None:
    live = measured_comparison()
    measured_rows = {(row.policy, row.rate): dataclasses.asdict(row) for row in live.rows}
    predicted = LiveComparison(
        live.settings,
        0.4,
        [LiveRow("vllm:fcfs", 2.0, 0.02, 0.0, 0.02, 1.8, 1.8, 0, (0.02,))],
        {"vllm:fcfs": GoodputEstimate(3.0, 3.1, (Probe(3.0, 0.0),))},
    )
    measured = MeasuredComparison(
        "sharegpt", 30, 4, 1, 0.4, ["vllm:fcfs", "sarathi-edf"], [2.0], True,
        measured_rows, {"vllm:fcfs": 1.5, "sarathi-edf": 2.5},
    )  # fmt: skip
    line = agreement_table(measured, predicted).splitlines()[2].split()
    assert line == ["vllm:fcfs", "2.00", "10.0", "2.0", "1.70", "1.80", "1.50", "3.00", "2", "1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [("[", "not valid JSON"), ('{"rows": []}', "missing field 'settings'")],
)
def test_a_file_that_is_no_comparison_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "compare.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_measured(path)


def test_compare_against_predicts_the_measured_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    live = measured_comparison()
    write_json(tmp_path / "compare.json", LiveComparison(live.settings, 0.4, live.rows, {}))
    save_engine_steps(tmp_path / "steps.json", linear_engine_steps())
    code = main([
        "compare", "--simulate", str(tmp_path / "steps.json"),
        "--against", str(tmp_path / "compare.json"), "--out-dir", str(tmp_path / "out"),
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "sharegpt, 30 requests a run, seed 4, SLO scale 0.400" in out
    table = out.split("beside simulated:")[1].splitlines()
    assert [line.split()[0] for line in table if "2.00" in line] == ["vllm:fcfs", "sarathi-edf"]
    saved = json.loads((tmp_path / "out" / "compare-simulated.json").read_text())
    assert saved["slo_scale"] == 0.4 and saved["settings"]["requests"] == 30


def test_against_without_simulate_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--model", "m", "--against", "compare.json"]) == 2
    assert "--against needs --simulate" in capsys.readouterr().err


def test_bursty_arrivals_read_back_so_the_prediction_is_of_the_same_workload(
    tmp_path: Path,
) -> None:
    live = measured_comparison()
    bursty = ArrivalConfig("gamma", 2.0)
    saved = dataclasses.replace(live, settings=dataclasses.replace(live.settings, arrival=bursty))
    write_json(tmp_path / "compare.json", saved)
    assert load_measured(tmp_path / "compare.json").arrival == bursty
    write_json(tmp_path / "plain.json", live)
    assert load_measured(tmp_path / "plain.json").arrival == ArrivalConfig()
