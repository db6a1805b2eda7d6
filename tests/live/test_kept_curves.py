"""A validation's kept live curves: written as the live venue runs, read back to finish a
run stopped before its twin, with the figures the whole run gives."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

import pytest
from factories import linear_engine_steps

from slidingserve.cli import main
from slidingserve.live.compare import LiveSettings, LiveTrials
from slidingserve.live.kept_curves import (
    keep_closing_capacity,
    keep_curve,
    keep_venue,
    read_live_venue,
    trial_facts,
)
from slidingserve.live.simulated import SimulatedTrials
from slidingserve.live.validation import (
    Validation,
    ValidationSettings,
    finish_validation,
    validate,
)
from slidingserve.live.validation_figures import PolicyCurve, Trial
from slidingserve.live.validation_report import latency_table
from slidingserve.predictor.steps import save_engine_steps

LOADS = (0.6, 0.9, 1.2)


def whole_run(tmp_path: Path, kept: Path) -> tuple[ValidationSettings, Validation]:
    """A validation with the simulated engine standing in for the live one, keeping its
    live curves in `kept` as `slidingserve validate` does."""
    steps = linear_engine_steps(count=200, noise=0.3)
    save_engine_steps(tmp_path / "steps.json", steps)
    # SLOs strict enough that every curve goes down the whole grid to exact goodputs
    live = LiveSettings("unused", "mixed-v1", 60, slo_scale=0.08, repeats=2, out_dir=tmp_path)
    settings = ValidationSettings(live, LOADS, curve_points=3, budget_s=1e6, noise_draws=2)
    opened = functools.partial(keep_venue, kept, trials=trial_facts(settings))
    result = validate(
        settings, ["sarathi-edf", "vllm:fcfs"], steps, tmp_path / "steps.json", lambda _: None,
        functools.partial(SimulatedTrials, steps), functools.partial(keep_curve, kept),
        opened, functools.partial(keep_closing_capacity, kept),
    )  # fmt: skip
    for curve in result.live.curves.values():
        assert set(result.live.rates) <= set(curve.rates)
    assert all(goodput.exact for goodput in result.live.goodputs(settings.threshold).values())
    return settings, result


def test_a_run_finished_from_its_kept_curves_has_the_whole_run_s_figures(
    tmp_path: Path,
) -> None:
    kept = tmp_path / "live-curves.jsonl"
    settings, whole = whole_run(tmp_path, kept)
    assert json.loads(kept.read_text().splitlines()[0])["venue"]["grid"] == list(whole.live.rates)
    live = read_live_venue(kept, settings)
    assert whole.live.closing_capacity is not None  # kept last: the drift is told again
    assert live == dataclasses.replace(whole.live, venue=LiveTrials.venue)
    steps = linear_engine_steps(count=200, noise=0.3)
    finished = finish_validation(
        settings, list(live.curves), steps, tmp_path / "steps.json", live, lambda _: None
    )
    assert finished.policies == whole.policies
    assert finished.simulated == whole.simulated  # every draw and the plot's lines
    assert latency_table(finished) == latency_table(whole)


def test_curves_kept_without_a_venue_line_take_the_capacity_as_printed(tmp_path: Path) -> None:
    kept = tmp_path / "live-curves.jsonl"
    settings, whole = whole_run(tmp_path, kept)
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join(kept.read_text().splitlines()[1:-1]) + "\n")  # curves alone
    printed = round(whole.live.capacity, 2)
    live = read_live_venue(old, settings, printed, whole.live.slo_scale)
    assert live.capacity == pytest.approx(whole.live.capacity, rel=1e-12)
    assert live.rates == pytest.approx(whole.live.rates, rel=1e-12)
    assert live.rates == whole.live.rates  # every grid rate ran: the trials' own rates
    assert live.curves == whole.live.curves and live.slo_scale == whole.live.slo_scale
    with pytest.raises(ValueError, match=r"no venue line .* \(--capacity, --slo-scale\)"):
        read_live_venue(old, settings)
    with pytest.raises(ValueError, match=r"no trial ran near 1\.2 × the capacity"):
        read_live_venue(old, settings, 2 * printed, whole.live.slo_scale)
    with pytest.raises(ValueError, match="--capacity must be a positive number"):
        read_live_venue(old, settings, 0.0, whole.live.slo_scale)
    other_seeds = dataclasses.replace(settings, live=dataclasses.replace(settings.live, seed=5))
    with pytest.raises(ValueError, match=r"ran seeds \[0, 1\], not \[5, 6\]"):
        read_live_venue(old, other_seeds, printed, whole.live.slo_scale)


def test_settings_other_than_the_live_run_s_are_refused(tmp_path: Path) -> None:
    kept = tmp_path / "live-curves.jsonl"
    settings, whole = whole_run(tmp_path, kept)
    fewer = dataclasses.replace(settings, live=dataclasses.replace(settings.live, requests=30))
    with pytest.raises(ValueError, match=r"ran with requests 60 \(given 30\)"):
        read_live_venue(kept, fewer)
    with pytest.raises(ValueError, match="keeps its capacity: leave --capacity out"):
        read_live_venue(kept, settings, capacity=whole.live.capacity)
    with pytest.raises(ValueError, match=r"ran at SLO scale 0\.08, not 0\.5"):
        read_live_venue(kept, settings, slo_scale=0.5)
    assert read_live_venue(kept, settings, slo_scale=0.08).slo_scale == 0.08


TRIAL = dataclasses.asdict(Trial(1.0, 0, 10, 0, 0, 0.1, 0.2, 0.01))
ONE_SEED = ValidationSettings(LiveSettings("unused", "mixed-v1", 10, repeats=1), LOADS)
FACTS = trial_facts(ONE_SEED)
VENUE = {"venue": {"capacity": 2.0, "slo_scale": 1.0, "grid": [1.0], "trials": FACTS}}


def one_curve(path: Path, *trials: Trial) -> None:
    """`path` kept with ONE_SEED's venue and a curve of policy "x" with `trials`."""
    keep_venue(path, 2.0, 1.0, [1.0], trials=FACTS)
    keep_curve(path, PolicyCurve("x", trials))


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["{not json}", json.dumps(VENUE)], r"line 1: not JSON"),
        (["[1, 2]"], r"line 1: not a JSON object"),
        ([json.dumps(VENUE), json.dumps({"policy": "x"})], r"line 2: .*missing field 'trials'"),
        ([json.dumps({"policy": "x", "trials": [{**TRIAL, "rate": -1}]})], r"line 1: .*-1"),
        ([json.dumps({"policy": "x", "trials": [{**TRIAL, "seed": "a"}]})], r"seed 'a' is not"),
        ([json.dumps({"policy": "x", "trials": [{**TRIAL, "tpot_p50": None}]})], r"not a number"),
        ([json.dumps({"policy": "x", "trials": []})], r"line 1: .*it has no trial"),
        ([json.dumps({"policy": "", "trials": [TRIAL]})], r"line 1: .*not a name"),
        ([json.dumps({"venue": {"capacity": 2.0, "grid": [1.0]}})], r"line 1: not a venue"),
        ([json.dumps({"venue": {**VENUE["venue"], "grid": []}})], r"line 1: .*grid is empty"),
        ([json.dumps({"closing_capacity": "fast"})], r"line 1: not a closing capacity"),
        ([json.dumps(VENUE)], r"no live curve in it"),
        ([], r"no live curve in it"),
    ],
)
def test_a_malformed_file_is_refused_naming_its_line(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    path = tmp_path / "live-curves.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=message):
        read_live_venue(path, ONE_SEED)


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot read the live curves .*nowhere\.jsonl"):
        read_live_venue(tmp_path / "nowhere.jsonl", ONE_SEED)


def test_a_last_line_cut_short_by_a_kill_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "live-curves.jsonl"
    one_curve(path, Trial(**TRIAL))
    with path.open("a") as stream:
        stream.write('{"policy": "y", "tri')  # killed while writing
    assert list(read_live_venue(path, ONE_SEED).curves) == ["x"]


def test_a_trial_without_latencies_is_kept_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "live-curves.jsonl"
    empty = Trial(1.0, 0, 0, 0, 10, math.nan, math.nan, math.nan)  # every request cancelled
    one_curve(path, empty)
    (trial,) = read_live_venue(path, ONE_SEED).curves["x"].trials
    assert trial.cancelled == 10 and math.isnan(trial.ttft_p50) and math.isnan(trial.tpot_p50)


def test_a_policy_kept_twice_counts_with_its_latest_curve(tmp_path: Path) -> None:
    path = tmp_path / "live-curves.jsonl"
    first, latest = Trial(**TRIAL), Trial(**{**TRIAL, "violating": 3})
    one_curve(path, first)
    keep_curve(path, PolicyCurve("x", (latest,)))
    assert read_live_venue(path, ONE_SEED).curves == {"x": PolicyCurve("x", (latest,))}


def test_a_new_run_replaces_the_kept_file_only_when_its_venue_opens(tmp_path: Path) -> None:
    path = tmp_path / "live-curves.jsonl"
    one_curve(path, Trial(**TRIAL))
    keep_venue(path, 3.0, 1.0, [1.5], trials=FACTS)
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"venue": {"capacity": 3.0, "slo_scale": 1.0, "grid": [1.5], "trials": FACTS}}
    ]


