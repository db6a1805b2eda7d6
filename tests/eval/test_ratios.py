"""Per-seed goodput ratios and their intervals, on hand-worked numbers."""

from __future__ import annotations

import dataclasses
import math

import pytest

from slidingserve.eval.experiment import (
    AtGoodput,
    ExperimentResult,
    GoodputExperiment,
    GoodputRow,
)
from slidingserve.eval.ratios import (
    best_static_ratios,
    compared_families,
    difference_interval,
    goodput_ratios,
    per_seed_ratios,
    ratio_interval,
    static_families,
)
from slidingserve.eval.report import at_goodput_table, best_static_table, ratio_table

T_975_2 = 4.302652729911275  # Student t, 97.5% quantile, 2 degrees of freedom


def test_interval_of_three_ratios() -> None:
    # Mean 1.1, sample std 0.1: half-width 4.3027 × 0.1 / √3 = 0.2484.
    interval = ratio_interval([1.0, 1.2, 1.1])
    assert interval.mean == pytest.approx(1.1)
    assert interval.low == pytest.approx(1.1 - T_975_2 * 0.1 / math.sqrt(3))
    assert interval.high == pytest.approx(1.1 + T_975_2 * 0.1 / math.sqrt(3))
    assert not interval.significant
    assert interval.format() == "1.10 [0.85, 1.35]"


@pytest.mark.parametrize(
    ("ratios", "significant"),
    [
        ([1.10, 1.12, 1.11], True),  # above 1
        ([0.90, 0.92, 0.91], True),  # below 1
        ([0.99, 1.03, 1.01], False),  # straddles 1
        ([1.0, 1.0, 1.0], False),  # identical: [1, 1] does not exclude 1
    ],
)
def test_a_difference_is_real_only_when_the_interval_excludes_one(
    ratios: list[float], significant: bool
) -> None:
    interval = ratio_interval(ratios)
    assert interval.significant is significant
    assert interval.format().endswith(" *") is significant


def test_a_bound_next_to_one_shows_which_side_it_is_on() -> None:
    interval = ratio_interval([0.93, 0.95, 0.94])  # high = 0.94 + 4.303 × 0.01 / √3 = 0.9648
    assert interval.format() == "0.94 [0.92, 0.96] *"
    # Mean 0.991, std 0.002: high = 0.991 + 4.303 × 0.002 / √3 = 0.99597, which "1.00"
    # would show on the wrong side of 1.
    near = ratio_interval([0.989, 0.991, 0.993])
    assert near.format() == "0.991 [0.986, 0.996] *"


def test_interval_of_three_differences() -> None:
    # Mean 0.02, sample std 0.01: half-width 4.3027 × 0.01 / √3 = 0.02484, so it spans 0.
    interval = difference_interval([0.01, 0.03, 0.02])
    assert interval.mean == pytest.approx(0.02)
    assert interval.high == pytest.approx(0.02 + T_975_2 * 0.01 / math.sqrt(3))
    assert not interval.significant
    assert interval.format() == "+0.020 [-0.005, +0.045]"
    below = difference_interval([-0.05, -0.06, -0.04])  # high −0.05 + 0.0248 < 0
    assert below.significant and below.format() == "-0.050 [-0.075, -0.025] *"
    assert difference_interval([0.0, 0.0, 0.0]).significant is False  # zero excludes nothing
    assert difference_interval([0.3]).format() == "+0.300"
    assert difference_interval([]).format() == "n/a"


def test_one_seed_has_no_interval() -> None:
    interval = ratio_interval([1.3])
    assert interval.mean == 1.3 and math.isnan(interval.low) and not interval.significant
    assert interval.format() == "1.30 [n=1]"
    assert ratio_interval([]).format() == "n/a"


def test_seeds_where_the_reference_failed_are_left_out() -> None:
    assert per_seed_ratios([2.0, 1.0, 3.0], [1.0, 0.0, 2.0]) == [2.0, 1.5]
    with pytest.raises(ValueError, match="2 values against 3"):
        per_seed_ratios([1.0, 2.0], [1.0, 1.0, 1.0])


def _row(policy: str, per_seed: tuple[float, ...]) -> GoodputRow:
    nan = AtGoodput(math.nan, math.nan, math.nan)
    mean = sum(per_seed) / len(per_seed)
    return GoodputRow(policy, "sharegpt", "overall", mean, 0.0, mean, per_seed, 3.0, 0, nan)


def test_ratios_pair_the_same_seeds_of_each_policy() -> None:
    experiment = GoodputExperiment(
        policies=("sarathi-edf", "qoserve", "slidingserve"), workloads=("sharegpt",)
    )
    rows = [
        _row("sarathi-edf", (2.0, 2.2, 2.4)),
        _row("qoserve", (2.2, 2.2, 2.4)),  # 1.1, 1.0, 1.0
        _row("slidingserve", (1.8, 1.98, 2.16)),  # 0.9 on every seed
    ]
    result = ExperimentResult(experiment, {}, rows, [])
    ratios = {r.policy: r.interval for r in goodput_ratios(result, "sarathi-edf")}
    assert ratios["qoserve"].per_seed == pytest.approx((1.1, 1.0, 1.0))
    assert not ratios["qoserve"].significant
    assert ratios["slidingserve"].mean == pytest.approx(0.9)
    # Zero spread: only the search's 2% resolution is left, 0.9 / 1.02 .. 0.9 × 1.02.
    assert ratios["slidingserve"].significant
    table = ratio_table(result)
    assert "0.90 [0.88, 0.92] *" in table and "sarathi-edf" not in table.splitlines()[0]
    with pytest.raises(ValueError, match="reference policy 'vllm' is not in the run"):
        goodput_ratios(result, "vllm")


