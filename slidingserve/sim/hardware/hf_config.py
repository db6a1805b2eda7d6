"""A `ModelSpec` read from a Hugging Face `config.json`, for models not in the catalog.

Only Llama-family dense decoders are understood (LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM and the like): rotary attention with optional GQA, RMSNorm, and a gated
MLP (gate, up and down projections). The latency model assumes that shape. Configs of
mixture-of-experts models are refused; other architectures are taken at their word.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from slidingserve.sim.hardware.models import ModelSpec

_REQUIRED_KEYS = (
    "num_hidden_layers",
    "num_attention_heads",
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def is_config_path(text: str) -> bool:
    """Whether `--model text` names a config file rather than a catalog model.

    True when `text` ends with ".json" or contains a path separator.
    """
    return text.endswith(".json") or "/" in text or os.sep in text


def model_from_hf_config(path: Path | str) -> ModelSpec:
    """The `ModelSpec` described by the Hugging Face `config.json` at `path`.

    The spec's name is `str(path)`. `num_key_value_heads` defaults to `num_attention_heads`,
    `head_dim` to `hidden_size // num_attention_heads`, the weight dtype (`torch_dtype`, or
    `dtype` in newer configs) to 2 bytes, and the LM head is taken as untied unless
    `tie_word_embeddings` is true (the Llama, Mistral and Qwen2 default); `max_model_len` is
    `max_position_embeddings`.

    `num_params` is counted from the shapes, with q = heads × head_dim and
    kv = kv_heads × head_dim:

        vocab × hidden                               embeddings
        + vocab × hidden                             LM head, unless tied
        + layers × (hidden × q + 2 × hidden × kv     q, k, v projections
                    + q × hidden                     o projection
                    + 3 × hidden × intermediate      gate, up, down projections
                    + 2 × hidden                     two RMSNorm weights
                    + biases)
        + hidden                                     final RMSNorm

    where the per-layer biases are q + 2 × kv for model_type "qwen2" (q, k, v biases),
    q + 2 × kv + hidden when `attention_bias` is true (q, k, v, o biases, as in Llama),
    plus 2 × intermediate + hidden when `mlp_bias` is true.

    Raises OSError if the file cannot be read, a one-line ValueError naming it if not usable.
    """
    config = _Config(str(path), _read_object(Path(path)))
    config.check_supported()
    num_heads = config.positive("num_attention_heads")
    num_kv_heads = config.positive("num_key_value_heads", default=num_heads)
    if num_heads % num_kv_heads:
        config.fail(
            f"num_attention_heads ({num_heads}) is not a multiple of "
            f"num_key_value_heads ({num_kv_heads})"
        )
    spec = ModelSpec(
        name=str(path),
        num_layers=config.positive("num_hidden_layers"),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=_head_dim(config),
        hidden_size=config.positive("hidden_size"),
        intermediate_size=config.positive("intermediate_size"),
        vocab_size=config.positive("vocab_size"),
        num_params=0,  # counted below, from the other shapes
        max_model_len=config.positive("max_position_embeddings"),
        dtype_bytes=_dtype_bytes(config),
    )
    return replace(spec, num_params=_num_params(spec, config))


class _Config:
    """One parsed config.json; its accessors fail with messages that name the file."""

    def __init__(self, source: str, values: dict[str, Any]) -> None:
        self.source = source  # the path as given, for error messages
        self.values = values

    def fail(self, problem: str) -> NoReturn:
        raise ValueError(f"{self.source}: {problem}")

    def check_supported(self) -> None:
        """Fail on missing required keys and on mixture-of-experts configs."""
        missing = [key for key in _REQUIRED_KEYS if key not in self.values]
        if missing:
            self.fail(f"missing required key(s) {', '.join(missing)}")
        experts = [key for key in _EXPERT_KEYS if _is_positive_number(self.values.get(key))]
        if experts:
            self.fail(f"mixture-of-experts models are not supported ({', '.join(experts)} > 0)")

    def positive(self, key: str, default: int | None = None) -> int:
        """The positive integer at `key`; `default`, if given, when absent or null."""
        value = self.values.get(key)
        if value is None and default is not None:
            return default
        # bool is a subclass of int, but `true` is no layer count.
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            self.fail(f"{key} must be a positive integer, got {value!r}")
        return value

    def flag(self, key: str) -> bool:
        """The boolean at `key`; False when absent or null."""
        value = self.values.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.fail(f"{key} must be true or false, got {value!r}")
        return value


def _read_object(path: Path) -> dict[str, Any]:
    with path.open("r", encoding="utf-8") as file:
        try:
            values = json.load(file)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path}: not JSON: {error}") from error
    if not isinstance(values, dict):
        raise ValueError(f"{path}: not a JSON object but a {type(values).__name__}")
    return values


def _head_dim(config: _Config) -> int:
    """`head_dim` if given, else hidden_size // num_attention_heads (which must divide)."""
    if config.values.get("head_dim") is not None:
        return config.positive("head_dim")
    hidden_size = config.positive("hidden_size")
    num_heads = config.positive("num_attention_heads")
    if hidden_size % num_heads:
        config.fail(
            f"hidden_size ({hidden_size}) is not divisible by num_attention_heads "
            f"({num_heads}) and head_dim is not given"
        )
    return hidden_size // num_heads


def _dtype_bytes(config: _Config) -> int:
    key = "torch_dtype" if "torch_dtype" in config.values else "dtype"
    dtype = config.values.get(key)
    if dtype is None:
        return 2
    if dtype not in _DTYPE_BYTES:
        config.fail(f"{key} {dtype!r} is not one of {sorted(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[dtype]


def _num_params(spec: ModelSpec, config: _Config) -> int:
    """Parameters of `spec`'s shapes (formula in `model_from_hf_config`)."""
    hidden, intermediate = spec.hidden_size, spec.intermediate_size
    q_width = spec.num_heads * spec.head_dim
    kv_width = spec.num_kv_heads * spec.head_dim
    per_layer = (
        hidden * q_width + 2 * hidden * kv_width + q_width * hidden
        + 3 * hidden * intermediate
        + 2 * hidden
    )  # fmt: skip
    if config.flag("attention_bias"):
        per_layer += q_width + 2 * kv_width + hidden
    elif config.values.get("model_type") == "qwen2":
        per_layer += q_width + 2 * kv_width
    if config.flag("mlp_bias"):
        per_layer += 2 * intermediate + hidden
    embeddings = spec.vocab_size * hidden
    lm_head = 0 if config.flag("tie_word_embeddings") else embeddings
    return embeddings + lm_head + spec.num_layers * per_layer + hidden


def _is_positive_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
