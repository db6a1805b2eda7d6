"""Random batch shapes to profile, and fitting a predictor to any timer of them."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from slidingserve.core.batch import BatchShape
from slidingserve.predictor.features import DEFAULT_FEATURES, Sample
from slidingserve.predictor.fit import fit_predictor

if TYPE_CHECKING:
    from collections.abc import Callable

    from slidingserve.predictor.model import BatchLatencyPredictor
    from slidingserve.predictor.report import AccuracyReport

MAX_CHUNKS = 8  # prefill requests per sampled batch, at most


def random_batch_shapes(
    n: int,
    rng: np.random.Generator,
    max_tokens: int = 2048,
    max_context: int = 8192,
    max_decodes: int = 256,
) -> list[BatchShape]:
    """`n` batches, about a third each decode-only, prefill-only and mixed.

    Sizes are log-uniform so small and large batches are both covered: 1..max_decodes
    decodes with contexts up to `max_context`, 1..MAX_CHUNKS prefill chunks with cached
    prefixes (half of them fresh), at most `max_tokens` tokens in all.
    """
    if max_tokens < 2 or max_context < 1 or max_decodes < 1:
        raise ValueError("need max_tokens ≥ 2, max_context ≥ 1 and max_decodes ≥ 1")
    kinds = rng.integers(0, 3, size=n)
    return [_random_shape(int(kind), rng, max_tokens, max_context, max_decodes) for kind in kinds]


def _random_shape(
    kind: int, rng: np.random.Generator, max_tokens: int, max_context: int, max_decodes: int
) -> BatchShape:
    if kind == 0:  # decode-only
        count = _log_uniform(rng, 1, min(max_decodes, max_tokens))
        return BatchShape(_decode_contexts(rng, count, max_context), ())
    if kind == 1:  # prefill-only
        return BatchShape((), _prefill_chunks(rng, max_tokens, max_context))
    count = _log_uniform(rng, 1, min(max_decodes, max_tokens - 1))
    decodes = _decode_contexts(rng, count, max_context)
    return BatchShape(decodes, _prefill_chunks(rng, max_tokens - count, max_context))


def _log_uniform(rng: np.random.Generator, low: int, high: int) -> int:
    """An integer in [low, high], log-uniformly distributed."""
    value = math.exp(rng.uniform(math.log(low), math.log(high + 1)))
    return min(high, max(low, int(value)))


def _decode_contexts(rng: np.random.Generator, count: int, max_context: int) -> tuple[int, ...]:
    """Contexts uniform up to a per-batch level, itself log-uniform (varied Σu for each |D|)."""
    level = _log_uniform(rng, 1, max_context)
    return tuple(int(u) for u in rng.integers(1, level + 1, size=count))


def _prefill_chunks(
    rng: np.random.Generator, budget: int, max_context: int
) -> tuple[tuple[int, int], ...]:
    """1..MAX_CHUNKS chunks of log-uniform total ≤ `budget` tokens, each with its cached prefix."""
    total = _log_uniform(rng, 1, budget)
    count = int(rng.integers(1, min(MAX_CHUNKS, total) + 1))
    cuts = sorted(int(c) for c in rng.choice(total - 1, size=count - 1, replace=False) + 1)
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    return tuple((c, _cached_prefix(rng, c, max_context)) for c in sizes)


def _cached_prefix(rng: np.random.Generator, chunk: int, max_context: int) -> int:
    room = max(0, max_context - chunk)
    if room == 0 or rng.random() < 0.5:
        return 0
    return int(rng.integers(0, room + 1))


def fit_from_timer(
    timer: Callable[[BatchShape], float],
    n_samples: int,
    seed: int = 0,
    validation_fraction: float = 0.2,
    *,
    max_tokens: int = 2048,
    max_context: int = 8192,
    max_decodes: int = 256,
    min_samples_per_scenario: int = 30,
    features: str = DEFAULT_FEATURES,
) -> tuple[BatchLatencyPredictor, AccuracyReport]:
    """Time `n_samples` random batches with `timer` (seconds) and fit a predictor of the
    feature set `features`.

    Returns the predictor and its accuracy on the held-out part of the samples.
    """
    rng = np.random.default_rng(seed)
    shapes = random_batch_shapes(n_samples, rng, max_tokens, max_context, max_decodes)
    samples = [Sample.from_shape(shape, timer(shape)) for shape in shapes]
    result = fit_predictor(
        samples, validation_fraction, seed, min_samples_per_scenario, features=features
    )
    return result.predictor, result.validation
