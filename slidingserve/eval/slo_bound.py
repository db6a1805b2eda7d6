"""An SLO-aware upper bound on goodput: a fluid linear program over iteration shapes.

The capacity bound (`capacity.py`) charges every token at the cheapest batch size and
ignores TBT. This bound adds what the SLOs force on any schedule, and stays an upper bound:
each step below only drops or weakens something a real schedule must satisfy.

**Setting.** A schedule serves the workload in steady state at a mean arrival rate λ (req/s)
and every request meets its SLO (see "What it does not cover"). Over a long run, x_jb is
the number of iterations per second of shape j = (c_j prefill tokens, n_j decodes), with
c_j + n_j ≤ max_num_batched_tokens and n_j ≤ max_num_seqs, whose decodes read contexts of
bin b. The bound is the largest λ of this linear program (`scipy.optimize.linprog`):

1. *GPU time*, in the capacity bound's accounting. An iteration's noise-free time is its
   non-attention time NA(c + n) (`GroundTruthLatency.non_attention_time`) plus attention,
   and attention is at least additive per request: A = E[its prefill attention at the least
   chunking + its decode attention without the per-iteration constant], exactly as
   capacity.py computes them. So Σ x_jb NA(c_j + n_j) + λ·A ≤ 1.
2. *Tokens.* Σ x_jb c_j ≥ λ·E[P] (preemption only adds recomputed tokens). A request's
   D − 1 decodes read P, P + 1, …, P + D − 2 cached tokens (its first token comes out of its
   last prefill chunk); the contexts are split into `CONTEXT_BINS` bins of equal decode
   count and Σ_j x_jb n_j ≥ λ·E[decodes of a request in bin b] for every bin b.
3. *TBT, by Little's law.* A request's decode phase runs from its first token (f) to its
   last (e). The iterations that hold one of its decodes lie inside [f, e] one after the
   other, so Σ over iterations of n·(iteration time) ≤ Σ_i (e_i − f_i). Under cumulative
   deadlines (docs/design.md §1) e_i ≤ a_i + L_ttft + (D_i − 1)·L_tbt, and f_i ≥ a_i + ℓ_i, where
   ℓ_i = max(⌈P/B⌉·NA(1), τ*·P) + its least prefill attention is the least time to a first
   token (the prefill runs in at least ⌈P/B⌉ iterations, one after the other, each at least
   NA(1), and their non-attention time is at least τ* = min NA(N)/N per token). Per second:
   Σ x_jb n_j T_jb ≤ λ·R with R = E[L_ttft + (D − 1)·L_tbt − ℓ] (0 for D = 1), each request
   with its own class or tier SLO, so mixed workloads and tiers need no relaxation.
   T_jb ≤ the iteration's time: NA + the decode attention of n decodes all at the lowest
   context of bin b + max(a, 2c·√(a·q)), the least prefill attention of c tokens in any
   number k of chunks (k·a + q·Σ chunk² ≥ k·a + q·c²/k; the cached-tokens term is dropped;
   all attention coefficients are non-negative, which is checked). Little's law holds for
   any stationary arrivals, and the per-gap TBT reading is stricter than the cumulative one.
4. *Decoders present* (Poisson arrivals without an overload window, tiers dealt at random).
   The n decodes of an iteration belong to requests in their decode phase, and request i
   can only be in it while a_i + ℓ_i ≤ t < a_i + L_ttft + (D_i − 1)·L_tbt. The number U(t)
   of requests inside that window depends on the arrivals alone, not on the schedule; with
   Poisson arrivals and independent lengths and SLOs it is Poisson with mean λ·R at every
   instant (M/G/∞). So the long-run share of time spent in iterations of more than u
   decodes is at most P(U > u): Σ_{n_j > u} x_jb T_jb ≤ P(Poisson(λ·R) > u) for
   `PRESENCE_THRESHOLDS` values of u. The right side grows with λ, so it is evaluated at a
   rate known to be above every feasible one (first the capacity bound, then the last bound
   found), and the program is solved again until the bound stops falling: every solve is a
   valid bound, each below the one before.
5. *The capacity bound itself*: λ ≤ capacity. When TBT and TTFT are loose, (3) and (4) are
   slack and the bound is the capacity bound exactly (one cost model for both).

**Exact over shapes.** No grid. An iteration whose decodes read contexts of several bins is
a convex combination of single-bin shapes with the same c and n (every coefficient is
linear in the bins' shares), so single-bin columns suffice. NA is piecewise linear in the
batch's tokens, so for a fixed n every coefficient is linear in c between NA's kinks and
the prefill-attention bound's one kink, and a shape inside such a stretch is a convex
combination of its ends. The candidates are every n from 0 to its limit, every c at those
breakpoints, every bin; column generation prices them all and adds the improving ones
until none is left, so the optimum is the program's over every shape.

**Relaxations** (each makes the bound higher, never lower): decode contexts at the lowest
of their bin (more bins: tighter, slower); prefill requests do not count against
max_num_seqs; no KV-cache limit; the per-iteration constant of decode attention is left
out of the GPU time (as in the capacity bound); the simulator's noise has mean one. With
an overload window λ is the mean rate, above the base rate a goodput search reports.

**What it does not cover.** Like the capacity bound, it bounds the rate at which every
request meets its SLO in steady state. A request that cannot meet its SLO even alone on
the GPU (ℓ_i > L_ttft, or its D − 1 decodes, one per iteration of at least NA(1) plus its
own attention, outlast its window) fails under every policy: such requests (`unattainable`)
are left out of (3) and (4) and their decodes are charged like prefill tokens (without the
prefill-attention term of T, since a shape's c then mixes both). The rate then bounds
the rate at which every attainable request meets its SLO, and it can rise as the SLOs
tighten and more requests drop out; with more than 1% unattainable every policy's goodput
is 0. Goodput lets 1% of requests fail, and a finite trial starts empty and can end before
its backlog grows: a measured goodput may pass the bound by about TTFT / trial length plus
the work of the requests a passing run gives up on (README, capacity bound).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog
from scipy.stats import poisson

from slidingserve.core.view import EngineLimits
from slidingserve.eval.capacity import (
    capacity_bound,
    least_decode_attention,
    least_prefill_attention,
)
from slidingserve.eval.prefix_savings import computed_prompts
from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig, load_model
from slidingserve.workloads import WorkloadConfig, generate_requests

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

CONTEXT_BINS = 8  # decode-context bins of constraint 2: more is tighter and slower
PRESENCE_THRESHOLDS = 16  # values of u in constraint 4
CAPACITY, GPU_TIME, TBT, PRESENCE = "capacity", "gpu-time", "tbt", "decoders-present"
CONSTRAINTS = (CAPACITY, GPU_TIME, TBT, PRESENCE)  # what `SloAwareBound.binding` names

_PRESENCE_RANGE = (0.5, 1.0 - 1e-6)  # thresholds u: Poisson quantiles over this range
_FIXED_POINT_STEPS = 12  # most solves of the program while constraint 4 tightens
_FIXED_POINT_TOLERANCE = 1e-3  # stop when the bound falls by less than this (relative)
_COLUMNS_PER_ROUND = 16  # entering shapes per context bin and pricing round
_TOLERANCE = 1e-9  # reduced costs and duals (seconds-scale coefficients)


class IterationShare(NamedTuple):
    """One iteration shape of the optimum and how often it runs."""

    prefill_tokens: int
    decodes: int
    per_second: float  # iterations of this shape per second
    seconds: float  # its non-attention time (attention is charged per request)


@dataclass(frozen=True, slots=True)
class SloAwareBound:
    """The goodput no scheduler sustains beyond, and what holds it there."""

    rate: float  # req/s at most, with every attainable request meeting its SLO
    capacity: float  # req/s: the capacity bound, which ignores the SLOs
    binding: tuple[str, ...]  # constraints with a positive dual (names in CONSTRAINTS)
    mix: tuple[IterationShare, ...]  # the optimum's iterations, most GPU time first
    decode_budget: float  # s: R, the mean time a request may spend in its decode phase
    unattainable: float  # share of requests that miss their SLO even alone on the GPU

    @property
    def share_of_capacity(self) -> float:
        return self.rate / self.capacity


@dataclass(frozen=True)
class FluidProgram:
    """Constraints 1–5 of the module docstring over explicit iteration shapes.

    Shape j runs `prefill[j]` prefill tokens and `decodes[j]` decodes and costs `busy[j]`
    seconds of GPU time; with its decodes reading contexts of bin b it lasts at least
    `hold[b, j]` seconds. Demands are per request.
    """

    prefill: IntArray  # (J,) tokens
    decodes: IntArray  # (J,) requests
    busy: FloatArray  # (J,) s: the shape's cost in the GPU-time row
    hold: FloatArray  # (bins, J) s: least time of the iteration, decodes in bin b
    prefill_demand: float  # tokens per request
    decode_demand: FloatArray  # (bins,) decodes per request in each bin
    request_seconds: float  # s per request charged to GPU time outside the shapes (A)
    decode_budget: float  # s: R
    max_rate: float  # req/s: constraint 5
    thresholds: IntArray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    tails: FloatArray = dataclasses.field(default_factory=lambda: np.zeros(0))  # P(U > u)


class ProgramSolution(NamedTuple):
    """The optimum of a `FluidProgram`."""

    rate: float  # req/s
    flows: tuple[tuple[int, int, float], ...]  # (bin, shape, iterations per second), > 0
    binding: tuple[str, ...]  # names in CONSTRAINTS with a positive dual


def slo_aware_bound(
    workload: WorkloadConfig,
    hardware: HardwareConfig,
    limits: EngineLimits,
    num_samples: int = 4000,
    seed: int = 0,
) -> SloAwareBound:
    """The bound for `workload` on `hardware`, from `num_samples` requests drawn with `seed`
    (with the same arguments `capacity_bound` averages over the same requests)."""
    latency = GroundTruthLatency(dataclasses.replace(hardware, noise=0.0))
    _check_attention(latency)
    capacity = capacity_bound(workload, hardware, limits, num_samples, seed)
    demand = _demand(workload, latency, limits, capacity.token_seconds, num_samples, seed)
    base = _program(latency, limits, demand, capacity.rate)
    solution = _tightest(base, capacity.rate, _presence_applies(workload))
    return SloAwareBound(
        rate=solution.rate,
        capacity=capacity.rate,
        binding=solution.binding,
        mix=_mix(base, solution),
        decode_budget=base.decode_budget,
        unattainable=demand.unattainable,
    )


def describe(bound: SloAwareBound, shapes: int = 3) -> str:
    """One line: the bound, its share of the capacity bound, what binds, the main shapes."""
    busiest = ", ".join(
        f"{s.prefill_tokens}+{s.decodes} ×{s.per_second:.2f}/s ({s.seconds * 1e3:.0f} ms)"
        for s in bound.mix[:shapes]
    )
    failing = f"; {bound.unattainable:.1%} cannot meet their SLO" if bound.unattainable else ""
    return (
        f"SLO-aware bound {bound.rate:.3f} req/s = {bound.share_of_capacity:.0%} of capacity "
        f"{bound.capacity:.3f}; binding: {', '.join(bound.binding) or 'none'}; "
        f"mix (prefill+decodes): {busiest}{failing}"
    )


def solve_program(
    program: FluidProgram, columns: frozenset[tuple[int, int]] | None = None
) -> tuple[ProgramSolution, frozenset[tuple[int, int]]]:
    """The optimum over every shape, by column generation from `columns` ((bin, shape)
    pairs, e.g. the last call's); also returns the columns it ended with."""
    chosen = set(columns) if columns is not None else _initial_columns(program)
    while True:
        ordered = sorted(chosen)
        result = _solve_restricted(program, ordered)
        entering = _price(program, -result.ineqlin.marginals) - chosen
        if not entering:
            return _solution(program, ordered, result), frozenset(chosen)
        chosen |= entering


def _tightest(base: FluidProgram, start: float, presence: bool) -> ProgramSolution:
    """`base` solved, with constraint 4 at the last bound found until it stops falling
    (module docstring, step 4): every solve gives a valid bound, each below the last."""
    if not presence:
        return solve_program(base)[0]
    solution, columns = solve_program(_with_presence(base, start))
    for _ in range(_FIXED_POINT_STEPS - 1):
        previous = solution.rate
        solution, columns = solve_program(_with_presence(base, previous), columns)
        if solution.rate >= previous * (1 - _FIXED_POINT_TOLERANCE):
            break
    return solution


class _Demand(NamedTuple):
    """Per-request averages over the sample (module docstring, constraints 1–4)."""

    prefill_tokens: float  # E[P], plus the decodes of unattainable requests
    decode_steps: FloatArray  # (bins,) decodes per request with a context in each bin
    bin_contexts: FloatArray  # (bins,) lowest context in each bin, tokens
    attention_seconds: float  # A
    decode_budget: float  # R, s
    unattainable: float  # share of requests that cannot meet their SLO at all


def _demand(
    workload: WorkloadConfig,
    latency: GroundTruthLatency,
    limits: EngineLimits,
    token_seconds: float,
    num_samples: int,
    seed: int,
) -> _Demand:
    """What the requests need (constraints 1–4), over the `num_samples` requests drawn with
    `seed` that `capacity_bound` averages over with the same arguments."""
    count = workload.num_requests if workload.replays else num_samples  # a replay: its window
    config = dataclasses.replace(workload, num_requests=count)
    requests = generate_requests(config, 1.0, seed, load_model(latency.config.model).max_model_len)
    prompt = np.array([r.prompt_len for r in requests], dtype=np.int64)
    output = np.array([r.output_len for r in requests], dtype=np.float64)
    ttft = np.array([r.slo.ttft for r in requests])
    tbt = np.array([r.slo.tbt for r in requests])
    budget = limits.max_num_batched_tokens
    computed = computed_prompts(  # less the best-case prefix hits (`prefix_savings.py`)
        [r.content for r in requests],
        prompt,
        output.astype(np.int64),
        limits.block_size,
        limits.prefix_caching,
    )
    tokens = computed.astype(np.float64)
    least_na = float(np.min(latency.non_attention_time(np.arange(1, budget + 1))))
    prefill_attention = least_prefill_attention(latency, computed, budget)
    first_token = (
        np.maximum(np.ceil(tokens / budget) * least_na, token_seconds * tokens) + prefill_attention
    )
    window = ttft + (output - 1) * tbt - first_token  # longest decode phase that meets the SLO
    decode_phase = _least_decode_phase(latency, least_na, prompt.astype(np.float64), output)
    unattainable = (first_token > ttft) | (window < decode_phase)
    decoding = ~unattainable & (output >= 2)
    steps, contexts = _decode_bins(prompt[decoding], output[decoding].astype(np.int64))
    exempt_decodes = float(np.sum((output - 1)[unattainable]))
    return _Demand(
        prefill_tokens=float(tokens.mean()) + exempt_decodes / count,  # per request of the
        decode_steps=steps / count,  # sample (a replayed window has its own count)
        bin_contexts=contexts,
        attention_seconds=float(
            np.mean(
                prefill_attention
                + least_decode_attention(latency, prompt.astype(np.float64), output)
            )
        ),
        decode_budget=float(np.where(decoding, window, 0.0).mean()),
        unattainable=float(unattainable.mean()),
    )


def _least_decode_phase(
    latency: GroundTruthLatency, least_na: float, prompt: FloatArray, output: FloatArray
) -> FloatArray:
    """Per request, the least time from its first token to its last: D − 1 iterations one
    after the other, each at least NA(1) plus the attention of its decode alone."""
    steps = output - 1
    kv_read = steps * prompt + steps * (steps - 1) / 2
    alone = float(latency.decode_attention_time(1, 0))
    per_kv = float(latency.decode_attention_time(1, 1)) - alone
    seconds: FloatArray = steps * (least_na + alone) + per_kv * kv_read
    return seconds


def _decode_bins(prompt: IntArray, output: IntArray) -> tuple[FloatArray, FloatArray]:
    """Decode steps in each of up to CONTEXT_BINS context bins of equal count, and the
    lowest context in each (one empty bin at context 0 when nothing decodes)."""
    ends = prompt + output - 1  # contexts prompt .. ends − 1
    if not ends.size or not np.any(ends > prompt):
        return np.zeros(1), np.zeros(1)
    change = np.zeros(int(ends.max()) + 1)
    np.add.at(change, prompt, 1.0)
    np.add.at(change, ends, -1.0)
    per_context = np.cumsum(change)  # decodes reading each context
    cumulative = np.cumsum(per_context)
    cuts = np.searchsorted(cumulative, cumulative[-1] * np.arange(1, CONTEXT_BINS) / CONTEXT_BINS)
    edges = np.unique(np.concatenate(([0], cuts + 1, [per_context.size])))
    steps = np.add.reduceat(per_context, edges[:-1])
    present = np.flatnonzero(per_context > 0)
    lowest = present[np.searchsorted(present, edges[:-1])[steps > 0]]
    return steps[steps > 0], lowest.astype(np.float64)


def _program(
    latency: GroundTruthLatency, limits: EngineLimits, demand: _Demand, max_rate: float
) -> FluidProgram:
    """Every candidate shape (module docstring, "Exact over shapes") with its costs."""
    budget = limits.max_num_batched_tokens
    non_attention = latency.non_attention_time(np.arange(budget + 1))
    least_chunk, kink = _least_chunk_attention(latency, budget)
    if demand.unattainable:
        least_chunk = np.zeros_like(least_chunk)  # a shape's c also holds exempt decodes
    prefill, decodes = _candidate_shapes(non_attention, kink, budget, limits.max_num_seqs)
    busy = non_attention[prefill + decodes]
    kv = decodes[None, :] * demand.bin_contexts[:, None]
    hold = busy + least_chunk[prefill] + latency.decode_attention_time(decodes[None, :], kv)
    return FluidProgram(
        prefill=prefill,
        decodes=decodes,
        busy=busy,
        hold=hold,
        prefill_demand=demand.prefill_tokens,
        decode_demand=demand.decode_steps,
        request_seconds=demand.attention_seconds,
        decode_budget=demand.decode_budget,
        max_rate=max_rate,
    )


def _check_attention(latency: GroundTruthLatency) -> None:
    """ValueError unless every attention coefficient is non-negative, as the lower bounds of
    the iteration time assume (module docstring, step 3)."""
    one, two = (float(latency.decode_attention_time(n, 0)) for n in (1, 2))
    per_kv = float(latency.decode_attention_time(1, 1)) - one
    coefficients = (*latency.prefill_attention_coefficients(), 2 * one - two, two - one, per_kv)
    if min(coefficients) < 0:
        raise ValueError(f"the SLO-aware bound needs non-negative attention fits: {coefficients}")


def _least_chunk_attention(latency: GroundTruthLatency, budget: int) -> tuple[FloatArray, int]:
    """Least prefill attention (s) of an iteration with c = 0..budget prefill tokens in any
    number of chunks, max(a, 2c·√(a·q)), and the c where its two pieces meet."""
    fixed, _, squared = latency.prefill_attention_coefficients()
    tokens = np.arange(budget + 1, dtype=np.float64)
    if fixed <= 0 or squared <= 0:
        return np.zeros(budget + 1), 0  # no positive term to bound it by
    slope = 2 * math.sqrt(fixed * squared)
    seconds = np.where(tokens > 0, np.maximum(fixed, slope * tokens), 0.0)
    return seconds, math.floor(fixed / slope)


def _candidate_shapes(
    non_attention: FloatArray, kink: int, budget: int, max_seqs: int
) -> tuple[IntArray, IntArray]:
    """(prefill, decodes) of every shape at a breakpoint: every decode count, and the
    prefill counts where a coefficient's slope in c may change."""
    second = non_attention[2:] - 2 * non_attention[1:-1] + non_attention[:-2]
    kinks = np.flatnonzero(np.abs(second) > 1e-15) + 1  # where NA bends (noise: ~1e-18 s)
    prefill, decodes = [], []
    for n in range(min(max_seqs, budget) + 1):
        points = np.concatenate(([0, 1, kink, kink + 1, budget - n], kinks - n))
        points = np.unique(points[(points >= 0) & (points <= budget - n) & (points + n >= 1)])
        prefill.append(points)
        decodes.append(np.full(points.size, n))
    return np.concatenate(prefill).astype(np.int64), np.concatenate(decodes).astype(np.int64)


def _presence_applies(workload: WorkloadConfig) -> bool:
    """Whether U(t) of constraint 4 is Poisson: Poisson arrivals, independent SLOs."""
    arrival = workload.arrival
    random_tiers = workload.tiers is None or workload.tiers.assignment == "random"
    return arrival.process == "poisson" and arrival.overload is None and random_tiers


def _with_presence(program: FluidProgram, rate: float) -> FluidProgram:
    """`program` with constraint 4 for U ~ Poisson(rate · R)."""
    mean = rate * program.decode_budget
    if mean <= 0:
        return program  # nothing decodes
    low, high = poisson.ppf(_PRESENCE_RANGE, mean)
    limit = int(program.decodes.max())
    points = np.unique(np.linspace(low, high, PRESENCE_THRESHOLDS).astype(np.int64))
    thresholds = points[points < limit]
    return dataclasses.replace(program, thresholds=thresholds, tails=poisson.sf(thresholds, mean))


def _initial_columns(program: FluidProgram) -> set[tuple[int, int]]:
    """The largest pure-prefill shape and, per bin, the largest pure-decode one."""
    pure_prefill = np.flatnonzero(program.decodes == 0)
    columns = {(0, int(pure_prefill[np.argmax(program.prefill[pure_prefill])]))}
    pure_decode = np.flatnonzero(program.prefill == 0)
    largest = int(pure_decode[np.argmax(program.decodes[pure_decode])])
    return columns | {(b, largest) for b in range(program.decode_demand.size)}


class _Rows(NamedTuple):
    """Row indices of the program's ≤ constraints."""

    prefill: int
    decode: int  # first of one row per bin
    tbt: int
    presence: int  # first of one row per threshold
    total: int


def _rows(program: FluidProgram) -> _Rows:
    bins = program.decode_demand.size
    return _Rows(1, 2, 2 + bins, 3 + bins, 3 + bins + program.thresholds.size)


def _solve_restricted(program: FluidProgram, columns: list[tuple[int, int]]) -> Any:
    """linprog's result over λ and the given (bin, shape) columns; row 0 is GPU time."""
    rows = _rows(program)
    bins = np.array([b for b, _ in columns], dtype=np.int64)
    shapes = np.array([j for _, j in columns], dtype=np.int64)
    matrix = np.zeros((rows.total, len(columns) + 1))
    matrix[0, 0] = program.request_seconds
    matrix[rows.prefill, 0] = program.prefill_demand
    matrix[rows.decode : rows.tbt, 0] = program.decode_demand
    matrix[rows.tbt, 0] = -program.decode_budget
    decodes = program.decodes[shapes].astype(np.float64)
    hold = program.hold[bins, shapes]
    matrix[0, 1:] = program.busy[shapes]
    matrix[rows.prefill, 1:] = -program.prefill[shapes]
    matrix[rows.decode + bins, np.arange(1, len(columns) + 1)] = -decodes
    matrix[rows.tbt, 1:] = decodes * hold
    above = decodes[None, :] > program.thresholds[:, None]
    matrix[rows.presence :, 1:] = np.where(above, hold[None, :], 0.0)
    limits = np.concatenate(([1.0], np.zeros(rows.presence - 1), program.tails))
    objective = np.zeros(len(columns) + 1)
    objective[0] = -1.0
    bounds = [(0.0, program.max_rate)] + [(0.0, None)] * len(columns)
    result = linprog(objective, A_ub=matrix, b_ub=limits, bounds=bounds, method="highs")
    if result.status != 0:
        raise RuntimeError(f"the SLO-aware bound's program failed: {result.message}")
    return result


def _price(program: FluidProgram, duals: FloatArray) -> set[tuple[int, int]]:
    """(bin, shape) columns with a negative reduced cost under `duals` (≥ 0, one per row),
    the most negative `_COLUMNS_PER_ROUND` of each bin."""
    rows = _rows(program)
    decodes = program.decodes.astype(np.float64)
    above = np.arange(int(program.decodes.max()) + 1)[:, None] > program.thresholds[None, :]
    per_hold = above @ duals[rows.presence :]  # Σ of the presence duals with n > u
    hold_weight = duals[rows.tbt] * decodes + per_hold[program.decodes]
    shared = duals[0] * program.busy - duals[rows.prefill] * program.prefill
    entering: set[tuple[int, int]] = set()
    for b in range(program.decode_demand.size):
        cost = shared + np.where(
            decodes > 0, -duals[rows.decode + b] * decodes + hold_weight * program.hold[b], 0.0
        )
        if b:
            cost = np.where(decodes > 0, cost, np.inf)  # a decode-free shape needs no bin
        best = np.argsort(cost)[:_COLUMNS_PER_ROUND]
        entering |= {(b, int(j)) for j in best if cost[j] < -_TOLERANCE}
    return entering


def _solution(
    program: FluidProgram, columns: list[tuple[int, int]], result: Any
) -> ProgramSolution:
    values = result.x
    rate = max(0.0, float(values[0]))  # the solver may return −1e-12
    duals = -result.ineqlin.marginals
    rows = _rows(program)
    flows = tuple(
        (b, j, float(v)) for (b, j), v in zip(columns, values[1:], strict=True) if v > _TOLERANCE
    )
    positive = {
        CAPACITY: -result.upper.marginals[0] > _TOLERANCE,
        GPU_TIME: duals[0] > _TOLERANCE,
        TBT: duals[rows.tbt] > _TOLERANCE,
        PRESENCE: bool(np.any(duals[rows.presence :] > _TOLERANCE)),
    }
    return ProgramSolution(rate, flows, tuple(n for n in CONSTRAINTS if positive[n]))


def _mix(program: FluidProgram, solution: ProgramSolution) -> tuple[IterationShare, ...]:
    """The solution's flows summed over bins, most GPU time first."""
    per_shape: dict[int, float] = {}
    for _, shape, per_second in solution.flows:
        per_shape[shape] = per_shape.get(shape, 0.0) + per_second
    shares = [
        IterationShare(
            int(program.prefill[j]), int(program.decodes[j]), rate, float(program.busy[j])
        )
        for j, rate in per_shape.items()
    ]
    return tuple(sorted(shares, key=lambda s: s.per_second * s.seconds, reverse=True))
