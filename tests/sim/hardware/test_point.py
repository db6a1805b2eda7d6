"""Hardware points: `GPU:MODEL:TP` as written, their one label and their folder name."""

from __future__ import annotations

import dataclasses

import pytest

from slidingserve.sim.hardware import (
    GroundTruthLatency,
    HardwareConfig,
    HardwarePoint,
    hardware_folder,
    hardware_label,
    parse_hardware,
)


def test_a_label_reads_back() -> None:
    point = parse_hardware("a100:llama-2-7b:2", HardwareConfig(noise=0.0))
    assert (point.model, point.tp, point.noise) == ("llama-2-7b", 2, 0.0)
    assert hardware_label(point) == "a100:llama-2-7b:2"
    assert parse_hardware(hardware_label(point), point) == point


@pytest.mark.parametrize(
    ("gpu", "model", "folder"),
    [
        ("a100", "llama-3-8b", "a100_llama-3-8b_tp2"),
        ("a100", "/home/me/Llama-3.1-8B/config.json", "a100_Llama-3.1-8B_tp2"),
        ("a100", "C:\\models\\qwen2\\config.json", "a100_qwen2_tp2"),
        ("a100", "configs/my model (v2).json", "a100_my_model_v2_tp2"),
        ("a100", "config.json", "a100_config_tp2"),
        ("a100", "meta-llama/Llama-3-8B", "a100_Llama-3-8B_tp2"),
        ("h100 sxm", "../..", "h100_sxm_unnamed_tp2"),
    ],
)
def test_a_hardware_folder_is_one_safe_name(gpu: str, model: str, folder: str) -> None:
    assert hardware_folder(HardwarePoint(gpu, model, 2)) == folder


def test_a_point_parses_to_its_parts_and_its_config() -> None:
    point = HardwarePoint.parse(" a100:llama-2-7b:2 ")
    assert point == HardwarePoint("a100", "llama-2-7b", 2)
    assert hardware_folder(point.config()) == hardware_folder(point) == "a100_llama-2-7b_tp2"
    with pytest.raises(ValueError, match="tp=3"):
        HardwarePoint.parse("a100:llama-3-8b:3").config()


def test_a_memory_share_is_part_of_the_point_its_label_and_its_folder() -> None:
    point = HardwarePoint.parse("a40:llama-2-7b:1:0.6")
    assert point == HardwarePoint("a40", "llama-2-7b", 1, 0.6)
    config = point.config(HardwareConfig(noise=0.0, gpu_memory_utilization=0.8))
    assert (config.gpu_memory_utilization, config.noise) == (0.6, 0.0)
    assert hardware_label(point) == hardware_label(config) == "a40:llama-2-7b:1:0.6"
    assert hardware_folder(point) == hardware_folder(config) == "a40_llama-2-7b_tp1_mem0.6"
    assert parse_hardware(hardware_label(config)) == dataclasses.replace(config, noise=0.02)


def test_without_a_memory_share_the_base_keeps_its_own_and_the_label_shows_it() -> None:
    assert hardware_label(parse_hardware("a40:llama-2-7b:1")) == "a40:llama-2-7b:1"
    cut = parse_hardware("a40:llama-2-7b:1", HardwareConfig(gpu_memory_utilization=0.5))
    assert cut.gpu_memory_utilization == 0.5
    assert hardware_label(cut) == "a40:llama-2-7b:1:0.5"
    default = HardwareConfig().gpu_memory_utilization
    assert hardware_label(HardwarePoint("a40", "llama-2-7b", 1, default)) == "a40:llama-2-7b:1"


def test_a_cut_memory_share_holds_fewer_kv_blocks() -> None:
    full = GroundTruthLatency(parse_hardware("a40:llama-2-7b:1")).kv_capacity_blocks(16)
    cut = GroundTruthLatency(parse_hardware("a40:llama-2-7b:1:0.6")).kv_capacity_blocks(16)
    assert 0.45 * full < cut < 0.55 * full


@pytest.mark.parametrize("share", ["0", "1.5", "-0.2", "nan", "x", ""])
def test_a_memory_share_outside_0_to_1_is_refused_with_the_form(share: str) -> None:
    with pytest.raises(ValueError, match=r"MEMORY .* in \(0, 1\].*GPU:MODEL:TP\[:MEMORY\]"):
        HardwarePoint.parse(f"a40:llama-2-7b:1:{share}")


def test_a_point_of_five_parts_is_refused() -> None:
    with pytest.raises(ValueError, match=r"GPU:MODEL:TP\[:MEMORY\]"):
        HardwarePoint.parse("a40:llama-2-7b:1:0.6:2")
