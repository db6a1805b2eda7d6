"""An upper bound on any scheduler's throughput: 1 / E[least GPU-seconds a request needs].

Every iteration costs its non-attention time (linear layers, embedding, all-reduce, CPU
overhead) plus attention. The non-attention time of a batch of n tokens is at least
n · min_m (time(m) / m) over batch sizes m the engine allows, so a request's tokens cost at
least that much each, however they are batched. Attention is additive per request: its
prefill at the chunking that minimises it (closed form), its decodes at their per-token
cost with the per-batch constant amortised away. Nothing is shared across requests beyond
what the bound already amortises, so no schedule finishes requests faster on average (up to
the noise, which has mean 1). With a prefix cache, a request's prefill is charged without the
tokens an unbounded cache could have found for it (`prefix_savings.py`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from slidingserve.core.view import EngineLimits
from slidingserve.eval.prefix_savings import computed_prompts
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig, load_model
from slidingserve.workloads import WorkloadConfig, sample_workload
from slidingserve.workloads.workload import WorkloadSample

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class CapacityBound:
    """The throughput no scheduler sustains beyond, and what it is made of."""

    rate: float  # requests per second no scheduler can sustain beyond
    seconds_per_request: float  # mean least GPU-seconds per request
    token_seconds: float  # least non-attention seconds per token
    best_batch_tokens: int  # batch size where that least cost is reached


def capacity_bound(
    workload: WorkloadConfig,
    hardware: HardwareConfig,
    limits: EngineLimits,
    num_samples: int = 4000,
    seed: int = 0,
) -> CapacityBound:
    """The bound for `workload` on `hardware`, averaged over `num_samples` drawn requests
    (a replayed trace: over seed `seed`'s window of it)."""
    latency, sample = bound_sample(workload, hardware, num_samples, seed)
    prompt = sample.prompt_lens.astype(np.float64)
    output = sample.output_lens.astype(np.float64)
    computed = charged_prompts(sample, limits)  # less the best-case prefix hits
    sizes = np.arange(1, limits.max_num_batched_tokens + 1)
    per_token = latency.non_attention_time(sizes) / sizes
    best = int(np.argmin(per_token))
    token_seconds = float(per_token[best])
    tokens = computed + output - 1  # the last prefill step emits the first token
    seconds = (
        token_seconds * tokens
        + least_prefill_attention(latency, computed, limits.max_num_batched_tokens)
        + least_decode_attention(latency, prompt, output)
    )
    mean = float(seconds.mean())
    return CapacityBound(1.0 / mean, mean, token_seconds, int(sizes[best]))


def least_prefill_attention(
    latency: GroundTruthLatency, prompts: np.ndarray, max_chunk: int
) -> np.ndarray:
    """Per request, a lower bound on the attention time of its prefill over every chunking.

    With n chunks c_k (Σ c_k = P, each ≤ max_chunk) on top of u_k = Σ_{j<k} c_j cached
    tokens, Σ c_k·u_k = (P² − S)/2 with S = Σ c_k², so the time is
    n·a + b·P²/2 + κ·S with κ = c − b/2. If κ ≥ 0, S ≥ P²/n (equal chunks) and the bound
    n·a + b·P²/2 + κ·P²/n is minimised over integers n in [⌈P / max_chunk⌉, P]; if κ < 0,
    S ≤ max_chunk·P bounds it with the fewest chunks.
    """
    a, b, c = latency.prefill_attention_coefficients()
    tokens = prompts.astype(np.float64)
    fewest = np.ceil(tokens / max_chunk)
    kappa = c - b / 2
    if kappa < 0:
        return fewest * a + b * tokens**2 / 2 + kappa * np.minimum(tokens, max_chunk) * tokens
    ideal = tokens * np.sqrt(kappa / a) if a > 0 else tokens
    best = np.full(tokens.size, np.inf)
    for rounded in (np.floor(ideal), np.ceil(ideal)):
        chunks = np.clip(rounded, fewest, tokens)
        best = np.minimum(best, chunks * a + b * tokens**2 / 2 + kappa * tokens**2 / chunks)
    return best


def least_decode_attention(
    latency: GroundTruthLatency, prompt: np.ndarray, output: np.ndarray
) -> np.ndarray:
    """Per request, decode attention at its per-token cost (affine in the context)."""
    per_request = float(latency.decode_attention_time(2, 0) - latency.decode_attention_time(1, 0))
    per_kv_token = float(latency.decode_attention_time(1, 1) - latency.decode_attention_time(1, 0))
    steps = output - 1  # decodes after the first token; contexts prompt .. prompt + steps − 1
    kv_read = steps * prompt + steps * (steps - 1) / 2
    seconds: np.ndarray = steps * per_request + per_kv_token * kv_read
    return seconds


def bound_sample(
    workload: WorkloadConfig, hardware: HardwareConfig, num_samples: int, seed: int
) -> tuple[GroundTruthLatency, WorkloadSample]:
    """The noise-free latency model of `hardware` and the requests a bound averages over:
    `num_samples` drawn with `seed` (a replayed trace: seed `seed`'s window of it), prompts
    trimmed to the model's context as in a run."""
    latency = GroundTruthLatency(dataclasses.replace(hardware, noise=0.0))
    count = workload.num_requests if workload.replays else num_samples
    sample = sample_workload(
        dataclasses.replace(workload, num_requests=count),
        1.0,
        seed,
        load_model(hardware.model).max_model_len,
    )
    return latency, sample


def charged_prompts(sample: WorkloadSample, limits: EngineLimits) -> IntArray:
    """The prompt tokens a bound charges each request of `sample` (`prefix_savings.py`)."""
    return computed_prompts(
        sample.content,
        sample.prompt_lens.astype(np.int64),
        sample.output_lens.astype(np.int64),
        limits.block_size,
        limits.prefix_caching,
    )
