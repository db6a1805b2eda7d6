"""Model, device, link and GPU descriptions, read from `data/catalog.toml`.

Models and GPUs are data: adding one is an entry in the TOML file (plus, for a GPU, the
operator tables derived by `scripts/derive_latency_tables.py`), never a code change. A model
may also come from its Hugging Face `config.json` (`load_model` takes a path).
"""

from __future__ import annotations

import functools
import json
import tomllib
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from slidingserve.sim.hardware.hf_config import is_config_path, model_from_hf_config
from slidingserve.sim.hardware.models import ModelSpec


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

    def on_slower_device(self, compute_ratio: float, bandwidth_ratio: float) -> AttentionFit:
        """This fit on a device with `compute_ratio` × the compute and `bandwidth_ratio` × the
        memory bandwidth: prefill size terms divide by the first, decode's by the second."""
        return replace(
            self,
            decode_ms_per_request=self.decode_ms_per_request / bandwidth_ratio,
            decode_ms_per_kv_token=self.decode_ms_per_kv_token / bandwidth_ratio,
            prefill_ms_per_chunk_cached=self.prefill_ms_per_chunk_cached / compute_ratio,
            prefill_ms_per_chunk_squared=self.prefill_ms_per_chunk_squared / compute_ratio,
        )


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A GPU model's published facts."""

    name: str
    description: str
    memory_gib: float
    peak_tflops: float  # dense fp16/bf16 tensor throughput
    memory_bandwidth_gbs: float


@dataclass(frozen=True, slots=True)
class LinkModel:
    """All-reduce over a link: latency + 2(n-1)/n × bytes ÷ bandwidth (a ring)."""

    name: str
    description: str
    latency_us: float
    bandwidth_gbs: float  # reached, not nominal
    max_workers: int

    def all_reduce_ms(self, message_bytes: Any, workers: int) -> Any:
        """Milliseconds to all-reduce `message_bytes` (scalar or array) among `workers` GPUs."""
        ring = 2 * (workers - 1) / workers
        return self.latency_us / 1000 + ring * message_bytes / (self.bandwidth_gbs * 1e6)

    def describe(self) -> str:
        return (
            f"{self.description}: {self.latency_us:g} µs + 2(n-1)/n × bytes ÷ "
            f"{self.bandwidth_gbs:g} GB/s, up to {self.max_workers} GPUs"
        )


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One built-in GPU: its device, CPU overhead, operator tables and how its attention and
    all-reduce times are known (a measured table or fit, or derived)."""

    name: str  # catalog key, e.g. "a100"
    device: DeviceSpec
    activation_reserve_gib: float  # GiB per GPU kept free for activations
    cpu_overhead_s: float  # seconds of CPU work per iteration (scheduling, sampling)
    op_tables: tuple[str, ...]  # file names in data/
    attention: AttentionFit | None = None  # measured fit
    attention_from: str = ""  # or: the GPU whose fit is scaled by the devices' ratios
    all_reduce_table: str = ""  # file name in data/: measured all-reduce by message size
    link: LinkModel | None = None  # or: the link model

    @property
    def memory_gib(self) -> float:
        return self.device.memory_gib


@functools.cache
def _catalog() -> dict[str, Any]:
    """The parsed catalog, read once per process (every simulation builds its GPU from it;
    parsing took 8 ms a run). Shared: callers copy an entry before changing it."""
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
    """Names of the built-in GPUs, sorted."""
    return sorted(_catalog()["gpus"])


def list_devices() -> list[str]:
    """Names of the devices whose published facts the catalog holds, sorted."""
    return sorted(_catalog()["devices"])


def load_model(name: str) -> ModelSpec:
    """The catalog's model `name`, or the model of the Hugging Face config at path `name`;
    ValueError naming the known models if neither."""
    models = _catalog()["models"]
    if name in models:
        return ModelSpec(name=name, **models[name])
    published = model_by_hf_name(name)
    if published is not None:
        return published
    if is_config_path(name):
        return model_from_hf_config(name)
    return ModelSpec(name=name, **_entry("models", name))


def model_by_hf_name(hf_name: str) -> ModelSpec | None:
    """The catalog model published as `hf_name` (e.g. "meta-llama/Llama-2-7b-hf"), if any."""
    for name, entry in _catalog()["models"].items():
        if entry.get("hf_name", "").lower() == hf_name.lower():
            return ModelSpec(name=name, **entry)
    return None


def load_device(name: str) -> DeviceSpec:
    """The published facts of device `name`; ValueError naming the known devices if absent."""
    return DeviceSpec(name=name, **_entry("devices", name))


def load_link(name: str) -> LinkModel:
    return LinkModel(name=name, **_entry("links", name))


def load_gpu(name: str) -> GPUSpec:
    """The catalog's GPU `name`; ValueError naming the known GPUs if absent."""
    entry = dict(_entry("gpus", name))
    attention = entry.pop("attention", None)
    link = entry.pop("link", None)
    return GPUSpec(
        name=name,
        device=load_device(entry.pop("device")),
        op_tables=tuple(entry.pop("op_tables")),
        attention=AttentionFit(**attention) if attention else None,
        link=load_link(link) if link else None,
        **entry,
    )
