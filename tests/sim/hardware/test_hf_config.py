"""ModelSpec from a Hugging Face config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slidingserve.sim.hardware.hf_config import is_config_path, model_from_hf_config

LLAMA_3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
LLAMA_2_7B: dict[str, Any] = {
    **LLAMA_3_8B,
    "num_key_value_heads": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "torch_dtype": "float16",
}
QWEN_2_5_7B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "num_hidden_layers": 28,
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def write_config(tmp_path: Path, config: object, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def make_config(**changes: Any) -> dict[str, Any]:
    """Llama-3-8B's config with `changes`; a value of None removes the key."""
    config = {**LLAMA_3_8B, **changes}
    return {key: value for key, value in config.items() if value is not None}


class TestNumParams:
    @pytest.mark.parametrize(
        ("config", "num_params"),
        [
            (QWEN_2_5_7B, 7_615_616_512),
            (LLAMA_3_8B, 8_030_261_248),
            (LLAMA_2_7B, 6_738_415_616),
        ],
        ids=["qwen2.5-7b", "llama-3-8b", "llama-2-7b"],
    )
    def test_published_models(
        self, tmp_path: Path, config: dict[str, Any], num_params: int
    ) -> None:
        assert model_from_hf_config(write_config(tmp_path, config)).num_params == num_params

    def test_tied_embeddings_drop_the_lm_head(self, tmp_path: Path) -> None:
        tied = model_from_hf_config(write_config(tmp_path, make_config(tie_word_embeddings=True)))
        assert tied.num_params == 8_030_261_248 - 128256 * 4096

    def test_absent_tie_means_untied(self, tmp_path: Path) -> None:
        spec = model_from_hf_config(write_config(tmp_path, make_config(tie_word_embeddings=None)))
        assert spec.num_params == 8_030_261_248

    def test_attention_bias_adds_q_k_v_o_biases(self, tmp_path: Path) -> None:
        spec = model_from_hf_config(write_config(tmp_path, make_config(attention_bias=True)))
        # per layer: q 4096 + k 1024 + v 1024 + o 4096
        assert spec.num_params == 8_030_261_248 + 32 * (4096 + 2 * 1024 + 4096)

    def test_mlp_bias_adds_gate_up_down_biases(self, tmp_path: Path) -> None:
        spec = model_from_hf_config(write_config(tmp_path, make_config(mlp_bias=True)))
        assert spec.num_params == 8_030_261_248 + 32 * (2 * 14336 + 4096)

    def test_qwen2_without_bias_would_be_smaller(self, tmp_path: Path) -> None:
        config = {**QWEN_2_5_7B, "model_type": "llama"}
        spec = model_from_hf_config(write_config(tmp_path, config))
        assert spec.num_params == 7_615_616_512 - 28 * (3584 + 2 * 512)


class TestShapes:
    def test_fields_of_llama_3_8b(self, tmp_path: Path) -> None:
        path = write_config(tmp_path, LLAMA_3_8B)
        spec = model_from_hf_config(path)
        assert (spec.num_layers, spec.num_heads, spec.num_kv_heads, spec.head_dim) == (
            32,
            32,
            8,
            128,
        )
        assert (spec.hidden_size, spec.intermediate_size, spec.vocab_size) == (
            4096,
            14336,
            128256,
        )
        assert spec.max_model_len == 8192
        assert spec.kv_bytes_per_token == 131_072

    @pytest.mark.parametrize("as_str", [True, False])
    def test_name_is_the_path_as_given(self, tmp_path: Path, as_str: bool) -> None:
        path = write_config(tmp_path, LLAMA_3_8B, name="llama.json")
        assert model_from_hf_config(str(path) if as_str else path).name == str(path)

    def test_explicit_head_dim_wins(self, tmp_path: Path) -> None:
        # Mistral-Nemo-like: 32 heads of 128 with hidden 5120 (derived would be 160).
        config = make_config(hidden_size=5120, head_dim=128)
        spec = model_from_hf_config(write_config(tmp_path, config))
        assert spec.head_dim == 128
        assert spec.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2

    def test_null_head_dim_is_derived(self, tmp_path: Path) -> None:
        config = {**LLAMA_3_8B, "hidden_size": 2048, "head_dim": None}
        assert model_from_hf_config(write_config(tmp_path, config)).head_dim == 64

    def test_explicit_head_dim_enters_num_params(self, tmp_path: Path) -> None:
        spec = model_from_hf_config(write_config(tmp_path, make_config(head_dim=64)))
        # q and o shrink from 4096 to 2048 columns; k and v from 1024 to 512.
        saved = 2 * 4096 * 2048 + 2 * 4096 * 512
        assert spec.num_params == 8_030_261_248 - 32 * saved

    def test_kv_heads_default_to_query_heads(self, tmp_path: Path) -> None:
        spec = model_from_hf_config(write_config(tmp_path, make_config(num_key_value_heads=None)))
        assert spec.num_kv_heads == 32

    @pytest.mark.parametrize(
        ("changes", "dtype_bytes"),
        [
            ({"torch_dtype": "bfloat16"}, 2),
            ({"torch_dtype": "float16"}, 2),
            ({"torch_dtype": "float32"}, 4),
            ({"torch_dtype": None}, 2),
            ({"torch_dtype": None, "dtype": "float32"}, 4),
        ],
    )
    def test_dtype_bytes(self, tmp_path: Path, changes: dict[str, Any], dtype_bytes: int) -> None:
        spec = model_from_hf_config(write_config(tmp_path, make_config(**changes)))
        assert spec.dtype_bytes == dtype_bytes


