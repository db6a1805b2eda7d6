"""`validate`'s procedure: goodput read from measured points, Wilson intervals, the
top-down rates and their stop, the budget, and the whole run with a simulated engine
standing in for the live one (so both venues must agree exactly)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import linear_engine_steps
from factories import run_metrics as metrics

from slidingserve.live.compare import LiveSettings
from slidingserve.live.simulated import SimulatedTrials
from slidingserve.live.validation import (
    REFERENCE_POLICY,
    ValidationSettings,
    ordered_policies,
    run_curve,
    run_curves,
    run_venue,
    validate,
)
from slidingserve.live.validation_figures import (
    Goodput,
    PolicyCurve,
    Trial,
    curve_goodput,
    exact_ratios,
    mean_goodput,
    wilson_interval,
)
from slidingserve.live.validation_plan import Progress, check_budget
from slidingserve.live.validation_report import plot, relative_error, report, summary
from slidingserve.metrics import RunMetrics
from slidingserve.workloads import WorkloadConfig


def test_the_goodput_lies_between_the_last_passing_rate_and_the_first_failing_one() -> None:
    points = [(2.0, 0.0), (4.0, 0.005), (6.0, 0.025), (8.0, 0.3)]
    # 4 passes at 0.5%, 6 fails at 2.5%: 1% lies a quarter of the way from 4 to 6
    assert curve_goodput(points, 0.01).value == pytest.approx(4.5)
    assert curve_goodput(points, 0.01).exact


def test_a_failure_below_a_pass_ends_the_curve() -> None:
    assert curve_goodput([(2.0, 0.0), (4.0, 0.02), (6.0, 0.0)], 0.01).value == pytest.approx(3.0)
    assert curve_goodput([(2.0, 0.0), (4.0, 0.02), (6.0, 0.0)], 0.01).exact


def test_a_curve_that_never_fails_or_never_passes_gives_a_bound() -> None:
    assert curve_goodput([(3.0, 0.2), (5.0, 0.5)], 0.01) == Goodput(3.0, "<")
    assert curve_goodput([(3.0, 0.0), (5.0, 0.01)], 0.01) == Goodput(5.0, "≥")
    assert Goodput(5.0, "≥").text() == "≥ 5.00" and not Goodput(5.0, "≥").exact
    with pytest.raises(ValueError, match="no trials"):
        curve_goodput([], 0.01)


def test_wilson_intervals_cover_the_share_and_narrow_with_the_count() -> None:
    low, high = wilson_interval(2, 200)
    assert low < 0.01 < high
    wide = wilson_interval(1, 100)
    narrow = wilson_interval(10, 1000)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]
    assert wilson_interval(0, 50)[0] == pytest.approx(0.0, abs=1e-12)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(50, 50)[1] == pytest.approx(1.0)


class StepTrials:
    """A fake venue: a policy is late on a share of requests that steps up at its limit."""

    venue = "the fake"
    goodput_label = "fake goodput"

    def __init__(self, limits: dict[str, float], noisy_seed: int | None = None) -> None:
        self.limits = limits
        self.noisy_seed = noisy_seed
        self.runs: list[tuple[str, float, int]] = []

    def check(self, policy: str) -> None:
        if policy not in self.limits:
            raise ValueError(f"unknown policy {policy!r}")

    @contextlib.contextmanager
    def serving(self, policy: str) -> Iterator[None]:
        yield

    def probe(self, workload: WorkloadConfig, rate: float, seed: int) -> RunMetrics:
        return metrics(0.0)

    def run(self, policy: str, rate: float, seed: int, scale: float) -> RunMetrics:
        self.runs.append((policy, rate, seed))
        late = 0.5 if rate > self.limits[policy] else 0.0
        return metrics(0.05 if seed == self.noisy_seed and late == 0 else late)


SETTINGS = ValidationSettings(LiveSettings("unused", requests=100, repeats=2))


def test_rates_run_from_the_top_and_stop_where_every_seed_passes() -> None:
    trials = StepTrials({"p": 5.0})
    curve = run_curve(trials, SETTINGS, "p", [2.0, 4.0, 6.0, 8.0], scale=1.0)
    assert trials.runs == [("p", 8.0, 0), ("p", 8.0, 1), ("p", 6.0, 0), ("p", 6.0, 1),
                           ("p", 4.0, 0), ("p", 4.0, 1)]  # fmt: skip
    assert curve.rates == [4.0, 6.0, 8.0]
    assert curve.pooled(6.0) == (100, 200)  # 50% of 100 requests, twice
    assert curve.pooled_goodput(0.01).value == pytest.approx(4.0 + 2.0 * 0.01 / 0.5)
    assert curve.pooled_goodput(0.01).exact


def test_a_curve_passing_the_top_climbs_above_it_by_the_grid_s_step() -> None:
    trials = StepTrials({"p": 11.0})
    curve = run_curve(trials, SETTINGS, "p", [4.0, 8.0], scale=1.0)
    assert curve.rates == [8.0, 16.0]  # 8 passes, 8 × 2 fails: 4 never runs
    assert curve.pooled_goodput(0.01).exact
    trials = StepTrials({"p": 100.0})
    assert run_curve(trials, SETTINGS, "p", [4.0, 8.0], 1.0).rates == [8.0, 16.0, 32.0]


def test_a_curve_failing_the_bottom_goes_on_below_it() -> None:
    trials = StepTrials({"p": 1.5})
    curve = run_curve(trials, SETTINGS, "p", [4.0, 8.0], scale=1.0)
    assert curve.rates == [1.0, 2.0, 4.0, 8.0]  # 2 fails, 1 passes
    assert curve.pooled_goodput(0.01).exact


def test_one_noisy_seed_keeps_the_rates_going_down() -> None:
    trials = StepTrials({"p": 5.0}, noisy_seed=1)
    curve = run_curve(trials, SETTINGS, "p", [4.0, 6.0], scale=1.0)
    assert curve.rates == pytest.approx([4.0 / 1.5**2, 4.0 / 1.5, 4.0, 6.0])  # at most 2 below
    assert curve.seed_goodput(0, 0.01).value == pytest.approx(4.0 + 2.0 * 0.01 / 0.5)
    assert curve.seed_goodput(0, 0.01).exact
    assert curve.seed_goodput(1, 0.01).bound == "<"  # 5% late at every rate


class SeedTrials(StepTrials):
    """A fake venue whose policy steps up at a limit of each seed's own."""

    def __init__(self, seed_limits: dict[int, float]) -> None:
        super().__init__({"p": 0.0})
        self.seed_limits = seed_limits

    def run(self, policy: str, rate: float, seed: int, scale: float) -> RunMetrics:
        self.runs.append((policy, rate, seed))
        return metrics(0.5 if rate > self.seed_limits[seed] else 0.0)


