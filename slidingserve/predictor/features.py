"""The features of a batch (docs/design.md §3), the feature sets a model may weigh, and their fast
evaluation along a prefill queue.

Every batch gets one `Features` vector: the paper's seven (x1..x7) and the richer set's
additions (x8..x13). A linear model weighs the first `width` of them, those of its feature
set: `paper` is exactly the paper's seven; `rich` adds what a GPU's cost also shows, a fixed
cost per prefill chunk, the cached and in-chunk parts of prefill attention apart, matmuls
padded to whole tiles of tokens, and a per-token cost whose slope may change with the batch
size. Every feature is non-decreasing as prefill tokens are added along a queue, so a model
with non-negative weights predicts a non-decreasing time (TimeToBudget relies on it).
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate
from operator import mul
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from slidingserve.core.batch import BatchShape

NUM_FEATURES = 7  # the paper's features, x1..x7
TILE_TOKENS = 128  # rows of a matmul tile: a GEMM over T tokens computes ⌈T/128⌉ row tiles
SEGMENT_KNOTS = (256, 1024, 4096)  # batch sizes (tokens) where the slope may change


class Scenario(enum.Enum):
    """Which phases a batch holds; each scenario has its own linear expert."""

    DECODE_ONLY = "decode_only"
    PREFILL_ONLY = "prefill_only"
    MIXED = "mixed"


class Features(NamedTuple):
    """x1..x7 of docs/design.md §3 and the rich set's x8..x13, in tokens, token products or counts.

    T below is the batch's total tokens, |D| + Σ_P c. Ints are stored as given.
    """

    prefill_attention: float  # x1 = Σ_P c(u + c): chunk × context
    prefill_square: float  # x2 = Σ_P c²: attention inside the chunks
    cached_tokens: float  # x3 = Σ_all u: KV tokens of every entry (memory pressure)
    num_decodes: float  # x4 = |D|
    decode_kv: float  # x5 = Σ_D u: KV read by the decodes
    prefill_tokens: float  # x6 = Σ_P c
    max_chunk: float  # x7 = max_P c (0 without prefills)
    num_prefills: float  # x8 = |P|: prefill chunks, each a fixed attention-kernel cost
    prefill_cached_attention: float  # x9 = Σ_P c·u: chunk × cached prefix (x1 − x2)
    token_tiles: float  # x10 = ⌈T / TILE_TOKENS⌉: row tiles of every matmul
    tokens_over_256: float  # x11: tokens of T past 256, at most 768 (up to 1024)
    tokens_over_1k: float  # x12: tokens of T past 1024, at most 3072 (up to 4096)
    tokens_over_4k: float  # x13: tokens of T past 4096


NUM_RICH_FEATURES = len(Features._fields)


def token_terms(total: int) -> tuple[int, int, int, int]:
    """x10..x13 of a batch of `total` tokens: its matmul row tiles, and its tokens in each
    segment between `SEGMENT_KNOTS` (the last one open-ended)."""
    k1, k2, k3 = SEGMENT_KNOTS
    # Conditional expressions, not min/max: this runs at every TimeToBudget probe.
    first = 0 if total <= k1 else (k2 - k1 if total >= k2 else total - k1)
    second = 0 if total <= k2 else (k3 - k2 if total >= k3 else total - k2)
    return -(-total // TILE_TOKENS), first, second, (total - k3 if total > k3 else 0)


@dataclass(frozen=True, slots=True)
class FeatureSet:
    """The features a linear model weighs: it stores a weight for each of the first `width`
    features, zero outside `columns`."""

    name: str
    columns: tuple[int, ...]  # indices into `Features` the fit may weigh, increasing

    @property
    def width(self) -> int:
        """Weights a model of this set stores: one per feature up to its last column."""
        return self.columns[-1] + 1


PAPER = FeatureSet("paper", tuple(range(NUM_FEATURES)))
# x1 = x9 + x2 is left out: with x9 and x2 apart, causal in-chunk attention may cost less
# per token pair than attention to the cached prefix, which non-negative x1, x2 cannot say.
RICH = FeatureSet("rich", tuple(range(1, NUM_RICH_FEATURES)))
FEATURE_SETS = {PAPER.name: PAPER, RICH.name: RICH}
DEFAULT_FEATURES = RICH.name  # what new fits use; `paper` reproduces the paper's predictor


def feature_set(name: str) -> FeatureSet:
    """The feature set called `name`; ValueError naming the known ones otherwise."""
    try:
        return FEATURE_SETS[name]
    except KeyError:
        raise ValueError(f"unknown feature set {name!r} (known: {list(FEATURE_SETS)})") from None


class BatchFeatures(NamedTuple):
    """A batch reduced to what the predictor needs."""

    scenario: Scenario
    x: Features


def scenario_of(num_decodes: int, num_prefills: int) -> Scenario:
    """The scenario of a batch with these many decode and prefill entries (not both zero)."""
    if num_prefills == 0:
        if num_decodes == 0:
            raise ValueError("an empty batch has no scenario")
        return Scenario.DECODE_ONLY
    return Scenario.MIXED if num_decodes else Scenario.PREFILL_ONLY


def batch_features(shape: BatchShape) -> BatchFeatures:
    """Features and scenario of `shape`; raises ValueError on an empty batch."""
    num_decodes, chunks = len(shape.decode_contexts), shape.prefill_chunks
    scenario = scenario_of(num_decodes, len(chunks))
    decode_kv = sum(shape.decode_contexts)
    prefill_square = sum(c * c for c, _ in chunks)
    cached_attention = sum(c * u for c, u in chunks)
    prefill_tokens = sum(c for c, _ in chunks)
    x = Features(
        cached_attention + prefill_square,
        prefill_square,
        decode_kv + sum(u for _, u in chunks),
        num_decodes,
        decode_kv,
        prefill_tokens,
        max((c for c, _ in chunks), default=0),
        len(chunks),
        cached_attention,
        *token_terms(num_decodes + prefill_tokens),
    )
    return BatchFeatures(scenario, x)


class PrefillCandidate(NamedTuple):
    """A request in the sorted prefill queue."""

    remaining: int  # r_j: prefill tokens still to compute, ≥ 1
    cached: int  # u_j: tokens already in its KV cache


class PrefillQueueProfile:
    """Features of "all decodes plus the first b prefill tokens of the queue", for any b.

    The queue is filled greedily in order, each request taking min(r_j, tokens left), as
    the scheduler's candidate batch does (docs/design.md §2). Building is O(n) over the queue;
    `features_at` is O(log n) from prefix sums, so TimeToBudget can probe it cheaply.
    """

    __slots__ = (
        "_cached",
        "_cum_cached",
        "_cum_cached_attention",
        "_cum_remaining",
        "_cum_square",
        "_decode_kv",
        "_decode_only",
        "_num_decodes",
        "_prefix_max",
        "_scenario",
    )

    def __init__(
        self,
        decode_contexts: Sequence[int],
        candidates: Sequence[tuple[int, int]],
        max_requests: int | None = None,
    ) -> None:
        """`decode_contexts`: u of each decode; `candidates`: (r_j, u_j) in queue order.

        `max_requests` keeps only the first that many candidates (a batch-size cap).
        """
        if max_requests is not None:
            if max_requests < 0:
                raise ValueError(f"max_requests must be ≥ 0, got {max_requests}")
            candidates = candidates[:max_requests]
        num_decodes = len(decode_contexts)
        decode_kv = sum(decode_contexts)
        self._num_decodes = num_decodes
        self._decode_kv = decode_kv
        self._scenario = Scenario.MIXED if num_decodes else Scenario.PREFILL_ONLY
        self._decode_only: BatchFeatures | None = None
        if num_decodes:
            x = Features(
                0, 0, decode_kv, num_decodes, decode_kv, 0, 0, 0, 0, *token_terms(num_decodes)
            )
            self._decode_only = BatchFeatures(Scenario.DECODE_ONLY, x)
        self._build_prefix_sums(candidates)

    def _build_prefix_sums(self, candidates: Sequence[tuple[int, int]]) -> None:
        remaining = [r for r, _ in candidates]
        cached = [u for _, u in candidates]
        if remaining and (min(remaining) < 1 or min(cached) < 0):
            r, u = next((r, u) for r, u in candidates if r < 1 or u < 0)
            raise ValueError(f"bad prefill candidate (remaining={r}, cached={u})")
        self._cum_remaining = [0, *accumulate(remaining)]
        self._cum_cached_attention = [0, *accumulate(map(mul, remaining, cached))]
        self._cum_square = [0, *accumulate(map(mul, remaining, remaining))]
        self._cum_cached = [0, *accumulate(cached)]
        self._prefix_max = [0, *accumulate(remaining, max)]
        self._cached = cached

    @property
    def num_decodes(self) -> int:
        """|D|: decodes in every batch of this profile."""
        return self._num_decodes

    @property
    def capacity(self) -> int:
        """Σ r_j: the most prefill tokens the queue can take, tokens."""
        return self._cum_remaining[-1]

    def features_at(self, b: int) -> BatchFeatures:
        """Features of the decodes plus the first `b` prefill tokens, 0 ≤ b ≤ capacity.

        Raises ValueError for b outside that range and for b = 0 without decodes (empty).
        """
        if b == 0:
            if self._decode_only is None:
                raise ValueError("no decodes and b = 0: the batch is empty")
            return self._decode_only
        self._check(b)
        return BatchFeatures(self._scenario, Features(*self._values_at(b)))

    def _values_at(self, b: int) -> tuple[int, ...]:
        """x1..x13 of the decodes plus the first `b` ≥ 1 prefill tokens, unchecked: the one
        place they are computed (`features_at`, `linear_time`)."""
        cum_remaining = self._cum_remaining
        # Requests 0..k-2 are full; request k-1 takes what is left (possibly all of it).
        k = bisect_left(cum_remaining, b)
        c = b - cum_remaining[k - 1]
        largest = self._prefix_max[k - 1]
        cached_attention = self._cum_cached_attention[k - 1] + c * self._cached[k - 1]
        square = self._cum_square[k - 1] + c * c
        decode_kv, num_decodes = self._decode_kv, self._num_decodes
        return (
            cached_attention + square,
            square,
            decode_kv + self._cum_cached[k],
            num_decodes,
            decode_kv,
            b,
            c if c > largest else largest,
            k,
            cached_attention,
            *token_terms(num_decodes + b),
        )

    @property
    def scenario(self) -> Scenario:
        """The scenario of every batch with b ≥ 1 prefill tokens (mixed with decodes)."""
        return self._scenario

    def linear_time(self, intercept: float, weights: Sequence[float]) -> Callable[[int], float]:
        """f(b) for 1 ≤ b ≤ capacity under the linear model (`intercept`, `weights`) of
        `scenario`: what `features_at(b)` and that model's `predict` give, bit for bit (the
        same features, the same sum in the same order), without the namedtuples and the
        calls between. The predictions TimeToBudget and the SlidingChunker make for b ≥ 1
        go through here when their model tells its linear parts
        (`budget.queue_time_function`). b is not range-checked."""
        values_at, weights = self._values_at, tuple(weights)

        def time_at(b: int) -> float:
            return sum(map(mul, weights, values_at(b)), intercept)

        return time_at

    def _check(self, b: int) -> None:
        if b < 0 or b > self._cum_remaining[-1]:
            raise ValueError(f"b = {b} outside [0, {self._cum_remaining[-1]}] prefill tokens")


class Sample(NamedTuple):
    """One measured batch: what the predictor is fitted and evaluated on."""

    scenario: Scenario
    x: Features
    seconds: float  # measured iteration time, seconds

    @classmethod
    def from_shape(cls, shape: BatchShape, seconds: float) -> Sample:
        """The sample of `shape` measured at `seconds`; ValueError on an empty batch."""
        scenario, x = batch_features(shape)
        return cls(scenario, x, seconds)
