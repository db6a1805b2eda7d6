"""`benchmarks/design_ablation.py`: every row is a valid configuration that changes the
design, and the script prints one row per policy."""

from __future__ import annotations

import runpy
from typing import Any

import pytest
from factories import BENCHMARKS, run_benchmark

from slidingserve.policies.slidingserve import DESIGN, compose

SCRIPT = BENCHMARKS / "design_ablation.py"


def script() -> dict[str, Any]:
    return runpy.run_path(str(SCRIPT))


def test_every_row_changes_one_thing_of_the_design_and_builds() -> None:
    without = script()["WITHOUT"]
    for label, change in without.items():
        assert change, label
        assert compose(DESIGN, change) != DESIGN, label


def test_the_table_has_a_row_per_policy(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--workloads", "sharegpt", "--slo-scales", "2", "--seeds", "2", "--requests", "40"]
    argv += ["--precision", "0.2", "--jobs", "1"]
    lines = run_benchmark(SCRIPT.name, monkeypatch, capsys, *argv)
    names = [
        line.split()[0] for line in lines if line.startswith(("slidingserve", "sarathi", "qo"))
    ]
    expected = 1 + len(script()["WITHOUT"]) + len(script()["OTHERS"])
    assert len(names) == expected
    design_row = next(line for line in lines if line.split()[:1] == ["slidingserve"])
    assert "1.00" in design_row  # the design against itself