def test_seeds_that_pass_a_split_top_climb_on_their_own_until_they_fail() -> None:
    settings = dataclasses.replace(SETTINGS, live=dataclasses.replace(SETTINGS.live, repeats=3))
    trials = SeedTrials({0: 9.0, 1: 5.0, 2: 100.0})
    curve = run_curve(trials, settings, "p", [4.0, 6.0, 8.0], scale=1.0)
    step = 8.0 / 6.0
    # round 1: every seed at the top; seeds 0 and 2 pass it, seed 1 does not
    # round 2: every seed at 6 (seed 1 still fails) and 0 and 2 climb to 8 × step
    # round 3: every seed at 4 (all pass: the descent ends); 2 climbs again, 0 failed
    assert trials.runs == [("p", 8.0, 0), ("p", 8.0, 1), ("p", 8.0, 2),
                           ("p", 6.0, 0), ("p", 8.0 * step, 0), ("p", 6.0, 1),
                           ("p", 6.0, 2), ("p", 8.0 * step, 2),
                           ("p", 4.0, 0), ("p", 4.0, 1), ("p", 4.0, 2),
                           ("p", 8.0 * step**2, 2)]  # fmt: skip
    assert curve.seed_goodput(0, 0.01).exact  # between 8 and 8 × step
    assert curve.seed_goodput(0, 0.01).value == pytest.approx(8.0 + 8.0 * (step - 1) / 50)
    assert curve.seed_goodput(1, 0.01).exact
    climbed = curve.seed_goodput(2, 0.01)
    assert climbed.bound == "≥" and climbed.value == pytest.approx(8.0 * step**2)
    assert curve.common_rates == [4.0, 6.0, 8.0]  # the pooled goodput reads only these
    assert curve.pooled_goodput(0.01).value == pytest.approx(4.0 + 2.0 * 0.01 / (0.5 / 3))