def test_the_twin_needs_a_live_curve_of_every_policy(tmp_path: Path) -> None:
    path = tmp_path / "live-curves.jsonl"
    one_curve(path, Trial(**TRIAL))
    live = read_live_venue(path, ONE_SEED)
    with pytest.raises(ValueError, match="no live curve of sarathi-edf"):
        finish_validation(ONE_SEED, ["sarathi-edf"], linear_engine_steps(), path, live)


def test_the_command_finishes_a_run_from_its_kept_curves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = tmp_path / "live-curves.jsonl"
    whole_run(tmp_path, kept)
    argv = ["validate", "--model", "unused", "--workload", "mixed-v1", "--requests", "60"]
    argv += ["--seeds", "2", "--loads"]
    argv += [*map(str, LOADS), "--noise-draws", "2", "--live-curves", str(kept)]
    out = tmp_path / "finished"
    assert main([*argv, "--out-dir", str(out), "--steps", str(tmp_path / "steps.json")]) == 0
    printed = capsys.readouterr().out
    assert "the live curves of vllm:fcfs, sarathi-edf from" in printed
    assert "rank live" in printed and "TTFT p50 live" in printed
    assert "live capacity after the trials" in printed  # the drift, from the kept line
    saved = json.loads((out / "validation.json").read_text())
    assert set(saved["summary"]["policies"]) == {"vllm:fcfs", "sarathi-edf"}
    assert kept.is_file()  # the kept curves are read, never removed
    assert main([*argv, "--out-dir", str(out)]) == 2
    assert "--live-curves needs --steps" in capsys.readouterr().err
    live_run = ["validate", "--model", "unused", "--capacity", "5", "--out-dir", str(out)]
    assert main(live_run) == 2
    assert "--capacity goes with --live-curves" in capsys.readouterr().err
