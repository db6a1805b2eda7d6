"""`compare --simulate`: the live comparison predicted on a profiled engine."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from factories import STEP_BASE, STEP_PER_DECODE, linear_engine_steps

from slidingserve.cli import main
from slidingserve.core.batch import BatchShape
from slidingserve.live.compare import STRICT_TBT, LiveSettings, calibrate
from slidingserve.live.simulated import SimulatedTrials, simulate_comparison, simulated_policy
from slidingserve.predictor import batch_features
from slidingserve.predictor.calibration import DEFAULT_SAMPLES
from slidingserve.predictor.steps import save_engine_steps

SETTINGS = LiveSettings("unused", requests=40, repeats=2, seed=1)


def test_vllm_policies_map_to_their_simulated_twins() -> None:
    assert simulated_policy("vllm:fcfs") == "vllm"
    assert simulated_policy("vllm:priority") == "vllm-priority"
    assert simulated_policy("slidingserve") == "slidingserve"
    with pytest.raises(ValueError, match="unknown policy 'vllm:lifo'"):
        simulated_policy("vllm:lifo")


def test_a_bad_policy_fails_before_any_run() -> None:
    with pytest.raises(ValueError, match="unknown policy 'fifo'"):
        simulate_comparison(linear_engine_steps(), SETTINGS, ["vllm:fcfs", "fifo"], [1.0])


def test_planning_policies_share_a_fitted_predictor_not_the_engine_s_own() -> None:
    steps = linear_engine_steps(noise=0.2)
    engine = SimulatedTrials(steps, SETTINGS)
    sliding, qoserve = engine.policy_context("slidingserve"), engine.policy_context("qoserve")
    assert sliding.predictor is not None and sliding.predictor is not engine.latency.predictor
    assert qoserve.predictor is sliding.predictor and qoserve.profile is sliding.profile
    assert len(sliding.profile) == DEFAULT_SAMPLES and sliding.profile != steps.batches
    shapes = [BatchShape((5,) * 8, ()), BatchShape((), ((128, 0),)), BatchShape((7,), ((64, 32),))]
    model, truth = sliding.predictor, engine.latency.expected_time
    errors = [model.predict_features(*batch_features(s)) / truth(s) - 1 for s in shapes]
    assert all(abs(error) < 0.05 for error in errors)  # fitted to the simulated engine...
    assert any(abs(error) > 1e-4 for error in errors)  # ...through its noise
    baseline = engine.policy_context("vllm:fcfs")
    assert baseline.predictor is None and baseline.profile == ()


def test_the_calibration_is_the_same_for_the_same_seed() -> None:
    steps = linear_engine_steps(noise=0.2)
    first = SimulatedTrials(steps, SETTINGS).calibration
    assert first == SimulatedTrials(steps, SETTINGS).calibration
    other_seed = dataclasses.replace(SETTINGS, seed=2)
    assert first.batches != SimulatedTrials(steps, other_seed).calibration.batches


def test_compare_simulate_runs_qoserve_beside_slidingserve(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # TBT 4 ms over 3.2 ms unloaded steps, TTFT 160 ms: met when light, not in a burst.
    steps = tmp_path / "steps.json"
    save_engine_steps(steps, linear_engine_steps(noise=0.1))
    code = main([
        "compare", "--simulate", str(steps), "--policies", "qoserve,slidingserve",
        "--rates", "0.5", "5000", "--requests", "60", "--repeats", "1", "--slo-scale", "0.08",
        "--out-dir", str(tmp_path),
    ])  # fmt: skip
    assert code == 0
    table = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [row[:2] for row in table if row and row[0] == "qoserve"] == [
        ["qoserve", "0.50"],
        ["qoserve", "5000.00"],
    ]
    rows = json.loads((tmp_path / "compare-simulated.json").read_text())["rows"]
    by_policy = {(row["policy"], row["rate"]): row for row in rows}
    assert sorted(by_policy) == [
        ("qoserve", 0.5),
        ("qoserve", 5000.0),
        ("slidingserve", 0.5),
        ("slidingserve", 5000.0),
    ]
    for policy in ("qoserve", "slidingserve"):
        assert by_policy[policy, 0.5]["violation_rate"] == 0.0
        assert by_policy[policy, 5000.0]["violation_rate"] > 0.5
        assert by_policy[policy, 5000.0]["failed"] == 0


def test_calibration_follows_the_live_rule_on_the_engine_s_unloaded_step() -> None:
    # Unloaded, each step runs one decode: TPOT = base + one decode's cost.
    engine = SimulatedTrials(linear_engine_steps(), SETTINGS)
    unloaded = STEP_BASE + STEP_PER_DECODE
    expected = SETTINGS.tbt_headroom * unloaded / STRICT_TBT
    assert calibrate(engine, SETTINGS) == pytest.approx(expected, rel=0.05)


def test_rows_for_every_policy_and_rate_and_load_costs_deadlines() -> None:
    # TBT 4 ms over 3.2 ms unloaded steps, TTFT 160 ms: met when light, not in a burst.
    settings = dataclasses.replace(SETTINGS, requests=200, slo_scale=0.08)
    result = simulate_comparison(
        linear_engine_steps(noise=0.1),
        settings,
        ["slidingserve", "vllm:fcfs"],
        [0.5, 5000.0],
        search=True,
        say=lambda _: None,
    )
    assert [(row.policy, row.rate) for row in result.rows] == [
        ("slidingserve", 0.5), ("slidingserve", 5000.0), ("vllm:fcfs", 0.5), ("vllm:fcfs", 5000.0),
    ]  # fmt: skip
    light, heavy = result.rows[2], result.rows[3]
    assert light.violation_rate == 0.0 and heavy.violation_rate > 0.5
    assert len(heavy.violation_runs) == settings.repeats and heavy.failed == 0
    for policy in ("slidingserve", "vllm:fcfs"):
        assert 0.5 <= result.goodput[policy].goodput < 5000.0


def test_the_same_seeds_give_the_same_prediction() -> None:
    steps = linear_engine_steps(noise=0.2)
    first = simulate_comparison(steps, SETTINGS, ["sarathi-edf"], [30.0], say=lambda _: None)
    second = simulate_comparison(steps, SETTINGS, ["sarathi-edf"], [30.0], say=lambda _: None)
    assert first.rows == second.rows and first.slo_scale == second.slo_scale


def test_a_noise_draw_runs_the_same_requests_with_other_noise() -> None:
    steps = linear_engine_steps(noise=0.2)
    settings = dataclasses.replace(SETTINGS, slo_scale=1.0)
    draws = [SimulatedTrials(steps, settings, draw) for draw in (0, 1, 1, 2)]
    runs = [trials.run("sarathi-edf", 30.0, 1, 1.0) for trials in draws]
    assert runs[1] == runs[2]  # a draw is seeded
    assert runs[0].completed == runs[1].completed == runs[3].completed == 40  # same requests
    assert len({run.ttft.p50 for run in (runs[0], runs[1], runs[3])}) == 3  # other noise
    calibration = draws[0].calibration
    shared = draws[0].with_noise_draw(2)  # the same fitted engine and calibration
    assert shared.latency is draws[0].latency and shared.calibration is calibration
    assert shared.run("sarathi-edf", 30.0, 1, 1.0) == runs[3]
    with pytest.raises(ValueError, match="noise draw"):
        SimulatedTrials(steps, settings, -1)
    with pytest.raises(ValueError, match="noise draw"):
        draws[0].with_noise_draw(-1)


def test_a_fixed_scale_is_used_as_given() -> None:
    settings = dataclasses.replace(SETTINGS, slo_scale=0.3)
    result = simulate_comparison(linear_engine_steps(), settings, ["vllm"], [1.0])
    assert result.slo_scale == 0.3


def test_compare_simulate_prints_the_predicted_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    steps = tmp_path / "steps.json"
    save_engine_steps(steps, linear_engine_steps())
    code = main([
        "compare", "--simulate", str(steps), "--policies", "sarathi-edf,vllm:priority",
        "--rates", "2", "--requests", "30", "--repeats", "1", "--out-dir", str(tmp_path),
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "simulated linear engine: sharegpt, 30 requests a run" in out
    assert len([line for line in out.splitlines() if " 2.00 " in line]) == 2
    saved = json.loads((tmp_path / "compare-simulated.json").read_text())
    assert [row["policy"] for row in saved["rows"]] == ["sarathi-edf", "vllm:priority"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare"], "one of the arguments --model --simulate is required"),
        (["compare", "--model", "m", "--simulate", "s.json"], "not allowed with argument"),
    ],
)
def test_compare_needs_one_engine(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_compare_simulate_reports_a_bad_steps_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "steps.json"
    bad.write_text('{"format": "slidingserve-predictor"}')
    assert main(["compare", "--simulate", str(bad)]) == 2
    assert "not an engine-steps file" in capsys.readouterr().err
