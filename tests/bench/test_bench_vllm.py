"""`bench` against vLLM's OpenAI server scheduled by SlidingServe (the `vllm` extra).

A tiny random Llama is built into a temporary folder, the server runs in a subprocess on
127.0.0.1 and a free port (about 30 s to start), every wait is bounded and the server's
process group is killed at the end whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm", minversion="0.32")

import slidingserve  # noqa: E402
from slidingserve.bench import BenchConfig, Outcome, run_bench  # noqa: E402
from slidingserve.engines.vllm.server import server_command, server_environment  # noqa: E402
from slidingserve.engines.vllm.tiny_model import make_tiny_llama  # noqa: E402
from slidingserve.sim.workloads import WorkloadConfig, get_tier_mix  # noqa: E402

STARTUP_TIMEOUT = 240.0  # seconds; about 30 s on two busy cores
CONTEXT = 512
ENGINE_ARGS = [
    "--served-model-name", "tiny",
    "--max-model-len", str(CONTEXT),
    "--max-num-batched-tokens", "256",
    "--max-num-seqs", "16",
]  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, up to 30 s to shut down, then SIGKILL to the process group."""
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a running tiny-model server scheduled by SlidingServe."""
    model = make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), seed=0)
    port = free_port()
    command = server_command(str(model), "slidingserve", port=port, extra_vllm_args=ENGINE_ARGS)
    env = server_environment()
    source_root = str(Path(slidingserve.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source_root, env.get("PYTHONPATH")]))
    log = tmp_path_factory.mktemp("server") / "server.log"
    base = f"http://127.0.0.1:{port}"
    start = time.perf_counter()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        while not healthy(base):
            if process.poll() is not None:
                pytest.fail(f"server exited with {process.returncode}:\n{tail(log)}")
            if time.perf_counter() - start > STARTUP_TIMEOUT:
                pytest.fail(f"server not up after {STARTUP_TIMEOUT:.0f} s:\n{tail(log)}")
            time.sleep(0.5)
        yield base
    finally:
        stop(process)


def test_bench_completes_every_request_with_a_consistent_summary(server: str) -> None:
    workload = WorkloadConfig("mixed-v1", 12, tiers=get_tier_mix("premium-standard"))
    config = BenchConfig(
        server, workload, rate=4.0, progress=False, request_timeout=60.0, max_duration=30.0
    )
    result = run_bench(config)
    s = result.summary
    assert result.model == "tiny" and result.max_model_len == CONTEXT
    assert result.errors == {}, result.error_messages
    assert (s.completed, s.failed, s.cancelled, s.not_sent) == (12, 0, 0, 0)
    for record in result.records:
        assert record.outcome is Outcome.COMPLETED
        assert record.prompt_tokens + record.max_tokens < CONTEXT
        assert sum(record.chunk_tokens) == record.usage_tokens == record.max_tokens
        assert record.sent >= record.scheduled and record.chunk_times[0] > record.sent
    assert s.request_throughput * s.duration_s == pytest.approx(12)
    total_tokens = sum(r.max_tokens for r in result.records)
    assert s.output_throughput * s.duration_s == pytest.approx(total_tokens)
    assert 0 < s.ttft_ms.p50 <= s.ttft_ms.p90 <= s.ttft_ms.p99 <= s.e2e_ms.p99
    assert s.violations.judged == 12 and {t.name for t in s.tiers} <= {"premium", "standard"}
    met = sum(1 for r in result.records if r.outcome is Outcome.COMPLETED) * (
        1 - s.violations.overall
    )
    assert s.goodput * s.duration_s == pytest.approx(met)
    assert s.goodput_vllm <= s.request_throughput
