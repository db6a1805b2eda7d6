"""The goodput experiment on a small setup: shapes, seeds, ordering, parallel = serial."""

from __future__ import annotations

import pytest

from slidingserve.eval.experiment import GoodputExperiment, run_experiment, task_count
from slidingserve.eval.goodput import SearchSettings
from slidingserve.eval.report import goodput_table

SMALL = GoodputExperiment(
    policies=("vllm", "sarathi"),
    workloads=("sharegpt",),
    seeds=(0, 1),
    num_requests=80,
    search=SearchSettings(precision=0.1),
    curve_points=3,
    jobs=1,
)


def test_rows_curves_and_progress_match_the_experiment() -> None:
    finished: list[int] = []
    result = run_experiment(SMALL, finished.append)
    # 2 policies × 2 seeds searched, and each of those on a 3-rate curve.
    assert sum(finished) == task_count(SMALL) == 2 * 2 + 2 * 2 * 3
    assert [(r.policy, r.workload) for r in result.rows] == [
        ("vllm", "sharegpt"),
        ("sarathi", "sharegpt"),
    ]
    for row in result.rows:
        assert len(row.per_seed) == 2
        assert row.goodput_mean == pytest.approx(sum(row.per_seed) / 2)
        assert 0 < row.goodput_mean < 2 * row.capacity_bound
        at = row.at_goodput  # what the runs at the goodput rates looked like
        assert 0 < at.tbt_p99 < 1.0
        assert at.cumulative_violation <= SMALL.search.threshold
        assert at.cumulative_violation <= at.per_gap_violation <= 1
    assert len(result.curve) == 12
    slo_bound = result.slo_bounds["sharegpt"]  # computed for the goodput table
    assert 0 < slo_bound.rate <= result.bounds["sharegpt"].rate * (1 + 1e-9)
    memory = result.memory_bounds["sharegpt"]  # and the memory-aware one
    assert 0 < memory.rate <= memory.compute == pytest.approx(result.bounds["sharegpt"].rate)
    header, _, line = goodput_table(result).splitlines()
    assert "bound / SLO-aware / memory" in header
    assert (
        f"{result.bounds['sharegpt'].rate:.2f} / {slo_bound.rate:.2f} / {memory.rate:.2f}" in line
    )
    for policy in SMALL.policies:  # every seed on the same rates
        points = [(p.seed, p.rate) for p in result.curve if p.policy == policy]
        rates = sorted({rate for _, rate in points})
        assert sorted(points) == [(seed, rate) for seed in SMALL.seeds for rate in rates]
    assert "sharegpt" in goodput_table(result)


def test_parallel_run_gives_the_serial_answer() -> None:
    serial = run_experiment(SMALL)
    parallel = run_experiment(GoodputExperiment(**{**SMALL.__dict__, "jobs": 2}))
    assert [r.per_seed for r in parallel.rows] == [r.per_seed for r in serial.rows]


def test_unknown_names_fail_before_any_run() -> None:
    with pytest.raises(ValueError, match="unknown workload"):
        GoodputExperiment(workloads=("chat",))
    with pytest.raises(ValueError, match="options given for policies not in the run"):
        GoodputExperiment(policies=("vllm",), policy_options={"sarathi": {"chunk_size": 64}})


def test_labelled_configurations_of_one_policy_are_compared_side_by_side() -> None:
    experiment = GoodputExperiment(
        policies=("sarathi", "sarathi#tiny"),
        workloads=("sharegpt",),
        seeds=(0,),
        num_requests=60,
        policy_options={"sarathi#tiny": {"chunk_size": 32}},
        search=SearchSettings(precision=0.1),
        curve_points=0,
        jobs=1,
    )
    rows = {row.policy: row for row in run_experiment(experiment).rows}
    # 32-token chunks take a 2,000-token prompt over 60 iterations: far lower goodput.
    assert rows["sarathi#tiny"].goodput_mean < 0.5 * rows["sarathi"].goodput_mean


def test_tier_criteria_give_a_row_each_and_the_worst_tier_is_the_strictest() -> None:
    from slidingserve.workloads import get_tier_mix

    experiment = GoodputExperiment(
        policies=("sarathi-edf",),
        workloads=("sharegpt",),
        seeds=(0,),
        num_requests=80,
        tiers=get_tier_mix("premium-standard"),
        criteria=("overall", "worst-tier", "tier:premium", "tier:standard"),
        search=SearchSettings(precision=0.05),
        curve_points=0,
        jobs=1,
    )
    goodput = {row.criterion: row.goodput_mean for row in run_experiment(experiment).rows}
    assert set(goodput) == set(experiment.criteria)
    assert goodput["worst-tier"] <= min(goodput["tier:premium"], goodput["tier:standard"]) * 1.05


def test_unknown_criteria_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown goodput criterion 'worst-tier'"):
        GoodputExperiment(criteria=("worst-tier",))  # no tiers


def test_the_reference_is_the_first_policy_when_sarathi_edf_does_not_run() -> None:
    assert SMALL.reference_policy == "vllm"
    assert GoodputExperiment(policies=("sarathi", "sarathi-edf")).reference_policy == "sarathi-edf"


def test_the_main_job_compares_qoserve_and_the_paper_s_algorithm_too() -> None:
    assert GoodputExperiment().policies == (
        "vllm",
        "sarathi",
        "sarathi-edf",
        "qoserve",
        "slidingserve-paper",
        "slidingserve",
    )