def test_identical_ratios_are_known_only_to_the_search_resolution() -> None:
    # Three seeds on the same grid rates: 0.99 each. A t-interval would be [0.99, 0.99]
    # and "significant"; at 2% precision the ratio is only known within × / ÷ 1.02.
    interval = ratio_interval([0.99, 0.99, 0.99], resolution=0.02)
    assert interval.low == pytest.approx(0.99 / 1.02)
    assert interval.high == pytest.approx(0.99 * 1.02)
    assert not interval.significant
    far = ratio_interval([0.83, 0.83], resolution=0.02)  # still clearly below 1
    assert far.high == pytest.approx(0.8466) and far.significant


def test_a_wide_t_interval_is_not_narrowed_by_the_resolution() -> None:
    wide = ratio_interval([1.0, 1.2, 1.1], resolution=0.02)
    assert wide.low == pytest.approx(1.1 - T_975_2 * 0.1 / math.sqrt(3))


def test_the_resolution_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match="resolution must be in"):
        ratio_interval([1.0, 1.0], resolution=1.5)


def _workload_row(policy: str, workload: str, per_seed: tuple[float, ...]) -> GoodputRow:
    return dataclasses.replace(_row(policy, per_seed), workload=workload)


def test_the_best_static_setting_is_picked_per_workload() -> None:
    policies = ("sarathi-edf#256", "sarathi-edf", "qoserve", "slidingserve")
    experiment = GoodputExperiment(policies=policies, workloads=("sharegpt", "arxiv"))
    rows = [
        # ShareGPT: 512 is best; arXiv: 256 is.
        _workload_row("sarathi-edf#256", "sharegpt", (1.0, 1.0, 1.0)),
        _workload_row("sarathi-edf", "sharegpt", (2.0, 2.0, 2.0)),
        _workload_row("qoserve", "sharegpt", (2.2, 2.2, 2.2)),
        _workload_row("slidingserve", "sharegpt", (2.4, 2.4, 2.4)),
        _workload_row("sarathi-edf#256", "arxiv", (4.0, 4.0, 4.0)),
        _workload_row("sarathi-edf", "arxiv", (3.0, 3.0, 3.0)),
        _workload_row("qoserve", "arxiv", (3.6, 3.6, 3.6)),
        _workload_row("slidingserve", "arxiv", (4.0, 4.4, 4.8)),
    ]
    result = ExperimentResult(experiment, {}, rows, [])
    assert static_families(policies) == {"sarathi-edf": ["sarathi-edf#256", "sarathi-edf"]}
    ratios = {(r.policy, r.workload): r for r in best_static_ratios(result, "sarathi-edf")}
    assert set(ratios) == {
        (p, w) for p in ("qoserve", "slidingserve") for w in ("sharegpt", "arxiv")
    }
    assert ratios["slidingserve", "sharegpt"].reference == "sarathi-edf"
    assert ratios["slidingserve", "sharegpt"].interval.mean == pytest.approx(1.2)
    assert ratios["slidingserve", "arxiv"].reference == "sarathi-edf#256"
    assert ratios["slidingserve", "arxiv"].interval.per_seed == pytest.approx((1.0, 1.1, 1.2))
    assert ratios["qoserve", "arxiv"].interval.mean == pytest.approx(0.9)
    table = best_static_table(result, "sarathi-edf")
    assert "sarathi-edf*" in table.splitlines()[0]
    assert "sarathi-edf#256" in table.splitlines()[3]  # arXiv's row names its best setting
    with pytest.raises(ValueError, match="fewer than two labels"):
        best_static_ratios(result, "qoserve")


def test_a_family_alone_has_no_best_setting_table() -> None:
    alone = ("slidingserve", "slidingserve#cap")
    assert static_families(alone) == {"slidingserve": list(alone)}
    assert compared_families(alone) == []
    assert compared_families((*alone, "qoserve")) == ["slidingserve"]


def test_preemptions_at_the_goodput_are_averaged_over_the_seeds_that_passed() -> None:
    nan = math.nan
    runs = [
        AtGoodput(0.06, 0.01, 0.02, nan, 3.0),
        AtGoodput(0.08, 0.00, 0.04, nan, 6.0),
        AtGoodput(nan, nan, nan),  # no rate passed on this seed
    ]
    mean = AtGoodput.mean(runs)
    assert mean.preemptions == pytest.approx(4.5) and mean.tbt_p99 == pytest.approx(0.07)
    assert math.isnan(AtGoodput.mean(runs[2:]).preemptions)


def test_the_at_goodput_table_names_preemptions_only_where_there_were_any() -> None:
    experiment = GoodputExperiment(
        policies=("sarathi-edf", "slidingserve"), workloads=("sharegpt",)
    )
    calm = AtGoodput(0.061, 0.0, 0.012, math.nan, 0.0)
    thrashing = AtGoodput(0.072, 0.0, 0.025, math.nan, 4.5)
    rows = [
        dataclasses.replace(_row("sarathi-edf", (2.0,)), at_goodput=calm),
        dataclasses.replace(_row("slidingserve", (2.2,)), at_goodput=thrashing),
    ]
    table = at_goodput_table(ExperimentResult(experiment, {}, rows, []))
    assert "61 ms (1.2%)" in table and "72 ms (2.5%, 4.5 preempted)" in table
    assert table.count("preempted") == 1
