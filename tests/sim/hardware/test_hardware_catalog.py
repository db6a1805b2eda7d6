"""Model and GPU catalog."""

from __future__ import annotations

import pytest

from slidingserve.sim.hardware import list_gpus, list_models, load_gpu, load_model


class TestModels:
    def test_known_models(self) -> None:
        assert list_models() == ["llama-2-7b", "llama-3-8b"]

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
        assert list_gpus() == ["a100"]

    def test_a100(self) -> None:
        gpu = load_gpu("a100")
        assert gpu.memory_gib == 80
        assert gpu.op_table("llama-3-8b") == "a100_llama-3-8b.json"
        assert 0.001 <= gpu.cpu_overhead_s <= 0.01

    def test_attention_scales_by_heads(self) -> None:
        fit = load_gpu("a100").attention
        assert fit.decode_scale(8, 128) == pytest.approx(0.25)
        assert fit.prefill_scale(32, 128) == pytest.approx(1.0)
        assert fit.prefill_scale(16, 128) == pytest.approx(0.5)

    def test_unknown_gpu_lists_known_ones(self) -> None:
        with pytest.raises(ValueError, match=r"unknown gpu 'h100'.*a100"):
            load_gpu("h100")

    def test_model_without_table(self) -> None:
        with pytest.raises(ValueError, match="no operator table for model 'x'"):
            load_gpu("a100").op_table("x")
