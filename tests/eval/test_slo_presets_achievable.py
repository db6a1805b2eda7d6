"""docs/evaluation.md: at 10% of capacity every policy meets at least 99.9% of the strict SLOs."""

from __future__ import annotations

import pytest

from slidingserve.core import EngineLimits
from slidingserve.eval.capacity import capacity_bound
from slidingserve.policies import POLICIES
from slidingserve.sim.hardware import HardwareConfig
from slidingserve.sim.runner import SimulationSpec, simulate
from slidingserve.workloads import WORKLOADS, WorkloadConfig


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_strict_slos_are_met_at_a_tenth_of_capacity(workload: str) -> None:
    config = WorkloadConfig(workload, 1000)
    bound = capacity_bound(config, HardwareConfig(), EngineLimits())
    for policy in POLICIES:
        result = simulate(SimulationSpec(policy, config), 0.1 * bound.rate, seed=7)
        assert result.violations.overall <= 0.001, policy
