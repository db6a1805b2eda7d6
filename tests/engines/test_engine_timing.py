"""`save_profile`: the predictor file of `slidingserve profile` carries its measured batches."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from slidingserve.core.batch import TimedBatch
from slidingserve.engines.vllm.engine_timing import save_profile
from slidingserve.predictor import load_predictor, random_batch_shapes
from slidingserve.predictor.steps import EngineSteps

if TYPE_CHECKING:
    from pathlib import Path


def make_steps(count: int = 300) -> EngineSteps:
    shapes = random_batch_shapes(count, np.random.default_rng(3), max_tokens=256, max_decodes=32)
    batches = tuple(TimedBatch(s, 0.003 + 4e-5 * s.num_tokens) for s in shapes)
    return EngineSteps("tiny on vllm", 512, 400, 32, 256, 32, batches)


def test_the_file_holds_the_fit_and_the_batches_it_was_fitted_to(tmp_path: Path) -> None:
    steps = make_steps()
    fit = save_profile(tmp_path / "predictor.json", steps, "/models/tiny-llama", "vllm-cpu")
    loaded = load_predictor(tmp_path / "predictor.json")
    assert loaded.batches == steps.batches
    assert loaded.predictor == fit.predictor
    assert (loaded.metadata.model, loaded.metadata.hardware) == ("tiny-llama", "vllm-cpu")
    assert loaded.metadata.num_samples == 300
    shape = steps.batches[0].shape
    assert loaded.predictor.predict(shape) == pytest.approx(0.003 + 4e-5 * shape.num_tokens, 0.02)
