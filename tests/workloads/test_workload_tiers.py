"""SLO tiers: assignment, SLOs, independence from the other random streams."""

from __future__ import annotations

import numpy as np
import pytest

from slidingserve.core import SLO
from slidingserve.eval.criteria import violation_for
from slidingserve.metrics import measure_tiers
from slidingserve.sim.runner import SimulationSpec, simulate
from slidingserve.workloads import (
    Tier,
    TierMix,
    WorkloadConfig,
    generate_requests,
    get_tier_mix,
)

TWO_TIERS = TierMix(
    (
        Tier("gold", weight=1.0, ttft_factor=0.5, protected=True),
        Tier("bronze", weight=3.0, ttft=10.0, tbt=0.2),
    )
)


def test_tier_slo_scales_the_class_slo_unless_given_in_seconds() -> None:
    chat = SLO(2.0, 0.05)
    gold, bronze = TWO_TIERS.tiers
    assert gold.slo(chat) == SLO(1.0, 0.05, protected=True, tier="gold")
    assert bronze.slo(chat) == SLO(10.0, 0.2, protected=False, tier="bronze")


def test_fixed_assignment_deals_the_exact_mix_evenly() -> None:
    mix = TierMix(TWO_TIERS.tiers, assignment="fixed")
    pattern = mix.assign(8, np.random.default_rng(0)).tolist()
    assert pattern.count(0) == 2 and pattern.count(1) == 6
    assert pattern[:4].count(0) == 1  # spread out, not bunched


def test_random_assignment_follows_the_weights() -> None:
    picks = TWO_TIERS.assign(20_000, np.random.default_rng(1))
    assert np.mean(picks == 0) == pytest.approx(0.25, abs=0.01)


def test_tiers_leave_lengths_and_arrivals_unchanged() -> None:
    plain = generate_requests(WorkloadConfig("mixed-v1", 200), 2.0, 5, 8192)
    tiered = generate_requests(WorkloadConfig("mixed-v1", 200, tiers=TWO_TIERS), 2.0, 5, 8192)
    assert [(r.arrival, r.prompt_len, r.output_len) for r in plain] == [
        (r.arrival, r.prompt_len, r.output_len) for r in tiered
    ]
    assert {r.slo.tier for r in tiered} == {"gold", "bronze"}
    gold = [r for r in tiered if r.slo.tier == "gold"]
    assert all(r.protected for r in gold)
    # Gold halves each request's class TTFT: 1 s for chat, 3 s for summarisation.
    assert {r.slo.ttft for r in gold} <= {1.0, 3.0}


def test_bad_tiers_are_rejected() -> None:
    with pytest.raises(ValueError, match="distinct"):
        TierMix((Tier("a"), Tier("a")))
    with pytest.raises(ValueError, match="weight"):
        Tier("a", weight=0.0)
    with pytest.raises(ValueError, match="ttft"):
        Tier("a", ttft=-1.0)
    with pytest.raises(ValueError, match="unknown tier preset"):
        get_tier_mix("platinum")


def test_per_tier_metrics_and_goodput_criteria() -> None:
    workload = WorkloadConfig("sharegpt", 120, tiers=get_tier_mix("premium-standard"))
    result = simulate(SimulationSpec("sarathi-edf", workload), 2.6, 0)
    assert set(result.tiers) == {"premium", "standard"}
    assert sum(m.requests for m in result.tiers.values()) == 120
    worst = violation_for(result, "worst-tier")
    assert worst == max(m.cumulative.overall for m in result.tiers.values())
    assert violation_for(result, "tier:premium") == result.tiers["premium"].cumulative.overall
    with pytest.raises(ValueError, match="unknown goodput criterion"):
        violation_for(result, "tier:gold")


def test_criteria_other_than_overall_need_tiers() -> None:
    result = simulate(SimulationSpec("sarathi", WorkloadConfig("sharegpt", 20)), 1.0, 0)
    assert measure_tiers([], 1.0) == {}
    with pytest.raises(ValueError, match="needs a workload with SLO tiers"):
        violation_for(result, "worst-tier")