def test_interleaved_curves_run_every_policy_at_a_seed_before_the_next_seed() -> None:
    trials = StepTrials({"a": 5.0, "b": 7.0, "c": 100.0})
    settings = dataclasses.replace(SETTINGS, live=dataclasses.replace(SETTINGS.live, repeats=3))
    curves = run_curves(trials, settings, ["a", "b", "c"], [4.0, 6.0, 8.0], scale=1.0)
    # round 1: all at 8, the order turning by one with each seed; c passes 8 and climbs
    assert trials.runs[:9] == [("a", 8.0, 0), ("b", 8.0, 0), ("c", 8.0, 0),
                               ("b", 8.0, 1), ("c", 8.0, 1), ("a", 8.0, 1),
                               ("c", 8.0, 2), ("a", 8.0, 2), ("b", 8.0, 2)]  # fmt: skip
    # round 2: a at 6, b at 6 (passes: done), c at 8 × 4/3
    second = {policy: rate for policy, rate, _ in trials.runs[9:18]}
    assert second == {"a": 6.0, "b": 6.0, "c": pytest.approx(32 / 3)}
    # each curve is the one it has alone
    for policy in "abc":
        alone = run_curve(StepTrials(trials.limits), settings, policy, [4.0, 6.0, 8.0], 1.0)
        assert curves[policy] == alone
    assert curves["a"].rates == [4.0, 6.0, 8.0] and curves["b"].rates == [6.0, 8.0]


def test_interleaved_curves_are_handed_over_as_each_is_done() -> None:
    done: list[str] = []
    run_curves(StepTrials({"a": 5.0, "b": 7.0}), SETTINGS, ["a", "b"], [4.0, 6.0, 8.0], 1.0,
               measured=lambda curve: done.append(curve.policy))  # fmt: skip
    assert done == ["b", "a"]  # b passes 6, a only 4


class ServerTrials(StepTrials):
    """A fake venue that notes the servers up while each trial runs."""

    def __init__(self, limits: dict[str, float]) -> None:
        super().__init__(limits)
        self.up: list[str] = []
        self.up_at_run: list[tuple[str, ...]] = []

    @contextlib.contextmanager
    def serving(self, policy: str) -> Iterator[None]:
        self.up.append(policy)
        try:
            yield
        finally:
            self.up.remove(policy)

    def run(self, policy: str, rate: float, seed: int, scale: float) -> RunMetrics:
        assert policy in self.up
        self.up_at_run.append(tuple(self.up))
        return super().run(policy, rate, seed, scale)


@pytest.mark.parametrize("interleave", [True, False])
def test_servers_are_up_together_only_when_interleaved(interleave: bool) -> None:
    trials = ServerTrials({"a": 5.0, "b": 7.0, REFERENCE_POLICY: 3.0})
    live = dataclasses.replace(SETTINGS.live, slo_scale=1.0)
    settings = dataclasses.replace(SETTINGS, live=live, loads=(0.4, 0.6), interleave=interleave)
    result = run_venue(trials, settings, ["a", REFERENCE_POLICY, "b"], lambda _: None)
    if interleave:
        assert set(trials.up_at_run) == {(REFERENCE_POLICY, "a", "b")}
        assert [policy for policy, _, _ in trials.runs[:3]] == [REFERENCE_POLICY, "a", "b"]
    else:
        assert set(trials.up_at_run) == {(REFERENCE_POLICY,), ("a",), ("b",)}
        assert [policy for policy, _, _ in trials.runs[:2]] == [REFERENCE_POLICY] * 2
    assert trials.up == []
    assert list(result.curves) == [REFERENCE_POLICY, "a", "b"]


def test_ratios_leave_out_the_seeds_where_either_goodput_is_a_bound() -> None:
    values = [Goodput(2.0), Goodput(3.0, "≥"), Goodput(4.0)]
    reference = [Goodput(1.0), Goodput(1.0), Goodput(2.0, "<")]
    assert exact_ratios(values, reference) == [2.0]


def test_the_budget_refuses_a_plan_too_long_and_says_what_to_cut() -> None:
    settings = ValidationSettings(LiveSettings("unused", requests=200, repeats=3), budget_s=600)
    with pytest.raises(ValueError, match="over the budget of 10 min: give fewer --requests"):
        check_budget(settings, policies=6, capacity=10.0)
    assert check_budget(settings, policies=1, capacity=1000.0) < 600


