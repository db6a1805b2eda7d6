"""The seven features of a batch (SPEC §3), and their fast evaluation along a prefill queue."""

from __future__ import annotations

import enum
from bisect import bisect_left
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.batch import BatchShape

NUM_FEATURES = 7


class Scenario(enum.Enum):
    """Which phases a batch holds; each scenario has its own linear expert."""

    DECODE_ONLY = "decode_only"
    PREFILL_ONLY = "prefill_only"
    MIXED = "mixed"


class Features(NamedTuple):
    """x1..x7 of SPEC §3, in tokens or token products (ints stored as given)."""

    prefill_attention: float  # x1 = Σ_P c(u + c): chunk × context
    prefill_square: float  # x2 = Σ_P c²: attention inside the chunks
    cached_tokens: float  # x3 = Σ_all u: KV tokens of every entry (memory pressure)
    num_decodes: float  # x4 = |D|
    decode_kv: float  # x5 = Σ_D u: KV read by the decodes
    prefill_tokens: float  # x6 = Σ_P c
    max_chunk: float  # x7 = max_P c (0 without prefills)


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
    scenario = scenario_of(len(shape.decode_contexts), len(shape.prefill_chunks))
    decode_kv = sum(shape.decode_contexts)
    chunks = shape.prefill_chunks
    x = Features(
        prefill_attention=sum(c * (u + c) for c, u in chunks),
        prefill_square=sum(c * c for c, _ in chunks),
        cached_tokens=decode_kv + sum(u for _, u in chunks),
        num_decodes=len(shape.decode_contexts),
        decode_kv=decode_kv,
        prefill_tokens=sum(c for c, _ in chunks),
        max_chunk=max((c for c, _ in chunks), default=0),
    )
    return BatchFeatures(scenario, x)


class PrefillCandidate(NamedTuple):
    """A request in the sorted prefill queue."""

    remaining: int  # r_j: prefill tokens still to compute, ≥ 1
    cached: int  # u_j: tokens already in its KV cache


class PrefillQueueProfile:
    """Features of "all decodes plus the first b prefill tokens of the queue", for any b.

    The queue is filled greedily in order, each request taking min(r_j, tokens left), as
    the scheduler's candidate batch does (SPEC §2). Building is O(n) over the queue;
    `features_at` is O(log n) from prefix sums, so TimeToBudget can probe it cheaply.
    """

    __slots__ = (
        "_cached",
        "_cum_attention",
        "_cum_cached",
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
            x = Features(0, 0, decode_kv, num_decodes, decode_kv, 0, 0)
            self._decode_only = BatchFeatures(Scenario.DECODE_ONLY, x)
        self._build_prefix_sums(candidates)

    def _build_prefix_sums(self, candidates: Sequence[tuple[int, int]]) -> None:
        cum_remaining, cum_attention, cum_square, cum_cached = [0], [0], [0], [0]
        prefix_max, cached = [0], []
        total_r = total_attention = total_square = total_cached = largest = 0
        for r, u in candidates:
            if r < 1 or u < 0:
                raise ValueError(f"bad prefill candidate (remaining={r}, cached={u})")
            total_r += r
            total_attention += r * (u + r)
            total_square += r * r
            total_cached += u
            largest = max(largest, r)
            cum_remaining.append(total_r)
            cum_attention.append(total_attention)
            cum_square.append(total_square)
            cum_cached.append(total_cached)
            prefix_max.append(largest)
            cached.append(u)
        self._cum_remaining = cum_remaining
        self._cum_attention = cum_attention
        self._cum_square = cum_square
        self._cum_cached = cum_cached
        self._prefix_max = prefix_max
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
        cum_remaining = self._cum_remaining
        # Requests 0..k-2 are full; request k-1 takes what is left (possibly all of it).
        k = bisect_left(cum_remaining, b)
        c = b - cum_remaining[k - 1]
        u = self._cached[k - 1]
        largest = self._prefix_max[k - 1]
        decode_kv = self._decode_kv
        x = Features(
            self._cum_attention[k - 1] + c * (u + c),
            self._cum_square[k - 1] + c * c,
            decode_kv + self._cum_cached[k],
            self._num_decodes,
            decode_kv,
            b,
            c if c > largest else largest,
        )
        return BatchFeatures(self._scenario, x)

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
