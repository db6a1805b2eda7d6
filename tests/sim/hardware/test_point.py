"""Hardware points: `GPU:MODEL:TP` as written, their one label and their folder name."""

from __future__ import annotations

import pytest

from slidingserve.sim.hardware import (
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