@pytest.mark.parametrize(
    "change",
    [{"loads": ()}, {"loads": (0.5, 0.5)}, {"loads": (0.0,)}, {"loads": (3.0,)},
     {"threshold": 1.0}, {"curve_points": 1}, {"budget_s": 0.0}, {"warmup_requests": -1},
     {"noise_draws": 0}, {"noise_draws": 1.5}, {"noise_draws": True}],
)  # fmt: skip
def test_bad_settings_are_refused(change: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ValidationSettings(LiveSettings("unused"), **change)  # type: ignore[arg-type]


def test_progress_tells_the_time_left_from_the_pace_so_far() -> None:
    said: list[str] = []
    now = iter([0.0, 30.0, 90.0])
    progress = Progress(100.0, said.append, lambda: next(now))
    progress.advance(25.0, "first")  # 30 s for 25 planned: 75 left at that pace = 1.5 min
    progress.skip(25.0)
    progress.advance(25.0, "second")  # 90 s for 50 of 75 planned
    assert said[0].endswith("first · 0.5 min elapsed, ~1.5 min left")
    assert said[1].endswith("second · 1.5 min elapsed, ~0.8 min left")


class SlowingTrials(StepTrials):
    """A fake venue whose engine serves fewer requests a second with each capacity run, and
    that notes which server runs."""

    def __init__(self, limits: dict[str, float], throughputs: list[float]) -> None:
        super().__init__(limits)
        self.throughputs = iter(throughputs)
        self.served: list[str] = []

    @contextlib.contextmanager
    def serving(self, policy: str) -> Iterator[None]:
        self.served.append(policy)
        yield

    def probe(self, workload: WorkloadConfig, rate: float, seed: int) -> RunMetrics:
        if seed != SETTINGS.probe_seed:  # a warm-up
            return metrics(0.0)
        measured = metrics(0.0)
        return dataclasses.replace(measured, request_throughput=next(self.throughputs))


def test_the_capacity_measured_again_at_the_end_tells_the_drift() -> None:
    trials = SlowingTrials({"slidingserve": 4.0, "vllm:fcfs": 3.0}, [10.0, 8.0])
    said: list[str] = []
    settings = dataclasses.replace(SETTINGS, live=dataclasses.replace(SETTINGS.live, slo_scale=1.0))
    result = run_venue(trials, settings, ["slidingserve"], said.append, closing=True)
    assert trials.served == [REFERENCE_POLICY, "slidingserve", REFERENCE_POLICY]
    assert (result.capacity, result.closing_capacity) == (10.0, 8.0)
    assert result.drift == pytest.approx(-0.2)
    assert "capacity at the end 8.00 req/s (-20.0% from the start)" in said[-1]
    assert run_venue(StepTrials({"slidingserve": 4.0, "vllm:fcfs": 3.0}), settings,
                     ["slidingserve"], lambda _: None).closing_capacity is None  # fmt: skip


def test_a_closing_run_that_fails_loses_no_trial() -> None:
    trials = SlowingTrials({"slidingserve": 4.0, "vllm:fcfs": 3.0}, [10.0, 0.0])
    said: list[str] = []
    settings = dataclasses.replace(SETTINGS, live=dataclasses.replace(SETTINGS.live, slo_scale=1.0))
    result = run_venue(trials, settings, ["slidingserve"], said.append, closing=True)
    assert result.closing_capacity is None and result.drift is None
    assert result.curves["slidingserve"].trials  # kept
    assert said[-1] == (
        "the fake: the capacity could not be measured again at the end: "
        "the capacity run completed no request"
    )


def test_the_reference_policy_runs_first() -> None:
    assert ordered_policies(["a", REFERENCE_POLICY, "a", "b"]) == [REFERENCE_POLICY, "a", "b"]
    assert ordered_policies(["a", "b"]) == ["a", "b"]


def test_a_trial_counts_its_late_requests() -> None:
    trial = Trial.of(3.0, 1, metrics(0.07))
    assert (trial.requests, trial.violating, trial.violation_rate) == (100, 7, 0.07)
    assert PolicyCurve("p", (trial,)).interval(3.0)[0] < 0.07


def test_relative_errors() -> None:
    assert relative_error(11.0, 10.0) == pytest.approx(0.1)
    assert math.isnan(relative_error(1.0, 0.0))


def test_a_simulated_engine_validated_against_itself_agrees_exactly(tmp_path: Path) -> None:
    """The pieces connect: profile → capacity → grid → trials → twin → tables and picture.
    With the simulated engine standing in for the live one, every figure must agree."""
    steps = linear_engine_steps(count=200)
    live = LiveSettings("unused", "mixed-v1", requests=60, repeats=2, out_dir=tmp_path)
    settings = ValidationSettings(live, loads=(0.6, 0.9, 1.2), curve_points=3, budget_s=1e6)
    said: list[str] = []
    fake_live = functools.partial(SimulatedTrials, steps)
    result = validate(
        settings, ["slidingserve", "vllm:fcfs"], steps, tmp_path / "steps.json", said.append,
        fake_live,
    )  # fmt: skip
    assert result.policies == ["vllm:fcfs", "slidingserve"]
    assert said[0].startswith("the simulated engine: capacity ")
    assert result.live.capacity == result.simulated.capacity > 0
    assert result.live.closing_capacity == result.live.capacity  # measured again: no drift
    assert result.simulated.closing_capacity is None
    assert result.live.rates == result.simulated.rates
    for policy in result.policies:
        assert result.live.curves[policy] == result.simulated.curves[policy]
        assert len(result.simulated.lines[policy].rates) == 3
    figures = summary(result)
    assert figures["capacity_error"] == 0.0
    assert figures["capacity_drift"] == 0.0
    for policy in figures["policies"].values():
        assert policy["goodput_live"] == policy["goodput_simulated"] > 0
        assert policy["goodput_error"] == 0.0 or policy["goodput_live_bound"]
    text = report(result)
    assert "live capacity after the trials" in text and "(+0% from the start" in text
    assert "rank live" in text and "slidingserve ÷ vllm:fcfs" in text and "(+0%)" in text
    assert plot(result, tmp_path / "v.png").stat().st_size > 10_000


def test_the_twin_reports_the_mean_of_its_noise_draws_and_their_range(tmp_path: Path) -> None:
    """With noise in the profile, each noise draw of the twin gives its own goodput: the
    simulated goodput is their mean, the table shows their range and whether live lies in
    it, and draw 0 is the twin's trials as one draw would run them."""
    steps = linear_engine_steps(count=200, noise=0.3)
    live = LiveSettings("unused", "mixed-v1", requests=60, repeats=2, out_dir=tmp_path)
    settings = ValidationSettings(
        live, loads=(0.6, 0.9, 1.2), curve_points=3, budget_s=1e6, noise_draws=3
    )
    said: list[str] = []
    fake_live = functools.partial(SimulatedTrials, steps)
    result = validate(settings, ["sarathi-edf"], steps, tmp_path / "steps.json", said.append,
                      fake_live)  # fmt: skip
    assert "the simulated twin, noise draw 3 of 3" in said
    sim = result.simulated
    assert len(sim.draws) == 2 and not result.live.draws
    for policy in result.policies:
        assert result.live.curves[policy] == sim.curves[policy]  # draw 0: the same trials
        draws = sim.goodput_draws(settings.threshold)[policy]
        assert len(draws) == 3 and draws[0] == result.live.goodputs(settings.threshold)[policy]
        expected = mean_goodput(draws)
        assert sim.goodputs(settings.threshold)[policy] == expected
        assert summary(result)["policies"][policy]["goodput_simulated"] == expected.value
    assert len({tuple(curve.trials) for curve in sim.every_draw("sarathi-edf")}) == 3
    text = report(result)
    assert "sim draws" in text and "live in draws" in text


def test_a_mean_goodput_is_exact_only_when_every_draw_is() -> None:
    assert mean_goodput([Goodput(2.0), Goodput(4.0)]) == Goodput(3.0)
    assert mean_goodput([Goodput(2.0), Goodput(1.5, "<"), Goodput(9.0, "≥")]) == Goodput(1.5, "<")
    with pytest.raises(ValueError):
        mean_goodput([])


def test_unknown_policies_fail_before_any_profiling(tmp_path: Path) -> None:
    live = LiveSettings("unused", out_dir=tmp_path)
    with pytest.raises(ValueError, match="nope"):
        validate(ValidationSettings(live), ["slidingserve", "nope"], None, tmp_path / "s.json")
    assert not (tmp_path / "s.json").exists()


def test_a_plan_over_the_budget_is_refused_before_any_live_server(tmp_path: Path) -> None:
    steps = linear_engine_steps(count=200)
    live = LiveSettings("unused", "mixed-v1", requests=400, repeats=5, out_dir=tmp_path)
    trials = StepTrials({"slidingserve": 1.0, "vllm:fcfs": 1.0})
    settings = ValidationSettings(live, budget_s=60.0)
    with pytest.raises(ValueError, match=r"predicted capacity .* --steps .*steps\.json\)$"):
        validate(settings, ["slidingserve"], steps, tmp_path / "steps.json", lambda _: None,
                 lambda _: trials)  # fmt: skip
    assert trials.runs == []
