"""Model and GPU descriptions, read from `data/catalog.toml`.

Models and GPUs are data: adding one is an entry in the TOML file (plus, for a GPU, the
operator tables derived by `scripts/derive_latency_tables.py`), never a code change.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Architecture of a decoder-only transformer, as far as latency and memory need it."""

    name: str  # catalog key, e.g. "llama-3-8b"
    num_layers: int
    num_heads: int  # query heads
    num_kv_heads: int  # key/value heads (fewer than query heads under GQA)
    head_dim: int  # elements per head
    hidden_size: int  # elements per token in the residual stream
    intermediate_size: int  # elements per token inside the MLP
    vocab_size: int
    num_params: int  # parameters, embeddings included
    max_model_len: int  # tokens: prompt plus output
    dtype_bytes: int = 2  # bytes per weight and per KV element (bf16/fp16)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token occupies in the cache, over all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights (one copy, before tensor parallelism splits them)."""
        return self.num_params * self.dtype_bytes


@dataclass(frozen=True, slots=True)
class AttentionFit:
    """Attention time fits per layer (ms), measured for a reference head configuration.

    Decode attention reads the KV cache (memory bound), so its size terms scale with
    KV heads × head dim; prefill attention is compute bound, so its terms scale with
    query heads × head dim. Intercepts are kernel launch costs and do not scale.
    """

    reference_num_heads: int
    reference_num_kv_heads: int
    reference_head_dim: int
    decode_ms: float  # per layer, once per batch with decodes
    decode_ms_per_request: float  # per layer, per decode request
    decode_ms_per_kv_token: float  # per layer, per KV token the decodes read
    prefill_ms: float  # per layer, per prefill chunk
    prefill_ms_per_chunk_cached: float  # per layer, per chunk token × cached token
    prefill_ms_per_chunk_squared: float  # per layer, per chunk token²

    def decode_scale(self, kv_heads_per_gpu: float, head_dim: int) -> float:
        """Ratio of KV bytes read per token on one GPU to the reference's."""
        return kv_heads_per_gpu * head_dim / (self.reference_num_kv_heads * self.reference_head_dim)

    def prefill_scale(self, heads_per_gpu: float, head_dim: int) -> float:
        """Ratio of attention FLOPs per token pair on one GPU to the reference's."""
        return heads_per_gpu * head_dim / (self.reference_num_heads * self.reference_head_dim)


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU type: memory, attention fits, CPU overhead and the names of its tables."""

    name: str  # catalog key, e.g. "a100"
    memory_gib: float  # device memory, GiB
    activation_reserve_gib: float  # GiB per GPU kept free for activations
    cpu_overhead_s: float  # seconds of CPU work per iteration (scheduling, sampling)
    all_reduce_table: str  # file name in data/: all-reduce time by message size
    op_tables: tuple[tuple[str, str], ...]  # (model name, file name in data/) pairs
    attention: AttentionFit

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * _GIB

    @property
    def activation_reserve_bytes(self) -> float:
        return self.activation_reserve_gib * _GIB

    def op_table(self, model: str) -> str:
        """File name of the per-layer operator table for `model` on this GPU."""
        tables = dict(self.op_tables)
        if model not in tables:
            raise ValueError(
                f"no operator table for model {model!r} on GPU {self.name!r}; "
                f"tables exist for {sorted(tables)}"
            )
        return tables[model]


def _catalog() -> dict[str, Any]:
    with _data_path("catalog.toml").open("rb") as file:
        return tomllib.load(file)


def _data_path(file_name: str) -> resources.abc.Traversable:
    return resources.files("slidingserve.sim.hardware").joinpath("data").joinpath(file_name)


def load_table(file_name: str) -> dict[str, Any]:
    """Parse one JSON table shipped in `data/`."""
    with _data_path(file_name).open("r", encoding="utf-8") as file:
        table: dict[str, Any] = json.load(file)
    return table


def _entry(section: str, name: str) -> dict[str, Any]:
    entries: dict[str, Any] = _catalog()[section]
    if name not in entries:
        raise ValueError(f"unknown {section[:-1]} {name!r}; known: {sorted(entries)}")
    entry: dict[str, Any] = entries[name]
    return entry


def list_models() -> list[str]:
    """Names of the models in the catalog, sorted."""
    return sorted(_catalog()["models"])


def list_gpus() -> list[str]:
    """Names of the GPUs in the catalog, sorted."""
    return sorted(_catalog()["gpus"])


def load_model(name: str) -> ModelSpec:
    """The catalog's model `name`; ValueError naming the known models if absent."""
    return ModelSpec(name=name, **_entry("models", name))


def load_gpu(name: str) -> GPUSpec:
    """The catalog's GPU `name`; ValueError naming the known GPUs if absent."""
    entry = dict(_entry("gpus", name))
    attention = AttentionFit(**entry.pop("attention"))
    op_tables = tuple(sorted(entry.pop("op_tables").items()))
    return GPUSpec(name=name, op_tables=op_tables, attention=attention, **entry)
