"""Decision records in simulations (`sim.runner.unrecorded_options`): nothing in a
simulation reads them, so a simulated policy keeps none unless asked, and keeping them
changes no decision."""

from __future__ import annotations

import dataclasses

from slidingserve.sim.runner import SimulationSpec, simulate_recorded, unrecorded_options
from slidingserve.workloads import WorkloadConfig


def test_simulations_keep_no_decision_records_unless_asked() -> None:
    plain = SimulationSpec("slidingserve", WorkloadConfig("sharegpt", 10))
    assert unrecorded_options(plain) == {"record_decisions": False}
    asked = dataclasses.replace(plain, policy_options={"record_decisions": True, "window": 1})
    assert unrecorded_options(asked) == {"record_decisions": True, "window": 1}
    baseline = SimulationSpec("sarathi-edf", WorkloadConfig("sharegpt", 10))
    assert unrecorded_options(baseline) == {}  # no records to turn off


def test_recording_decisions_changes_no_token_time() -> None:
    workload = WorkloadConfig("sharegpt", 150)
    runs = [
        simulate_recorded(
            SimulationSpec("slidingserve", workload, policy_options={"record_decisions": r}),
            3.0,
            0,
        )
        for r in (True, False)
    ]
    recorded, plain = ([r.token_times for r in run.run.requests] for run in runs)
    assert recorded == plain
    assert runs[0].result.metrics == runs[1].result.metrics
