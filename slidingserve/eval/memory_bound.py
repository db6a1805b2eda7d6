"""A memory-aware upper bound on throughput: the KV cache caps the batch, so its cost.

The capacity bound (`capacity.py`) charges every token at the cheapest batch size, as if
the KV cache could hold any batch. This bound adds the cache: B blocks of s tokens
(`GroundTruthLatency.kv_capacity_blocks`, `EngineLimits.block_size`), the simulator's and
vLLM's paged cache. Every decode needs its request's whole KV in the cache, so the cache
caps how many requests an iteration can serve, and so how far an iteration's
non-attention time (reading the weights, mostly) is shared.

**Held tokens.** A request of prompt P and output D is in the cache in the iteration that
runs its last prefill chunk (its first token comes out of it) with ⌈P/s⌉ blocks, and in
the iteration of each decode j = 1 … D − 1 (reading P + j − 1 cached tokens, caching one
more) with ⌈(P + j)/s⌉ blocks: D *held tokens*, with b(t) = ⌈t/s⌉ blocks for
t = P … P + D − 1, counted after their growth (vLLM allocates the blocks when it
schedules an iteration; the simulator checks every plan against the free blocks). Each
held token is in exactly one iteration, and the blocks an iteration holds add up to at
most B, so a run that serves n requests has at least K ≥ Σ_i Σ_t b_i(t) / B iterations.
Per request that is H / B iterations, H = E[Σ_t ⌈t/s⌉] held blocks on average.

**The bound.** An iteration of N tokens lasts at least NA(N) + its attention, NA the
non-attention time (`GroundTruthLatency.non_attention_time`) and the attention additive
per request as in the capacity bound: A = E[least prefill attention over every chunking +
decode attention without its per-iteration constant], exactly as `capacity.py` computes
them. For any line under NA, NA(N) ≥ α + β·N for N in [1, max_num_batched_tokens], with
α ≥ 0, the iterations of a run take Σ_k NA(N_k) ≥ α·K + β·Σ_k N_k. Over a long run of
length T at λ req/s, K ≥ λ·T·H/B and Σ_k N_k ≥ λ·T·E[P + D − 1] (the last prefill step
emits the first token; recompute only adds tokens), and the GPU runs one iteration at a
time, so

    λ · (α·H/B + β·E[P + D − 1] + A) ≤ 1        (s per request on the left, times req/s)

for every such line (α in s, β in s per token, H and B in blocks). The bound `rate` is
1 / the largest left side over the lines, a two-variable linear program (`linprog`): the
value at N₀ = E[P + D − 1]·B/H tokens, the batch a full cache allows on average, of the
lower convex envelope of NA (times H/B), plus A. Its two ends are its parts:

- α = 0, β = τ* = min_N NA(N)/N: the capacity bound (`compute`);
- α = NA_min = min_N NA(N), β = 0: Little's law on the cache (`kv`). Each request holds
  its blocks for at least one iteration per held token, so at least W = NA_min·H
  block-seconds; at most B blocks are held at any time, so λ·E[W] ≤ B over the time the
  GPU is not busy with attention: λ ≤ 1 / (W/B + A), KV capacity ÷ E[least block-seconds].

Between them it is tighter than both: an iteration that serves many tokens of prefill is
long, one that serves few decodes wastes the weights it reads. When the cache is ample
(N₀ past the best batch) the best line is the capacity bound's and the two are equal; the
bound rises with B until it gets there.

**Why it is an upper bound.** Each step drops or weakens something a schedule must do:
blocks held outside a request's own iterations (waiting between chunks or decodes, or
preempted and recomputed) and the blocks of its earlier prefill chunks are not counted;
the iterations may be any sizes whose count and tokens add up; the per-iteration constant
of decode attention is left out (as in the capacity bound); the simulator's noise has mean
one. Like the capacity bound it holds in steady state: a finite trial that starts with an
empty cache and ends before its backlog fills it can pass it.

**What it ignores.** The SLOs (the SLO-aware bound, `slo_bound.py`, covers them and ignores
the cache; both are upper bounds, so the lower of the two is one too), max_num_seqs, prefix
sharing of blocks (none in the simulator), swapping to host memory (the simulator
recomputes), and the fragmentation of a real allocator beyond the rounding of each request
to whole blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog

from slidingserve.core.view import EngineLimits
from slidingserve.eval.capacity import (
    bound_sample,
    charged_prompts,
    least_decode_attention,
    least_prefill_attention,
)
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig
from slidingserve.workloads import WorkloadConfig

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

KV, COMPUTE = "kv", "compute"  # what `MemoryBound.binding` names
_BINDING_TOLERANCE = 0.005  # relative: the cache binds when it lowers the bound by more


@dataclass(frozen=True, slots=True)
class MemoryBound:
    """The throughput no scheduler sustains beyond given the KV cache and the GPU."""

    rate: float  # req/s: the memory-aware bound, at most both parts below
    compute: float  # req/s: the compute part (α = 0), the capacity bound
    kv: float  # req/s: the KV part (β = 0), Little's law on the cache
    kv_blocks: int  # B, blocks in the cache
    block_size: int  # tokens per block
    held_blocks: float  # H: blocks summed over a request's held tokens, on average
    block_seconds: float  # E[W] = NA_min·H: the least block-seconds a request holds
    batch_tokens: float  # N₀ = E[P + D − 1]·B/H: tokens per iteration a full cache allows
    line: tuple[float, float]  # (α s, β s/token): the line under NA that gives `rate`

    @property
    def binding(self) -> str:
        """`kv` when the cache lowers the bound more than 0.5% below the compute part (less
        is within the simulator's noise), else `compute`."""
        return KV if self.rate < self.compute * (1 - _BINDING_TOLERANCE) else COMPUTE

    @property
    def share_of_capacity(self) -> float:
        return self.rate / self.compute


class RequestDemand(NamedTuple):
    """What a request needs on average (module docstring)."""

    tokens: float  # E[P + D − 1]
    held_blocks: float  # H
    attention: float  # A, s


def memory_bound(
    workload: WorkloadConfig,
    hardware: HardwareConfig,
    limits: EngineLimits,
    num_samples: int = 4000,
    seed: int = 0,
) -> MemoryBound:
    """The bound for `workload` on `hardware`, over the `num_samples` requests drawn with
    `seed` that `capacity_bound` averages over with the same arguments (a replayed trace:
    seed `seed`'s window of it)."""
    latency, sample = bound_sample(workload, hardware, num_samples, seed)
    prompt, output = sample.prompt_lens.astype(np.int64), sample.output_lens.astype(np.int64)
    demand = request_demand(latency, limits, prompt, output, charged_prompts(sample, limits))
    tokens = np.arange(1, limits.max_num_batched_tokens + 1)
    non_attention = latency.non_attention_time(tokens).astype(np.float64)
    return bound_of(
        demand, non_attention, latency.kv_capacity_blocks(limits.block_size), limits.block_size
    )


def request_demand(
    latency: GroundTruthLatency,
    limits: EngineLimits,
    prompt: IntArray,
    output: IntArray,
    computed: IntArray | None = None,
) -> RequestDemand:
    """Tokens, held blocks and least attention of requests of these prompt and output
    lengths (tokens), averaged; `computed`: the prompt tokens each must compute (less its
    best-case prefix hit; all of them by default), which also stand for its blocks (shared
    ones counted once, a relaxation)."""
    computed = prompt if computed is None else computed
    if prompt.size == 0 or np.any(computed < 1) or np.any(output < 1):
        raise ValueError("the memory-aware bound needs requests of ≥ 1 prompt and output token")
    c, d = computed.astype(np.float64), output.astype(np.float64)
    attention = least_prefill_attention(
        latency, computed, limits.max_num_batched_tokens
    ) + least_decode_attention(latency, prompt.astype(np.float64), d)
    return RequestDemand(
        float(np.mean(c + d - 1)),
        float(np.mean(held_blocks(computed, output, limits.block_size))),
        float(attention.mean()),
    )


def held_blocks(prompt: IntArray, output: IntArray, block_size: int) -> IntArray:
    """Per request, Σ_{t=P}^{P+D−1} ⌈t/s⌉: the blocks of its held tokens, added up."""
    first = -(-prompt // block_size)  # blocks at t = P
    last = -(-(prompt + output - 1) // block_size)  # blocks at t = P + D − 1
    # Tokens t with ⌈t/s⌉ = b for b strictly between: s each; the two ends: what is left.
    at_first = np.minimum(first * block_size, prompt + output - 1) - prompt + 1
    at_last = np.where(last > first, prompt + output - 1 - (last - 1) * block_size, 0)
    middle = np.maximum(last - first - 1, 0)
    between = block_size * (first + last) * middle // 2  # b from first + 1 to last − 1
    total: IntArray = first * at_first + last * at_last + between
    return total


def bound_of(
    demand: RequestDemand, non_attention: FloatArray, kv_blocks: int, block_size: int
) -> MemoryBound:
    """The bound for `demand` on a cache of `kv_blocks` blocks, with `non_attention[N − 1]`
    = NA(N) for N = 1 … max_num_batched_tokens (s)."""
    if kv_blocks < 1:
        raise ValueError(f"the memory-aware bound needs KV blocks, got {kv_blocks}")
    sizes = np.arange(1, non_attention.size + 1, dtype=np.float64)
    per_block = demand.held_blocks / kv_blocks  # iterations per request, at least
    # max α·H/B + β·tokens over α ≥ 0, β free, α + β·N ≤ NA(N) for every N.
    result = linprog(
        [-per_block, -demand.tokens],
        A_ub=np.column_stack((np.ones_like(sizes), sizes)),
        b_ub=non_attention,
        bounds=[(0.0, None), (None, None)],
        method="highs",
    )
    if result.status != 0:
        raise RuntimeError(f"the memory-aware bound's program failed: {result.message}")
    alpha, beta = (float(v) for v in result.x)
    least_na, best_per_token = float(non_attention.min()), float(np.min(non_attention / sizes))
    seconds = max(
        alpha * per_block + beta * demand.tokens,
        least_na * per_block,
        best_per_token * demand.tokens,
    )  # the solver's optimum, never below its two ends (tolerances)
    return MemoryBound(
        rate=1.0 / (seconds + demand.attention),
        compute=1.0 / (best_per_token * demand.tokens + demand.attention),
        kv=1.0 / (least_na * per_block + demand.attention),
        kv_blocks=kv_blocks,
        block_size=block_size,
        held_blocks=demand.held_blocks,
        block_seconds=least_na * demand.held_blocks,
        batch_tokens=demand.tokens / per_block,
        line=(alpha, beta),
    )


def describe_memory_bound(bound: MemoryBound) -> str:
    """One line: the bound, its two parts and which binds."""
    return (
        f"memory-aware bound {bound.rate:.3f} req/s = {bound.share_of_capacity:.0%} of the "
        f"compute part {bound.compute:.3f} (KV part {bound.kv:.3f}; {bound.kv_blocks} blocks "
        f"of {bound.block_size}, a full cache serves {bound.batch_tokens:,.0f} tokens per "
        f"iteration on average); binds: {bound.binding}"
    )