class TestErrors:
    def test_missing_file(self, tmp_path: Path) -> None:
        path = tmp_path / "absent.json"
        with pytest.raises(FileNotFoundError, match=r"absent\.json"):
            model_from_hf_config(path)

    def test_not_json(self, tmp_path: Path) -> None:
        path = tmp_path / "config.json"
        path.write_text("{'hidden_size': 4096}", encoding="utf-8")
        with pytest.raises(ValueError, match=r"config\.json: not JSON: Expecting property name"):
            model_from_hf_config(path)

    def test_not_an_object(self, tmp_path: Path) -> None:
        path = write_config(tmp_path, [LLAMA_3_8B])
        with pytest.raises(ValueError, match=r"config\.json: not a JSON object but a list"):
            model_from_hf_config(path)

    def test_missing_keys_are_all_named(self, tmp_path: Path) -> None:
        path = write_config(tmp_path, make_config(vocab_size=None, intermediate_size=None))
        with pytest.raises(
            ValueError,
            match=r"config\.json: missing required key\(s\) intermediate_size, vocab_size$",
        ):
            model_from_hf_config(path)

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("num_hidden_layers", 0),
            ("hidden_size", -4096),
            ("vocab_size", 128256.0),
            ("intermediate_size", "14336"),
            ("num_attention_heads", True),
            ("max_position_embeddings", None),
            ("num_key_value_heads", 0),
            ("head_dim", 0),
        ],
    )
    def test_non_positive_or_non_integer(self, tmp_path: Path, key: str, value: object) -> None:
        config = {**LLAMA_3_8B, key: value}
        with pytest.raises(ValueError, match=rf"config\.json: {key} must be a positive integer"):
            model_from_hf_config(write_config(tmp_path, config))

    def test_heads_not_dividing_hidden(self, tmp_path: Path) -> None:
        path = write_config(tmp_path, make_config(num_attention_heads=24, num_key_value_heads=8))
        with pytest.raises(ValueError, match=r"hidden_size \(4096\) is not divisible by"):
            model_from_hf_config(path)

    def test_heads_not_dividing_hidden_is_fine_with_head_dim(self, tmp_path: Path) -> None:
        config = make_config(num_attention_heads=24, num_key_value_heads=8, head_dim=128)
        assert model_from_hf_config(write_config(tmp_path, config)).head_dim == 128

    def test_kv_heads_not_dividing_heads(self, tmp_path: Path) -> None:
        path = write_config(tmp_path, make_config(num_key_value_heads=5))
        with pytest.raises(
            ValueError,
            match=r"config\.json: num_attention_heads \(32\) is not a multiple of "
            r"num_key_value_heads \(5\)",
        ):
            model_from_hf_config(path)

    @pytest.mark.parametrize("key", ["num_experts", "num_local_experts", "n_routed_experts"])
    def test_mixture_of_experts_refused(self, tmp_path: Path, key: str) -> None:
        path = write_config(tmp_path, make_config(**{key: 8}))
        with pytest.raises(
            ValueError, match=rf"config\.json: mixture-of-experts models are not supported \({key}"
        ):
            model_from_hf_config(path)

    @pytest.mark.parametrize("value", [0, None])
    def test_zero_or_null_experts_is_dense(self, tmp_path: Path, value: int | None) -> None:
        config = {**LLAMA_3_8B, "num_experts": value}
        assert model_from_hf_config(write_config(tmp_path, config)).num_params == 8_030_261_248

    def test_unknown_dtype(self, tmp_path: Path) -> None:
        path = write_config(tmp_path, make_config(torch_dtype="int8"))
        with pytest.raises(ValueError, match=r"config\.json: torch_dtype 'int8' is not one of"):
            model_from_hf_config(path)

    def test_non_boolean_tie(self, tmp_path: Path) -> None:
        path = write_config(tmp_path, make_config(tie_word_embeddings="yes"))
        with pytest.raises(ValueError, match=r"tie_word_embeddings must be true or false"):
            model_from_hf_config(path)

    def test_messages_are_one_line(self, tmp_path: Path) -> None:
        path = tmp_path / "config.json"
        path.write_text('{\n  "hidden_size": 4096,\n', encoding="utf-8")
        with pytest.raises(ValueError, match="not JSON") as error:
            model_from_hf_config(path)
        assert "\n" not in str(error.value)


class TestIsConfigPath:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("llama-3-8b", False),
            ("llama-2-7b", False),
            ("config.json", True),
            ("models/qwen2.5-7b/config.json", True),
            ("meta-llama/Meta-Llama-3-8B", True),
            ("./llama", True),
            ("/abs/path/config.json", True),
            ("llama.json.bak", False),
        ],
    )
    def test_cases(self, text: str, expected: bool) -> None:
        assert is_config_path(text) is expected
