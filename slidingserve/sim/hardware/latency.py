"""Ground-truth iteration latency of the simulator (docs/simulator.md §1).

Iteration time = layers × (linear/norm/activation ops at the batch's total tokens
+ decode attention + prefill attention per chunk + two all-reduces at TP > 1)
+ embedding + a fixed CPU overhead, times seeded multiplicative noise.

Operator times come from a GPU profile's measured medians, or are scaled from another
model's by a roofline (`profiles.py`); attention from the profile's fit; all-reduce from its
measured table or link model. `provenance` says which, for every result header.
This is deliberately not the 7-feature linear predictor: the predictor
is fitted to samples of this model, so its accuracy is a real measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from slidingserve.sim.hardware.catalog import load_model
from slidingserve.sim.hardware.models import ModelSpec
from slidingserve.sim.hardware.noise import NoiseStream, Seed
from slidingserve.sim.hardware.profiles import (
    GPUProfile,
    available_tp,
    provenance,
    replica_ops,
)
from slidingserve.sim.hardware.registry import gpu_profile

if TYPE_CHECKING:
    from slidingserve.core.batch import BatchShape

FloatArray = npt.NDArray[np.float64]

_MS = 1e-3  # seconds per millisecond
_MIN_NOISE_FACTOR = 0.5  # floor: an iteration never runs in under half its expected time
_ALL_REDUCES_PER_LAYER = 2  # after attention and after the MLP (Megatron-style TP)


@dataclass(frozen=True, slots=True)
class HardwareConfig:
    """Which GPU and model the simulator runs, and how noisy the ground truth is."""

    gpu: str = "a100"  # built-in, imported or --profile-dir GPU name
    model: str = "llama-3-8b"  # catalog name, or the path of a Hugging Face config.json
    tp: int = 1  # tensor-parallel degree: GPUs per replica
    noise: float = 0.02  # relative std of the multiplicative noise on iteration times
    gpu_memory_utilization: float = 0.9  # fraction of GPU memory vLLM may use
    profile_dir: str = ""  # a directory in Vidur's layout whose GPUs come first

    def __post_init__(self) -> None:
        if not 0.0 <= self.noise < 0.5:
            raise ValueError(f"noise must be in [0, 0.5), got {self.noise}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        self._check_tp(self.gpu_profile(), self.model_spec())

    def gpu_profile(self) -> GPUProfile:
        return gpu_profile(self.gpu, self.profile_dir)

    def model_spec(self) -> ModelSpec:
        return load_model(self.model)

    def provenance(self) -> tuple[str, ...]:
        """Where each part of this replica's latency model comes from, one line each."""
        return provenance(self.gpu_profile(), self.model_spec(), self.tp)

    def _check_tp(self, gpu: GPUProfile, model: ModelSpec) -> None:
        for heads, what in ((model.num_kv_heads, "KV heads"), (model.num_heads, "heads")):
            if self.tp > 0 and heads % self.tp:
                raise ValueError(f"tp={self.tp} does not divide {model.name}'s {heads} {what}")
        supported = available_tp(gpu, model)
        if self.tp not in supported:
            raise ValueError(
                f"tp={self.tp} unsupported for {model.name} on {gpu.name}: "
                f"operator and all-reduce times exist for tp in {list(supported)}"
            )


