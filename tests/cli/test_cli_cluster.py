"""`simulate` and `goodput` on a cluster: the flags and the [cluster] table, what is printed
and written, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import run_cli as run

from slidingserve.cli import settings as cfg
from slidingserve.sim.cluster import DEFAULT_ROUTER
from slidingserve.sim.hardware import HardwareConfig


def test_a_count_of_replicas_copies_the_hardware_table() -> None:
    settings = cfg.override(cfg.empty_settings(), "hardware", gpu="a40", model="llama-2-7b")
    settings = cfg.override(settings, "cluster", replicas=3)
    layout = cfg.cluster_layout(settings)
    assert layout is not None and layout.router == DEFAULT_ROUTER
    assert layout.replicas == (HardwareConfig("a40", "llama-2-7b"),) * 3


def test_hardware_points_make_a_mixed_cluster_with_the_hardware_tables_noise() -> None:
    settings = cfg.override(cfg.empty_settings(), "hardware", noise=0.05)
    settings = cfg.override(
        settings, "cluster", replicas="a100:llama-3-8b:1,a40:llama-3-8b:2", router="slo-aware"
    )
    layout = cfg.cluster_layout(settings)
    assert layout is not None and layout.router == "slo-aware"
    assert [(h.gpu, h.tp, h.noise) for h in layout.replicas] == [
        ("a100", 1, 0.05),
        ("a40", 2, 0.05),
    ]
    experiment = cfg.experiment_from(settings)
    assert experiment.cluster == layout and experiment.hardware == layout.replicas[0]


def test_without_replicas_there_is_no_cluster() -> None:
    assert cfg.cluster_layout(cfg.empty_settings()) is None


def test_a_config_file_names_the_cluster(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[cluster]\nreplicas = ["a100:llama-3-8b:1", "a100:llama-3-8b:1"]\n')
    layout = cfg.cluster_layout(cfg.load_settings(path))
    assert layout is not None and layout.size == 2


def test_simulate_on_a_cluster_prints_the_placements(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "runs.json"
    code, text, _ = run(
        capsys,
        "simulate", "--policy", "sarathi-edf", "--requests", "80", "--rate", "4",
        "--replicas", "2", "--router", "round-robin", "--out", str(out),
    )  # fmt: skip
    assert code == 0
    assert "cluster: 2 × a100:llama-3-8b:1 behind the round-robin router" in text
    assert "40/40" in text
    (row,) = json.loads(out.read_text())
    assert (row["replicas"], row["router"], row["requests_per_replica"]) == (
        2,
        "round-robin",
        "40/40",
    )
    assert row["refused_by_router"] == 0 and row["requests"] == 80


def test_simulate_without_a_cluster_has_no_cluster_fields(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "runs.json"
    code, text, _ = run(capsys, "simulate", "--requests", "20", "--out", str(out))
    assert code == 0 and "router" not in text
    assert "replicas" not in json.loads(out.read_text())[0]


def test_goodput_on_a_cluster_reports_per_replica_and_sums_the_bounds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    common = (
        "goodput", "--policies", "sarathi", "--workloads", "sharegpt", "--seeds", "1",
        "--precision", "0.2", "--jobs", "1", "--no-progress", "--curve-points", "0",
    )  # fmt: skip
    code, _, _ = run(capsys, *common, "--requests", "60", "--out-dir", str(tmp_path / "one"))
    assert code == 0
    code, text, _ = run(
        capsys, *common, "--requests", "120", "--replicas", "2",
        "--out-dir", str(tmp_path / "two"),
    )  # fmt: skip
    assert code == 0
    assert "goodput per replica (÷ 2)" in text
    one = json.loads((tmp_path / "one" / "goodput.json").read_text())
    two = json.loads((tmp_path / "two" / "goodput.json").read_text())
    assert "cluster" not in one["experiment"]
    assert two["experiment"]["cluster"]["size"] == 2
    bound_one = one["capacity_bounds"]["sharegpt"]["rate"]
    assert two["capacity_bounds"]["sharegpt"]["rate"] == pytest.approx(2 * bound_one)
    assert two["memory_aware_bounds"]["sharegpt"]["rate"] == pytest.approx(
        2 * one["memory_aware_bounds"]["sharegpt"]["rate"]
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--router", "slo-aware"], "a router needs a cluster"),
        (["simulate", "--replicas", "0"], "replicas must be at least 1"),
        (["simulate", "--replicas", "2", "--router", "random"], "unknown router 'random'"),
        (["simulate", "--replicas", "a100:llama-3-8b"], "a hardware point is GPU:MODEL:TP"),
        (
            ["simulate", "--replicas", "a100:llama-3-8b:1,a100:llama-2-7b:1"],
            "every replica must serve the same model",
        ),
        (
            ["goodput", "--replicas", "2", "--hardware", "a40:llama-3-8b:1"],
            "a cluster names its replicas' hardware in --replicas",
        ),
    ],
)
def test_bad_cluster_input_gets_a_clear_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err


@pytest.mark.parametrize("command", ["regimes", "diagnose", "predictor"])
def test_one_engine_commands_refuse_a_cluster_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[cluster]\nreplicas = 2\n")
    code, _, err = run(capsys, command, "--config", str(path))
    assert code == 2
    assert f"{command} runs one engine per hardware point" in err
