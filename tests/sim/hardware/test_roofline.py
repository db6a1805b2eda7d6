"""Roofline scaling of operator times to another model, and its check on the A100's two
measured models (the README's cross-model table)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from slidingserve.sim.hardware.catalog import load_model
from slidingserve.sim.hardware.crossmodel import cross_model_errors, overall_median
from slidingserve.sim.hardware.optables import ALL_OPS, OpGrid, OpShape, OpTable
from slidingserve.sim.hardware.profiles import (
    builtin_profile,
    dims_of,
    measured_table,
    replica_ops,
    source_table,
)
from slidingserve.sim.hardware.roofline import LayerDims, Roofline, nearest_table, scale_grid

LLAMA2 = OpShape(32, 32, 4096, 11008, 32000)


def tables() -> tuple[OpTable, OpTable]:
    llama3, llama2 = builtin_profile("a100").tables
    return llama3, llama2


class TestWork:
    def test_matmul_flops_and_bytes(self) -> None:
        dims = LayerDims.of_shape(LLAMA2)
        flops, moved = dims.work("mlp_down_proj", np.array([10.0]), 2)
        # (10 × 5504) · (5504 × 4096) on each of 2 GPUs
        assert flops[0] == 2 * 10 * 5504 * 4096
        assert moved[0] == 2 * (10 * 5504 + 5504 * 4096 + 10 * 4096)

    def test_qkv_width_follows_kv_heads(self) -> None:
        mha = LayerDims.of_shape(LLAMA2)
        gqa = LayerDims.of_shape(dataclasses.replace(LLAMA2, n_kv_head=8))
        one = np.array([1.0])
        # q + k + v: 3 × 4096 wide with 32 KV heads, 4096 + 2 × 1024 with 8
        ratio = gqa.work("attn_pre_proj", one, 1)[0] / mha.work("attn_pre_proj", one, 1)[0]
        assert ratio[0] == pytest.approx(6144 / 12288)

    def test_elementwise_ops_do_no_flops(self) -> None:
        flops, moved = LayerDims.of_shape(LLAMA2).work("add", np.array([4.0]), 1)
        assert flops[0] == 0 and moved[0] == 2 * 4 * 3 * 4096

    def test_unknown_op(self) -> None:
        with pytest.raises(ValueError, match="unknown operator 'attn'"):
            LayerDims.of_shape(LLAMA2).work("attn", np.ones(1), 1)


class TestRooflineFit:
    def test_recovers_a_synthetic_roofline(self) -> None:
        truth = Roofline(0.005, 1.5e11, 8e8)
        dims = LayerDims.of_shape(LLAMA2)
        tokens = (1, 8, 64, 256, 1024, 4096)
        array = np.array(tokens, dtype=np.float64)
        ops = {op: tuple(float(v) for v in truth(*dims.work(op, array, 1))) for op in ALL_OPS}
        grid = OpGrid(tokens, ops, tuple(np.sum([ops[op] for op in ALL_OPS[:-1]], axis=0)))
        fitted = Roofline.fit([OpTable("synthetic", LLAMA2, {1: grid})])
        assert fitted.launch_ms == pytest.approx(truth.launch_ms, rel=1e-3)
        assert fitted.flops_per_ms == pytest.approx(truth.flops_per_ms, rel=1e-3)
        assert fitted.bytes_per_ms == pytest.approx(truth.bytes_per_ms, rel=1e-3)

    def test_a100_fit_is_below_the_published_peaks(self) -> None:
        roofline = builtin_profile("a100").roofline
        assert 100 < roofline.flops_per_ms / 1e9 < 312  # TFLOP/s reached, of 312 peak
        assert 100 < roofline.bytes_per_ms / 1e6 < 2039  # GB/s reached, of 2,039
        assert 0 < roofline.launch_ms < 0.02

    def test_same_shape_scales_to_itself(self) -> None:
        llama3, _ = tables()
        dims = LayerDims.of_shape(llama3.shape)
        grid = llama3.grid(2)
        same = scale_grid(grid, 2, dims, dims, builtin_profile("a100").roofline)
        for op in ALL_OPS:
            assert same.ops[op] == pytest.approx(grid.ops[op], rel=1e-12)

    def test_more_work_never_takes_less_time(self) -> None:
        llama3, _ = tables()
        wider = dataclasses.replace(LayerDims.of_shape(llama3.shape), intermediate=2 * 14336)
        roofline = builtin_profile("a100").roofline
        scaled = scale_grid(llama3.grid(1), 1, LayerDims.of_shape(llama3.shape), wider, roofline)
        assert np.all(np.array(scaled.layer_ms) >= np.array(llama3.grid(1).layer_ms))


class TestCrossModel:
    """The issue's check: a model's operator times predicted from another's, median within
    10% of the measured ones in every TP degree and batch-size band."""

    @pytest.mark.parametrize("reverse", [False, True])
    def test_every_band_within_ten_percent(self, reverse: bool) -> None:
        llama3, llama2 = tables()
        source, target = (llama2, llama3) if reverse else (llama3, llama2)
        bands = cross_model_errors(source, target)
        assert {band.tp for band in bands} == {1, 2, 4, 8}
        assert all(band.count > 0 for band in bands)
        worst = max(bands, key=lambda band: band.median)
        assert worst.median < 0.10, worst

    @pytest.mark.parametrize("reverse", [False, True])
    def test_overall_median_within_five_percent(self, reverse: bool) -> None:
        llama3, llama2 = tables()
        source, target = (llama2, llama3) if reverse else (llama3, llama2)
        assert overall_median(source, target) < 0.05


class TestChoosingATable:
    def test_measured_shape_is_used_as_is(self) -> None:
        profile = builtin_profile("a100")
        table = measured_table(profile, load_model("llama-2-7b"))
        assert table is not None and table.label == "a100 Llama-2-7b-hf"
        assert replica_ops(profile, load_model("llama-2-7b"), 1).source.startswith(
            "operators measured"
        )

    def test_other_shapes_scale_from_the_nearest(self) -> None:
        profile = builtin_profile("a100")
        qwen = load_model("qwen2.5-7b")
        assert measured_table(profile, qwen) is None
        assert (
            source_table(profile, qwen).label == nearest_table(profile.tables, dims_of(qwen)).label
        )
        ops = replica_ops(profile, qwen, 2)
        assert ops.source.startswith("operators scaled from a100")
        tokens = np.arange(1, 8192)
        assert np.all(np.diff(ops.layer_ms(tokens)) >= 0)

    def test_qwen_on_a40_is_slower_than_on_a100(self) -> None:
        qwen = load_model("qwen2.5-7b")
        a100 = replica_ops(builtin_profile("a100"), qwen, 1).layer_ms(512)
        a40 = replica_ops(builtin_profile("a40"), qwen, 1).layer_ms(512)
        assert 1.5 < float(a40 / a100) < 3.0
