"""The committed JSON tables against the raw profiles, and the monotone curves built on them."""

from __future__ import annotations

import csv
from pathlib import Path
from statistics import median

import numpy as np
import pytest

from slidingserve.sim.hardware.catalog import load_model, load_table
from slidingserve.sim.hardware.optables import LAYER_OPS
from slidingserve.sim.hardware.profiles import (
    ReplicaOps,
    available_tp,
    builtin_profile,
    replica_ops,
)
from slidingserve.sim.hardware.tables import Curve, isotonic

PROFILES = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "profiles"
MODEL_DIRS = {"llama-3-8b": "Meta-Llama-3-8B", "llama-2-7b": "Llama-2-7b-hf"}


def read_csv(relative: str) -> list[dict[str, str]]:
    path = PROFILES / relative
    if not path.exists():
        pytest.skip(f"profile data absent: {path}")
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def csv_medians(model: str, tp: int, tokens: int) -> tuple[float, float]:
    """(per-layer op sum, emb) medians of the CSV rows at `tokens`, duplicates by median."""
    rows = [
        r
        for r in read_csv(f"a100/{MODEL_DIRS[model]}/mlp.csv")
        if int(r["num_tensor_parallel_workers"]) == tp and int(r["num_tokens"]) == tokens
    ]
    assert rows, (model, tp, tokens)
    layer = median(sum(float(r[f"time_stats.{op}.median"]) for op in LAYER_OPS) for r in rows)
    return layer, median(float(r["time_stats.emb.median"]) for r in rows)


def json_point(model: str, tp: int, tokens: int) -> tuple[float, float]:
    table = load_table(f"a100_{model}.json")["tp"][str(tp)]
    i = table["num_tokens"].index(tokens)
    return table["layer_ms"][i], table["ops"]["emb"][i]


def op_curves(model: str, tp: int) -> ReplicaOps:
    return replica_ops(builtin_profile("a100"), load_model(model), tp)


def all_reduce_ms(workers: int, sizes: object) -> np.ndarray:
    return builtin_profile("a100").all_reduce.ms(np.asarray(sizes, dtype=float), workers)


class TestTablesMatchProfiles:
    @pytest.mark.parametrize("model", ["llama-3-8b", "llama-2-7b"])
    @pytest.mark.parametrize("tp", [1, 2, 4, 8])
    @pytest.mark.parametrize("tokens", [1, 64, 512, 2048, 4096])
    def test_op_sums_are_csv_medians(self, model: str, tp: int, tokens: int) -> None:
        layer, emb = csv_medians(model, tp, tokens)
        assert json_point(model, tp, tokens) == pytest.approx((layer, emb), abs=1e-6)

    def test_llama3_grid_reaches_32k_tokens(self) -> None:
        layer, emb = csv_medians("llama-3-8b", 1, 32768)
        assert json_point("llama-3-8b", 1, 32768) == pytest.approx((layer, emb), abs=1e-6)

    @pytest.mark.parametrize("workers", [2, 4])
    @pytest.mark.parametrize("size", [8 * 2**20, 32 * 2**20, 256 * 2**20])
    def test_all_reduce_follows_csv_at_large_sizes(self, workers: int, size: int) -> None:
        near = [
            float(r["time_stats.all_reduce.median"])
            for r in read_csv("network/a100_pairwise_nvlink/all_reduce.csv")
            if int(r["num_workers"]) == workers and abs(int(r["size"]) / size - 1) < 0.03
        ]
        assert near
        assert float(all_reduce_ms(workers, size)) == pytest.approx(median(near), rel=0.05)


class TestReadmeFigures:
    """data/README.md: Σ medians × 32 layers, Llama-2-7B TP1."""

    @pytest.mark.parametrize(("tokens", "ms"), [(1, 9.3), (512, 33.4), (4096, 261.5)])
    def test_llama2_layer_sum(self, tokens: int, ms: float) -> None:
        layer, _ = json_point("llama-2-7b", 1, tokens)
        assert 32 * layer == pytest.approx(ms, rel=0.02)


class TestCurves:
    def test_isotonic_pools_violators(self) -> None:
        fitted = isotonic(np.array([1.0, 3.0, 2.0, 4.0, 0.0]))
        assert fitted.tolist() == pytest.approx([1.0, 2.25, 2.25, 2.25, 2.25])

    def test_isotonic_keeps_sorted_values(self) -> None:
        values = np.array([0.5, 0.5, 1.0, 7.0])
        assert isotonic(values).tolist() == values.tolist()

    def test_curve_extrapolates_linear_tail(self) -> None:
        curve = Curve.fit([1.0, 2.0, 4.0], [1.0, 2.0, 4.0])
        assert curve([0.0, 3.0, 8.0]).tolist() == pytest.approx([1.0, 3.0, 8.0])

    @pytest.mark.parametrize("model", ["llama-3-8b", "llama-2-7b"])
    @pytest.mark.parametrize("tp", [1, 2, 4, 8])
    def test_op_curves_monotone_on_every_token_count(self, model: str, tp: int) -> None:
        ops = op_curves(model, tp)
        tokens = np.arange(1, 40_000)
        assert np.all(np.diff(ops.layer_ms(tokens)) >= 0)
        assert np.all(np.diff(ops.emb_ms(tokens)) >= 0)

    @pytest.mark.parametrize("workers", [2, 4])
    def test_all_reduce_monotone(self, workers: int) -> None:
        sizes = np.geomspace(1e3, 1e9, 2000)
        assert np.all(np.diff(all_reduce_ms(workers, sizes)) >= 0)

    def test_monotone_fit_stays_near_the_data(self) -> None:
        table = load_table("a100_llama-3-8b.json")["tp"]["1"]
        raw = np.array(table["layer_ms"])
        fitted = op_curves("llama-3-8b", 1).layer_ms(table["num_tokens"])
        assert np.max(np.abs(fitted / raw - 1)) < 0.05

    def test_tp8_lacks_an_all_reduce_table(self) -> None:
        assert available_tp(builtin_profile("a100"), load_model("llama-3-8b")) == (1, 2, 4)
        with pytest.raises(ValueError, match="no all-reduce time for 8 GPUs"):
            all_reduce_ms(8, 1e6)

    def test_unknown_tp_for_op_table(self) -> None:
        with pytest.raises(ValueError, match="tp=3"):
            op_curves("llama-2-7b", 3)
