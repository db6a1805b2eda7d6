"""`slidingserve profile` end to end: the predictor file holds the steps it was fitted to,
and a QoServe served from it starts from those measured steps."""

from __future__ import annotations

from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm", minversion="0.32")

from slidingserve.cli import main  # noqa: E402
from slidingserve.predictor import load_predictor  # noqa: E402


def test_profile_saves_the_measured_steps_beside_the_fit(
    tiny_model: Path, offline_process: None, tmp_path: Path
) -> None:
    out = tmp_path / "predictor.json"
    assert main(["profile", "--model", str(tiny_model), "--out", str(out), "--repeats", "1"]) == 0
    loaded = load_predictor(out)
    assert len(loaded.batches) >= 50  # every timed step of the profiling traffic
    assert all(batch.seconds > 0 for batch in loaded.batches)
    assert loaded.metadata.num_samples == len(loaded.batches)
