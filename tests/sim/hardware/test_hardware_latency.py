"""Ground-truth latency model: composition, monotonicity, TP, noise, fast-forward, memory."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.core.batch import BatchShape
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig, load_model
from slidingserve.sim.hardware.profiles import ReplicaOps, builtin_profile, replica_ops


def op_curves(model: str, tp: int) -> ReplicaOps:
    return replica_ops(builtin_profile("a100"), load_model(model), tp)


ATTENTION_CSV = (
    Path(__file__).resolve().parents[3].parent
    / "shared/data/profiles/a100/Llama-2-7b-hf/attention_observed.csv"
)


def make_latency(
    model: str = "llama-3-8b", tp: int = 1, noise: float = 0.0, seed: int = 0
) -> GroundTruthLatency:
    return GroundTruthLatency(HardwareConfig(model=model, tp=tp, noise=noise), seed=seed)


def decodes(count: int, context: int) -> BatchShape:
    return BatchShape(decode_contexts=(context,) * count, prefill_chunks=())


def prefill(chunk: int, cached: int = 0) -> BatchShape:
    return BatchShape(decode_contexts=(), prefill_chunks=((chunk, cached),))


@pytest.fixture(scope="module")
def llama3() -> GroundTruthLatency:
    return make_latency()


shapes = st.builds(
    BatchShape,
    st.lists(st.integers(0, 8192), max_size=300).map(tuple),
    st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 8192)), max_size=4).map(tuple),
)


class TestComposition:
    def test_decode_only_is_ops_plus_attention_plus_overhead(
        self, llama3: GroundTruthLatency
    ) -> None:
        ops = op_curves("llama-3-8b", 1)
        # Llama-3-8B has 8 of the reference's 32 KV heads: decode attention terms × 1/4.
        attention_ms = 32 * (0.008 + 0.25 * (0.00105 * 64 + 8.84e-6 * 64 * 2048))
        ops_ms = 32 * float(ops.layer_ms(64)) + float(ops.emb_ms(64))
        expected = (attention_ms + ops_ms) / 1000 + 0.003
        assert llama3.expected_time(decodes(64, 2048)) == pytest.approx(expected, rel=1e-9)

    def test_prefill_chunk_attention(self, llama3: GroundTruthLatency) -> None:
        attention_ms = 32 * (0.064 + 1.53e-7 * 512 * 1024 + 1.55e-7 * 512**2)
        attention = llama3.expected_time(prefill(512, 1024)) - llama3.expected_time(prefill(512))
        assert attention + 32 * (0.064 + 1.55e-7 * 512**2) / 1000 == pytest.approx(
            attention_ms / 1000, rel=1e-9
        )

    def test_empty_batch_costs_cpu_overhead_only(self, llama3: GroundTruthLatency) -> None:
        assert llama3.expected_time(BatchShape((), ())) == pytest.approx(0.003)

    def test_realistic_magnitudes(self, llama3: GroundTruthLatency) -> None:
        # vLLM on an A100 runs a small Llama-3-8B decode batch in ~10-15 ms.
        assert 0.010 < llama3.expected_time(decodes(1, 2048)) < 0.016
        assert 0.020 < llama3.expected_time(decodes(64, 2048)) < 0.035
        assert 0.090 < llama3.expected_time(prefill(2048)) < 0.200

    def test_beyond_table_extrapolates_linearly(self, llama3: GroundTruthLatency) -> None:
        top = llama3.max_table_tokens
        t = llama3.non_attention_time(np.array([top - 4096, top, top + 4096]))
        assert t[2] - t[1] == pytest.approx(t[1] - t[0], rel=0.05)
        assert llama3.expected_time(prefill(top + 4096)) > llama3.expected_time(prefill(top))


class TestMonotone:
    @pytest.mark.parametrize(
        ("model", "tp"), [("llama-3-8b", 1), ("llama-3-8b", 2), ("llama-2-7b", 4)]
    )
    def test_non_attention_never_decreases(self, model: str, tp: int) -> None:
        times = make_latency(model, tp).non_attention_time(np.arange(0, 40_000))
        assert np.all(np.diff(times) >= 0)

    @settings(max_examples=60, deadline=None)
    @given(shape=shapes, context=st.integers(0, 8192))
    def test_adding_a_decode_costs_time(self, shape: BatchShape, context: int) -> None:
        model = make_latency()
        more = BatchShape((*shape.decode_contexts, context), shape.prefill_chunks)
        assert model.expected_time(more) > model.expected_time(shape)

    @settings(max_examples=60, deadline=None)
    @given(shape=shapes, chunk=st.integers(1, 2048), cached=st.integers(0, 4096))
    def test_adding_a_prefill_chunk_costs_time(
        self, shape: BatchShape, chunk: int, cached: int
    ) -> None:
        model = make_latency()
        more = BatchShape(shape.decode_contexts, (*shape.prefill_chunks, (chunk, cached)))
        assert model.expected_time(more) > model.expected_time(shape)

    @settings(max_examples=60, deadline=None)
    @given(shape=shapes)
    def test_longer_contexts_cost_time(self, shape: BatchShape) -> None:
        model = make_latency()
        longer = BatchShape(
            tuple(u + 100 for u in shape.decode_contexts),
            tuple((c, u + 100) for c, u in shape.prefill_chunks),
        )
        assert model.expected_time(longer) >= model.expected_time(shape)


class TestAttention:
    def test_llama2_decode_is_the_readme_fit(self) -> None:
        b, k = np.array([1, 32, 128]), np.array([32, 80_000, 319_488])
        readme_ms = 32 * (0.0080 + 0.00105 * b + 8.84e-6 * k)
        got = make_latency("llama-2-7b").decode_attention_time(b, k)
        assert got == pytest.approx(readme_ms / 1000, rel=1e-9)

    def test_llama3_decode_scales_by_kv_heads(self) -> None:
        b, k = np.array([1, 32, 128]), np.array([32, 80_000, 319_488])
        launch = 32 * 0.0080 / 1000
        llama2 = make_latency("llama-2-7b").decode_attention_time(b, k) - launch
        llama3 = make_latency("llama-3-8b").decode_attention_time(b, k) - launch
        assert llama3 == pytest.approx(llama2 * 8 / 32, rel=1e-9)

    def test_prefill_same_for_equal_query_heads(self) -> None:
        c, u = np.array([64, 512, 4096]), np.array([0, 1024, 4096])
        llama2 = make_latency("llama-2-7b").prefill_attention_time(c, u)
        assert make_latency("llama-3-8b").prefill_attention_time(c, u) == pytest.approx(llama2)

    def test_no_work_no_attention(self, llama3: GroundTruthLatency) -> None:
        assert llama3.decode_attention_time(0, 0) == 0.0
        assert llama3.prefill_attention_time(0, 100) == 0.0

    def test_fits_reproduce_observed_rows(self) -> None:
        if not ATTENTION_CSV.exists():
            pytest.skip(f"profile data absent: {ATTENTION_CSV}")
        model = make_latency("llama-2-7b")
        with ATTENTION_CSV.open(newline="") as file:
            for row in csv.DictReader(file):
                b, c, u = (
                    int(row[k]) for k in ("batch_size", "prefill_chunk_size", "kv_cache_size")
                )
                if row["kind"] == "decode":
                    got, tolerance = model.decode_attention_time(b, b * u), 0.25
                else:
                    got, tolerance = model.prefill_attention_time(c, u), 0.10
                assert float(got) * 1000 / 32 == pytest.approx(
                    float(row["median_ms"]), rel=tolerance
                )


class TestTensorParallel:
    def test_tp2_adds_two_all_reduces_per_layer(self) -> None:
        tp2 = make_latency(tp=2)
        ops = op_curves("llama-3-8b", 2)
        tokens = np.array([1, 512, 4096])
        compute_ms = 32 * ops.layer_ms(tokens) + ops.emb_ms(tokens)
        all_reduce_ms = 32 * 2 * builtin_profile("a100").all_reduce.ms(tokens * 4096 * 2.0, 2)
        expected = (compute_ms + all_reduce_ms) / 1000 + 0.003
        assert tp2.non_attention_time(tokens) == pytest.approx(expected, rel=1e-9)
        assert np.all(all_reduce_ms > 32 * 2 * 0.01)

    def test_tp2_halves_attention_work(self) -> None:
        tp1, tp2 = make_latency(tp=1), make_latency(tp=2)
        launch = 32 * 0.0080 / 1000
        one = tp1.decode_attention_time(64, 64 * 2048) - launch
        two = tp2.decode_attention_time(64, 64 * 2048) - launch
        assert two == pytest.approx(one / 2)
        assert tp2.prefill_attention_time(2048, 0) < tp1.prefill_attention_time(2048, 0)

    def test_tp2_faster_on_large_batches(self) -> None:
        tp1, tp2 = make_latency(tp=1), make_latency(tp=2)
        assert tp2.expected_time(prefill(4096)) < 0.6 * tp1.expected_time(prefill(4096))


class TestNoise:
    def test_same_seed_same_sequence(self) -> None:
        a, b = make_latency(noise=0.05, seed=7), make_latency(noise=0.05, seed=7)
        shape = decodes(16, 1000)
        assert [a.sample_time(shape) for _ in range(5000)] == [
            b.sample_time(shape) for _ in range(5000)
        ]

    def test_different_seed_different_sequence(self) -> None:
        a, b = make_latency(noise=0.05, seed=1), make_latency(noise=0.05, seed=2)
        shape = decodes(16, 1000)
        assert [a.sample_time(shape) for _ in range(10)] != [
            b.sample_time(shape) for _ in range(10)
        ]

    def test_factor_mean_one_and_std_noise(self) -> None:
        model = make_latency(noise=0.1, seed=3)
        shape = decodes(16, 1000)
        ratios = np.array([model.sample_time(shape) for _ in range(20_000)])
        ratios /= model.expected_time(shape)
        assert ratios.mean() == pytest.approx(1.0, abs=0.003)
        assert ratios.std() == pytest.approx(0.1, rel=0.05)
        assert ratios.min() >= 0.5

    def test_zero_noise_is_expected_time(self, llama3: GroundTruthLatency) -> None:
        shape = decodes(8, 100)
        assert llama3.sample_time(shape) == llama3.expected_time(shape)


class TestDecodeRun:
    def test_agrees_with_expected_time(self, llama3: GroundTruthLatency) -> None:
        times = llama3.decode_run_times(32, 32 * 500, steps=50)
        expected = [llama3.expected_time(decodes(32, 500 + j)) for j in range(50)]
        assert times.tolist() == pytest.approx(expected, rel=1e-12)

    def test_same_noise_stream_as_sample_time(self) -> None:
        # 5000 steps cross a noise-block boundary.
        a, b = make_latency(noise=0.05, seed=11), make_latency(noise=0.05, seed=11)
        a.sample_time(decodes(1, 1))
        b.sample_time(decodes(1, 1))
        run = a.decode_run_times(4, 4 * 10, steps=5000)
        one_by_one = [b.sample_time(decodes(4, 10 + j)) for j in range(5000)]
        assert run.tolist() == pytest.approx(one_by_one, rel=1e-12)

    def test_only_consumed_noise_is_used_up(self) -> None:
        # Look at 3000 steps, run 1000: the next sample is what step 1001 would have drawn.
        a, b = make_latency(noise=0.05, seed=5), make_latency(noise=0.05, seed=5)
        a.decode_run_times(4, 40, steps=3000)
        a.consume_noise(1000)
        for j in range(1000):
            b.sample_time(decodes(4, 10 + j))
        assert a.sample_time(decodes(2, 7)) == b.sample_time(decodes(2, 7))

    def test_cannot_consume_unseen_noise(self) -> None:
        latency = make_latency(noise=0.05)
        latency.decode_run_times(1, 0, steps=3)
        with pytest.raises(ValueError, match="consume"):
            latency.consume_noise(5000)

    def test_zero_steps(self, llama3: GroundTruthLatency) -> None:
        assert llama3.decode_run_times(4, 0, steps=0).shape == (0,)

    @pytest.mark.parametrize(("b", "kv", "steps"), [(0, 0, 1), (1, -1, 1), (1, 0, -1)])
    def test_rejects_bad_arguments(self, b: int, kv: int, steps: int) -> None:
        with pytest.raises(ValueError, match="num_decodes >= 1"):
            make_latency().decode_run_times(b, kv, steps)


class TestKVCapacity:
    def test_llama3_on_a100_by_hand(self, llama3: GroundTruthLatency) -> None:
        # 0.9 × 80 GiB = 77,309,411,328 B; weights 8,030,261,248 × 2 = 16,060,522,496 B;
        # reserve 2 GiB = 2,147,483,648 B; left 59,101,405,184 B.
        # A 16-token block: 16 × 131,072 B = 2,097,152 B → 28,181.6 blocks (≈ 451k tokens).
        assert llama3.kv_capacity_blocks(16) == 28_181

    def test_tp2_holds_more_than_twice(self) -> None:
        # Per GPU: 77,309,411,328 − 8,030,261,248 − 2,147,483,648 = 67,131,666,432 B, and a
        # 16-token block takes half of 2 MiB on each GPU → 64,021.6 blocks.
        assert make_latency(tp=2).kv_capacity_blocks(16) == 64_021

    def test_block_size_scales_inversely(self, llama3: GroundTruthLatency) -> None:
        assert llama3.kv_capacity_blocks(32) == llama3.kv_capacity_blocks(16) // 2

    def test_rejects_bad_block_size(self, llama3: GroundTruthLatency) -> None:
        with pytest.raises(ValueError, match="block_size"):
            llama3.kv_capacity_blocks(0)

    def test_model_that_does_not_fit(self) -> None:
        model = GroundTruthLatency(HardwareConfig(gpu_memory_utilization=0.2))
        with pytest.raises(ValueError, match="does not fit"):
            model.kv_capacity_blocks(16)


class TestConfig:
    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"noise": -0.01}, "noise"),
            ({"noise": 0.5}, "noise"),
            ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization"),
            ({"gpu_memory_utilization": 1.01}, "gpu_memory_utilization"),
            ({"tp": 3}, "tp=3 does not divide llama-3-8b's 8 KV heads"),
            ({"tp": 8}, "tp=8 unsupported"),
            ({"tp": 0}, "tp=0 unsupported"),
            ({"model": "gpt-5"}, "known: .*llama-3-8b"),
            ({"gpu": "h100"}, r"known: \['a100', 'a40', 'a40-pcie'\]"),
        ],
    )
    def test_rejects(self, kwargs: dict[str, object], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            HardwareConfig(**kwargs)  # type: ignore[arg-type]

    def test_defaults(self) -> None:
        config = HardwareConfig()
        assert (config.gpu, config.model, config.tp) == ("a100", "llama-3-8b", 1)
