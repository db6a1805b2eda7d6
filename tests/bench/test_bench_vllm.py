"""`bench` against vLLM's OpenAI server scheduled by SlidingServe (the `vllm` extra).

A tiny random Llama is built into a temporary folder, the server runs in a subprocess on
127.0.0.1 and a free port (about 30 s to start), every wait is bounded and the server's
process group is killed at the end whatever happens.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

vllm = pytest.importorskip("vllm", minversion="0.32")

from slidingserve.bench import BenchConfig, run_bench  # noqa: E402
from slidingserve.engines.vllm.server import server_command, server_environment  # noqa: E402
from slidingserve.engines.vllm.tiny_model import make_tiny_llama  # noqa: E402
from slidingserve.live.servers import serving  # noqa: E402
from slidingserve.metrics import Outcome  # noqa: E402
from slidingserve.workloads import WorkloadConfig, get_tier_mix  # noqa: E402

CONTEXT = 512
ENGINE_ARGS = [
    "--served-model-name", "tiny",
    "--max-model-len", str(CONTEXT),
    "--max-num-batched-tokens", "256",
    "--max-num-seqs", "16",
]  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a running tiny-model server scheduled by SlidingServe."""
    model = make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), seed=0)
    log = tmp_path_factory.mktemp("server") / "server.log"

    def command(port: int) -> list[str]:
        return server_command(str(model), "slidingserve", port=port, extra_vllm_args=ENGINE_ARGS)

    with serving(command, server_environment(), log) as base:
        yield base


def test_bench_completes_every_request_with_a_consistent_summary(server: str) -> None:
    workload = WorkloadConfig("mixed-v1", 12, tiers=get_tier_mix("premium-standard"))
    config = BenchConfig(
        server, workload, rate=4.0, progress=False, request_timeout=60.0, max_duration=30.0
    )
    result = run_bench(config)
    s = result.summary.metrics
    assert result.model == "tiny" and result.max_model_len == CONTEXT
    assert result.errors == {}, result.error_messages
    assert (s.completed, s.failed, s.cancelled, result.summary.not_sent) == (12, 0, 0, 0)
    for record in result.records:
        line = record.timeline
        assert line.outcome is Outcome.COMPLETED
        assert record.prompt_tokens + record.max_tokens < CONTEXT
        assert line.chunk_tokens is not None  # the bench records every chunk's tokens
        assert sum(line.chunk_tokens) == line.output_tokens == record.max_tokens
        assert line.start >= line.arrival and line.chunk_times[0] > line.start
    assert s.request_throughput * s.duration == pytest.approx(12)
    total_tokens = sum(r.max_tokens for r in result.records)
    assert s.output_throughput * s.duration == pytest.approx(total_tokens)
    assert 0 < s.ttft.p50 <= s.ttft.p90 <= s.ttft.p99 <= s.e2e.p99
    assert s.cumulative.judged == 12 and set(result.summary.tiers) <= {"premium", "standard"}
    met = s.completed * (1 - s.cumulative.overall)
    assert s.goodput * s.duration == pytest.approx(met)
    assert s.goodput_vllm <= s.request_throughput
