"""`profile --live` end to end: a served engine's step periods, then a simulation of it.

Two servers (about 30 s each to start) serve short bursts of traffic, one at a rate under
`random-chunk`, one all at once under vLLM's order; their step periods must come back as one
engine-steps file that the simulator runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm", minversion="0.32")

from slidingserve.live.compare import LiveSettings  # noqa: E402
from slidingserve.live.server_timing import time_server  # noqa: E402
from slidingserve.live.simulated import simulate_comparison  # noqa: E402


def test_a_served_engine_s_periods_come_back_and_simulate(tiny_model: Path, tmp_path: Path) -> None:
    settings = LiveSettings(
        str(tiny_model), requests=24, repeats=1, max_num_seqs=16, out_dir=tmp_path
    )
    said: list[str] = []
    steps = time_server(settings, tmp_path / "steps.json", rates=(8.0,), say=said.append)
    assert said == [
        "profiled at 8 req/s (random-chunk): 24 requests completed",
        "profiled all at once (vllm): 24 requests completed",
    ]
    assert not (tmp_path / "steps-burst.json").exists()  # merged into steps.json
    assert (steps.max_model_len, steps.max_num_batched_tokens, steps.max_num_seqs) == (
        512, 256, 16,
    )  # fmt: skip
    assert steps.kv_blocks * steps.block_size >= 512 and len(steps.batches) >= 50
    # the burst's full steps: every seat taken, or a full token budget beside the decodes
    assert any(b.shape.num_decodes == 16 or b.shape.num_tokens == 256 for b in steps.batches)
    assert all(batch.shape.num_decodes <= 16 for batch in steps.batches)
    periods = [batch.seconds for batch in steps.batches]
    assert min(periods) > 1e-4 and max(periods) < 5.0
    predicted = simulate_comparison(steps, settings, ["vllm:fcfs"], [2.0], say=lambda _: None)
    assert predicted.rows[0].violation_rate == 0.0 and 0.0 < predicted.slo_scale < 10.0
