"""Model and GPU catalog."""

from __future__ import annotations

import pytest

from slidingserve.sim.hardware import list_gpus, list_models, load_gpu, load_model
from slidingserve.sim.hardware.catalog import list_devices, load_device, load_link


class TestModels:
    def test_known_models(self) -> None:
        assert list_models() == ["llama-2-7b", "llama-3-8b", "qwen2.5-7b"]

    def test_qwen_shape_is_its_published_config(self) -> None:
        qwen = load_model("qwen2.5-7b")
        shape = (qwen.num_layers, qwen.hidden_size, qwen.num_heads, qwen.num_kv_heads)
        assert shape == (28, 3584, 28, 4)
        assert (qwen.intermediate_size, qwen.vocab_size, qwen.max_model_len) == (
            18944,
            152064,
            32768,
        )
        # 2 × 28 layers × 4 KV heads × 128 dims × 2 bytes
        assert qwen.kv_bytes_per_token == 57_344

    def test_published_name_finds_the_catalog_model(self) -> None:
        assert load_model("meta-llama/Llama-2-7b-hf").name == "llama-2-7b"

    def test_llama3_kv_bytes_per_token(self) -> None:
        # 2 (K and V) × 32 layers × 8 KV heads × 128 dims × 2 bytes
        assert load_model("llama-3-8b").kv_bytes_per_token == 131_072

    def test_llama2_kv_bytes_per_token(self) -> None:
        assert load_model("llama-2-7b").kv_bytes_per_token == 524_288

    @pytest.mark.parametrize(("name", "gb"), [("llama-3-8b", 16.06), ("llama-2-7b", 13.48)])
    def test_weight_bytes(self, name: str, gb: float) -> None:
        assert load_model(name).weight_bytes / 1e9 == pytest.approx(gb, abs=0.01)

    @pytest.mark.parametrize(("name", "length"), [("llama-3-8b", 8192), ("llama-2-7b", 4096)])
    def test_context_length(self, name: str, length: int) -> None:
        assert load_model(name).max_model_len == length

    def test_unknown_model_lists_known_ones(self) -> None:
        with pytest.raises(ValueError, match=r"unknown model 'gpt-5'.*llama-2-7b.*llama-3-8b"):
            load_model("gpt-5")


class TestGPUs:
    def test_known_gpus(self) -> None:
        assert list_gpus() == ["a100", "a40", "a40-pcie"]

    def test_a100(self) -> None:
        gpu = load_gpu("a100")
        assert gpu.memory_gib == 80
        assert "a100_llama-3-8b.json" in gpu.op_tables
        assert gpu.all_reduce_table and gpu.attention is not None
        assert 0.001 <= gpu.cpu_overhead_s <= 0.01

    def test_a40_pairs_share_tables_and_differ_in_link(self) -> None:
        nvlink, pcie = load_gpu("a40"), load_gpu("a40-pcie")
        assert nvlink.op_tables == pcie.op_tables == ("a40_llama-2-7b.json",)
        assert nvlink.memory_gib == 48
        assert nvlink.attention is None and nvlink.attention_from == "a100"
        assert nvlink.link is not None and pcie.link is not None
        assert nvlink.link.bandwidth_gbs > pcie.link.bandwidth_gbs
        assert (nvlink.link.max_workers, pcie.link.max_workers) == (2, 8)

    def test_devices_have_positive_facts(self) -> None:
        assert {"a100", "a40", "h100"} <= set(list_devices())
        for name in list_devices():
            device = load_device(name)
            assert device.memory_gib > 0 and device.peak_tflops > 0
            assert device.memory_bandwidth_gbs > 0

    def test_ring_all_reduce_of_a_link(self) -> None:
        link = load_link("pcie4")
        # 2 GPUs: one message's worth of bytes crosses the link; 4 GPUs: 1.5×.
        two = link.all_reduce_ms(23.7e6, 2)
        assert two == pytest.approx(link.latency_us / 1000 + 1.0)
        assert link.all_reduce_ms(23.7e6, 4) == pytest.approx(link.latency_us / 1000 + 1.5)

    def test_attention_on_a_slower_device(self) -> None:
        fit = load_gpu("a100").attention
        assert fit is not None
        slower = fit.on_slower_device(compute_ratio=0.5, bandwidth_ratio=0.25)
        assert slower.prefill_ms_per_chunk_squared == pytest.approx(
            2 * fit.prefill_ms_per_chunk_squared
        )
        assert slower.decode_ms_per_kv_token == pytest.approx(4 * fit.decode_ms_per_kv_token)
        assert (slower.prefill_ms, slower.decode_ms) == (fit.prefill_ms, fit.decode_ms)

    def test_attention_scales_by_heads(self) -> None:
        fit = load_gpu("a100").attention
        assert fit is not None
        assert fit.decode_scale(8, 128) == pytest.approx(0.25)
        assert fit.prefill_scale(32, 128) == pytest.approx(1.0)
        assert fit.prefill_scale(16, 128) == pytest.approx(0.5)

    def test_unknown_gpu_lists_known_ones(self) -> None:
        with pytest.raises(ValueError, match=r"unknown gpu 'h100'.*a100"):
            load_gpu("h100")