class GroundTruthLatency:
    """Seeded ground-truth iteration times of one replica (`config.tp` GPUs).

    Built once per simulation: construction tabulates the non-attention time of every batch
    size up to the profiled maximum, so `expected_time` and `sample_time` are a few
    microseconds of plain Python per call.
    """

    def __init__(self, config: HardwareConfig, seed: Seed = 0) -> None:
        self.config = config
        self.gpu: GPUProfile = config.gpu_profile()
        self.model: ModelSpec = config.model_spec()
        self._set_attention_coefficients()
        self._build_non_attention_table()
        self._noise = NoiseStream(self._draw_factors, seed)

    @property
    def max_table_tokens(self) -> int:
        """Largest profiled batch size (tokens); beyond it times are extrapolated linearly."""
        return self._max_tokens

    def expected_time(self, shape: BatchShape) -> float:
        """Noise-free time (s) of one iteration running `shape`."""
        decodes = shape.decode_contexts
        tokens = len(decodes)
        seconds = 0.0
        if tokens:
            seconds = self._dec0 + self._dec_b * tokens + self._dec_k * sum(decodes)
        for chunk, cached in shape.prefill_chunks:
            tokens += chunk
            seconds += self._pre0 + chunk * (self._pre_cu * cached + self._pre_cc * chunk)
        return seconds + self._non_attention_at(tokens)

    def sample_time(self, shape: BatchShape) -> float:
        """Noisy time (s) of one iteration; consumes one factor of the seeded noise stream."""
        return self.expected_time(shape) * self._noise.next()

    def decode_run_times(self, num_decodes: int, decode_kv: int, steps: int) -> FloatArray:
        """Noisy times (s) of up to `steps` consecutive decode-only iterations.

        Step j runs `num_decodes` decodes reading `decode_kv + j·num_decodes` KV tokens (each
        decode's context grows by one per step). The noise is the next `steps` factors of the
        stream `sample_time` reads, but they are only looked at: the caller decides how many
        of the steps run and then calls `consume_noise` with that count, so a fast-forwarded
        run draws exactly the noise that step-by-step `sample_time` calls would.
        """
        if num_decodes < 1 or decode_kv < 0 or steps < 0:
            raise ValueError(
                f"need num_decodes >= 1, decode_kv >= 0, steps >= 0; "
                f"got {num_decodes}, {decode_kv}, {steps}"
            )
        kv = decode_kv + num_decodes * np.arange(steps, dtype=np.float64)
        attention = self._dec0 + self._dec_b * num_decodes + self._dec_k * kv
        return (attention + self._non_attention_at(num_decodes)) * self._noise.peek(steps)

    def consume_noise(self, count: int) -> None:
        """Move past `count` noise factors (those of the decode-only steps that ran)."""
        self._noise.consume(count)

    def non_attention_time(self, num_tokens: npt.ArrayLike) -> FloatArray:
        """Seconds per batch of everything but attention: ops, embedding, all-reduce, CPU."""
        tokens = np.asarray(num_tokens, dtype=np.float64)
        grid = np.arange(self._max_tokens + 1, dtype=np.float64)
        inside = np.interp(tokens, grid, self._non_attention_array)
        above = self._non_attention[-1] + self._tail_slope * (tokens - self._max_tokens)
        return np.where(tokens > self._max_tokens, above, inside)

    def prefill_attention_time(self, chunk: npt.ArrayLike, cached: npt.ArrayLike) -> FloatArray:
        """Seconds, all layers, of attention for prefill chunks of `chunk` new tokens on top
        of `cached` tokens already in the KV cache (zero for an empty chunk)."""
        c = np.asarray(chunk, dtype=np.float64)
        u = np.asarray(cached, dtype=np.float64)
        seconds = self._pre0 + c * (self._pre_cu * u + self._pre_cc * c)
        return np.where(c > 0, seconds, 0.0)

    def prefill_attention_coefficients(self) -> tuple[float, float, float]:
        """(a, b, c) with prefill attention of a chunk = a + b·chunk·cached + c·chunk², seconds."""
        return self._pre0, self._pre_cu, self._pre_cc

    def decode_attention_time(self, num_decodes: npt.ArrayLike, kv: npt.ArrayLike) -> FloatArray:
        """Seconds, all layers, of decode attention for `num_decodes` decodes reading `kv`
        KV tokens in total (zero without decodes)."""
        b = np.asarray(num_decodes, dtype=np.float64)
        k = np.asarray(kv, dtype=np.float64)
        seconds = self._dec0 + self._dec_b * b + self._dec_k * k
        return np.where(b > 0, seconds, 0.0)

    def kv_capacity_blocks(self, block_size: int) -> int:
        """KV-cache blocks of `block_size` tokens the replica holds.

        Each GPU keeps `gpu_memory_utilization` of its memory, minus its shard of the weights
        and an activation reserve, for KV; each block's heads are split across the TP GPUs,
        so the block count (and the token capacity) grows with TP.
        """
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        tp = self.config.tp
        usable = self.gpu.memory_bytes * self.config.gpu_memory_utilization
        free = usable - self.model.weight_bytes / tp - self.gpu.activation_reserve_bytes
        if free <= 0:
            raise ValueError(f"{self.model.name} does not fit on {tp} × {self.gpu.name}")
        block_bytes_per_gpu = block_size * self.model.kv_bytes_per_token / tp
        return int(free // block_bytes_per_gpu)

    def _set_attention_coefficients(self) -> None:
        """Attention fits scaled to this model's heads per GPU, in seconds for all layers."""
        fit, model, tp = self.gpu.attention, self.model, self.config.tp
        per_model = model.num_layers * _MS
        decode_scale = fit.decode_scale(model.num_kv_heads / tp, model.head_dim)
        prefill_scale = fit.prefill_scale(model.num_heads / tp, model.head_dim)
        self._dec0 = fit.decode_ms * per_model
        self._dec_b = fit.decode_ms_per_request * decode_scale * per_model
        self._dec_k = fit.decode_ms_per_kv_token * decode_scale * per_model
        self._pre0 = fit.prefill_ms * per_model
        self._pre_cu = fit.prefill_ms_per_chunk_cached * prefill_scale * per_model
        self._pre_cc = fit.prefill_ms_per_chunk_squared * prefill_scale * per_model

    def _build_non_attention_table(self) -> None:
        """Tabulate non-attention seconds for every batch size 0..max profiled tokens."""
        ops = replica_ops(self.gpu, self.model, self.config.tp)
        self._max_tokens = int(ops.layer_ms.x[-1])
        tokens = np.arange(self._max_tokens + 1, dtype=np.float64)
        layer_ms = ops.layer_ms(tokens) + self._all_reduce_ms(tokens)
        ms = self.model.num_layers * layer_ms + ops.emb_ms(tokens)
        ms[0] = 0.0  # an empty batch launches no kernels
        seconds = ms * _MS + self.gpu.cpu_overhead_s
        half = self._max_tokens // 2
        self._tail_slope = float((seconds[-1] - seconds[half]) / (self._max_tokens - half))
        self._non_attention_array = seconds
        self._non_attention: list[float] = seconds.tolist()

    def _all_reduce_ms(self, tokens: FloatArray) -> FloatArray:
        """Per-layer all-reduce time (ms) for batches of `tokens` tokens."""
        if self.config.tp == 1:
            return np.zeros_like(tokens)
        message_bytes = tokens * self.model.hidden_size * self.model.dtype_bytes
        return _ALL_REDUCES_PER_LAYER * self.gpu.all_reduce.ms(message_bytes, self.config.tp)

    def _non_attention_at(self, tokens: int) -> float:
        if tokens <= self._max_tokens:
            return self._non_attention[tokens]
        return self._non_attention[-1] + self._tail_slope * (tokens - self._max_tokens)

    def _draw_factors(self, rng: np.random.Generator, count: int) -> FloatArray:
        normal = rng.standard_normal(count)
        return np.maximum(_MIN_NOISE_FACTOR, 1.0 + self.config.noise * normal)
