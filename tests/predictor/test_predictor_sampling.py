from __future__ import annotations

import numpy as np
import pytest

from slidingserve.core.batch import BatchShape
from slidingserve.predictor import Scenario, batch_features, fit_from_timer, random_batch_shapes


def convex_timer(shape: BatchShape) -> float:
    """A known law: fixed 5 ms, linear per-token and KV terms, plus a quadratic in tokens."""
    tokens = shape.num_tokens
    attention = sum(c * (u + c) for c, u in shape.prefill_chunks)
    return 0.005 + 2e-5 * tokens + 3e-8 * shape.decode_kv + 2e-10 * attention + 2e-9 * tokens**2


class TestRandomBatchShapes:
    def test_limits_and_mix(self) -> None:
        shapes = random_batch_shapes(3000, np.random.default_rng(0), 512, 4096, 64)
        counts = dict.fromkeys(Scenario, 0)
        for shape in shapes:
            counts[batch_features(shape).scenario] += 1
            assert 1 <= shape.num_tokens <= 512
            assert shape.num_decodes <= 64
            assert all(1 <= u <= 4096 for u in shape.decode_contexts)
            assert all(c >= 1 and u >= 0 and c + u <= 4096 for c, u in shape.prefill_chunks)
        assert all(800 < n < 1200 for n in counts.values())

    def test_covers_small_and_large_batches(self) -> None:
        shapes = random_batch_shapes(2000, np.random.default_rng(1))
        prefill = [s.num_prefill_tokens for s in shapes if s.prefill_chunks]
        assert min(prefill) <= 4
        assert max(prefill) >= 1500
        assert max(s.num_decodes for s in shapes) >= 150

    def test_deterministic_for_a_seed(self) -> None:
        first = random_batch_shapes(50, np.random.default_rng(7))
        assert first == random_batch_shapes(50, np.random.default_rng(7))


class TestFitFromTimer:
    def test_fits_a_convex_law_closely(self) -> None:
        predictor, report = fit_from_timer(convex_timer, 3000, seed=0)
        assert report.overall.n == pytest.approx(600, abs=3)
        assert report.overall.r2 > 0.99
        assert report.overall.mape < 0.03
        shape = BatchShape((1000,) * 32, ((512, 2048),))
        assert predictor.predict(shape) == pytest.approx(convex_timer(shape), rel=0.05)
