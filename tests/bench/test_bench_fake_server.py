"""The load generator against a fake streaming server with known timings and failures.

Every request has a 20-token prompt and 5 output tokens (a one-row trace, an 8192-token
context: no scaling). The server sends chunk k at 100 + 20·k ms after the request reaches
it, so TTFT ≈ 200 ms, ITL ≈ TPOT ≈ 40 ms, e2e ≈ 360 ms, never less: a token can only be later
than that, by scheduling jitter (40 ms allowed: a busy CI machine has been seen 16 ms late). The
SLOs are chosen with margins well over the jitter, or on the side the jitter cannot cross.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import Behaviour, FakeServer

from slidingserve.bench import (
    BenchConfig,
    BenchResult,
    BenchSetupError,
    bench,
    plan_requests,
    run_bench,
    write_bench_json,
)
from slidingserve.bench.client import REFUSED
from slidingserve.bench.report import bench_payload, format_summary
from slidingserve.core.slo_args import REFUSED_REASON
from slidingserve.metrics import Outcome
from slidingserve.workloads import TRACE_FILES, ArrivalConfig, Tier, TierMix, WorkloadConfig

JITTER = 0.06  # seconds
TIMINGS = Behaviour(first_delay=0.2, gap=0.04)
WAIT_LIMIT = 15.0  # seconds any test waits for something to happen


def write_trace(folder: Path, prompt: int, output: int) -> Path:
    """A trace of one row, named like the ShareGPT trace (for --trace-dir)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / TRACE_FILES["sharegpt"]
    path.write_text(f"num_prefill_tokens,num_decode_tokens\n{prompt},{output}\n")
    return path


def workload(trace: Path, count: int, tiers: tuple[Tier, ...] | None = None) -> WorkloadConfig:
    return WorkloadConfig(
        "sharegpt",
        count,
        ArrivalConfig("poisson"),
        trace_files=(("sharegpt", trace),),
        tiers=TierMix(tiers, assignment="fixed") if tiers else None,
    )


def config(url: str, work: WorkloadConfig, **options: Any) -> BenchConfig:
    """20 requests/s, no progress bar, and `options` over that."""
    return dataclasses.replace(BenchConfig(url, work, rate=20.0, progress=False), **options)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "traces", prompt=20, output=5)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer({"": TIMINGS}) as running:
        yield running


def wait_until(condition: object, limit: float = WAIT_LIMIT) -> None:
    assert callable(condition)
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.01)


# Four tiers dealt in turn (fixed assignment), SLOs in seconds. Tokens arrive at ≥ 200, 240,
# 280, 320, 360 ms after the scheduled send, plus jitter.
FAST = Tier("fast", ttft=1.0, tbt=0.1)  # deadlines 1000, 1100, ...: always met
LATE = Tier("late", ttft=0.08, tbt=0.3)  # first due at 80 ms: late; then 380, 680, ...: met
GAPPY = Tier("gappy", ttft=1.0, tbt=0.02)  # cumulatively met (1000, 1020, ...); gaps 40 > 20 ms
DRIFT = Tier("drift", ttft=0.3, tbt=0.001)  # first met (300); fifth due at 304 ms, comes ≥ 360


def test_latencies_and_violations_match_hand_values(server: FakeServer, trace: Path) -> None:
    result = run_bench(config(server.url, workload(trace, 8, (FAST, LATE, GAPPY, DRIFT))))
    s = result.summary.metrics
    assert (s.completed, s.failed, s.cancelled, result.summary.not_sent) == (8, 0, 0, 0)
    assert result.model == "fake" and result.max_model_len == 8192
    for record in result.records:
        line = record.timeline
        assert line.num_tokens == 5 and len(line.chunk_times) == 5
        assert line.ttft is not None and 0.2 <= line.ttft <= 0.2 + JITTER
        assert line.e2e is not None and 0.36 <= line.e2e <= 0.36 + JITTER
        assert line.tpot == pytest.approx(0.04, abs=JITTER / 4)
        assert all(0 < gap <= 0.04 + JITTER for gap in line.itl)  # their mean: tpot
    assert s.ttft.p50 == pytest.approx(0.2, abs=JITTER)
    assert s.itl.mean == pytest.approx(0.04, abs=JITTER / 4)
    assert s.tpot.p99 == pytest.approx(0.04, abs=JITTER / 4)
    assert s.e2e.mean == pytest.approx(0.36, abs=JITTER)

    # Cumulative: late (TTFT) and drift (TBT) violate; per gap gappy too. Two of each tier.
    assert (s.cumulative.overall, s.cumulative.ttft, s.cumulative.tbt) == (0.5, 0.25, 0.25)
    per_gap = s.per_gap
    assert (per_gap.overall, per_gap.ttft, per_gap.tbt) == (0.75, 0.25, 0.5)
    tiers = result.summary.tiers
    assert tiers["late"].cumulative.ttft == 1.0 and tiers["late"].per_gap.tbt == 0.0
    assert tiers["gappy"].cumulative.overall == 0.0 and tiers["gappy"].per_gap.overall == 1.0
    assert tiers["drift"].cumulative.tbt == 1.0 and tiers["drift"].cumulative.ttft == 0.0
    assert tiers["fast"].per_gap.overall == 0.0
    # Goodput: fast and gappy meet every cumulative deadline; vLLM's (TTFT ≤ L_ttft, TPOT ≤
    # L_tbt) only fast.
    assert s.goodput * s.duration == pytest.approx(4)
    assert s.goodput_per_gap * s.duration == pytest.approx(2)
    assert s.goodput_vllm * s.duration == pytest.approx(2)
    last_send = max(r.timeline.arrival for r in result.records)
    assert last_send + 0.36 <= s.duration <= last_send + 0.36 + JITTER + 0.1


def test_requests_carry_the_planned_body(server: FakeServer, trace: Path) -> None:
    settings = config(server.url, workload(trace, 4, (FAST, LATE)), seed=5, vocab_size=64)
    run_bench(settings)
    plan = plan_requests(settings.workload, 20.0, 5, 8192, 64)
    bodies = sorted(server.received, key=lambda body: body["prompt"])
    assert sorted(list(p.prompt_ids) for p in plan) == [body["prompt"] for body in bodies]
    for body in server.received:
        assert body["model"] == "fake" and body["max_tokens"] == 5
        assert body["stream"] and body["ignore_eos"] and body["return_token_ids"]
        assert body["stream_options"] == {"include_usage": True}
        assert body["vllm_xargs"]["tier"] in ("fast", "late")
        assert body["vllm_xargs"]["protected"] == 0
        assert "priority" not in body
        assert all(10 <= token < 64 for token in body["prompt"])


def test_without_vllm_fields_and_with_priorities(trace: Path) -> None:
    with FakeServer({"": Behaviour(first_delay=0.02, gap=0.01, token_ids=False)}) as server:
        settings = config(server.url, workload(trace, 3), xargs=False, priority_from_slo=True)
        result = run_bench(settings)
    plan = plan_requests(settings.workload, 20.0, 0, 8192, 1000)
    deadlines = sorted(round((p.send_at + p.slo.ttft) * 1000) for p in plan)
    assert sorted(body["priority"] for body in server.received) == deadlines
    assert not any("vllm_xargs" in b or "return_token_ids" in b for b in server.received)
    assert result.summary.metrics.completed == 3  # tokens counted one per chunk
    assert all(r.timeline.chunk_tokens == (1,) * 5 for r in result.records)


# Far above the other tiers' 20–360 ms answers: only "slow" times out, even on a busy machine.
REQUEST_TIMEOUT = 2.0  # s
ERROR_TIERS = {
    "ok": TIMINGS,
    "bad": Behaviour(status=400, message="ttft_ms must be positive"),
    "broken": Behaviour(status=500, message="engine dead"),
    "cut": Behaviour(first_delay=0.02, gap=0.01, drop_after=2),
    "short": Behaviour(first_delay=0.02, gap=0.01, tokens=3),
    "event": Behaviour(first_delay=0.02, gap=0.01, error_after=1, message="boom"),
    "slow": Behaviour(first_delay=6.0),
}


def test_errors_are_counted_by_kind(trace: Path) -> None:
    tiers = tuple(Tier(name, ttft=5.0, tbt=1.0) for name in ERROR_TIERS)
    with FakeServer(ERROR_TIERS) as server:
        result = run_bench(
            config(server.url, workload(trace, 7, tiers), request_timeout=REQUEST_TIMEOUT)
        )
    assert result.errors == {
        "http_400": 1,
        "http_500": 1,
        "dropped": 1,
        "truncated": 1,
        "stream_error": 1,
        "timeout": 1,
    }
    assert "ttft_ms must be positive" in result.error_messages["http_400"]
    assert "engine dead" in result.error_messages["http_500"]
    assert "boom" in result.error_messages["stream_error"]
    by_tier = {r.timeline.slo.tier: r.timeline for r in result.records}
    assert by_tier["ok"].outcome is Outcome.COMPLETED
    assert len(by_tier["cut"].chunk_times) == 2 and len(by_tier["short"].chunk_times) == 3
    s = result.summary.metrics
    assert (s.completed, s.failed) == (1, 6)
    # Failed requests violate: TTFT without a token (400, 500, timeout), else TBT.
    assert (s.cumulative.overall, s.cumulative.ttft, s.cumulative.tbt) == (6 / 7, 3 / 7, 3 / 7)
    assert s.goodput * s.duration == pytest.approx(1)
    assert s.duration < REQUEST_TIMEOUT + 2.0  # the slow request was given up at its timeout


REFUSING_TIERS = {
    "at-once": Behaviour(status=503, message="slo-refused: late", reason=REFUSED_REASON),
    "too-many": Behaviour(status=429, message="slo-refused: late", reason=REFUSED_REASON),
    "busy": Behaviour(status=503, message="The engine is currently busy"),
    "ok": Behaviour(first_delay=0.02, gap=0.01),
}


def test_bench_counts_refusals_apart_from_errors_with_their_latency(trace: Path) -> None:
    tiers = tuple(Tier(name, ttft=5.0, tbt=1.0) for name in REFUSING_TIERS)
    with FakeServer(REFUSING_TIERS) as server:
        result = run_bench(config(server.url, workload(trace, 4, tiers)))
    assert result.errors == {"http_503": 1}
    refusals = result.refusals
    assert refusals.count == 2
    assert 0 < refusals.latency.p50 < 1.0
    refused = [r for r in result.records if r.error_kind == REFUSED]
    assert {r.timeline.slo.tier for r in refused} == {"at-once", "too-many"}
    m = result.summary.metrics
    assert (m.completed, m.failed) == (1, 3)  # a refusal misses its first token's deadline
    assert bench_payload(result)["refused"]["count"] == 2
    assert "refused: 2 by the server's admission control" in format_summary(result)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_refused_connections_are_counted(trace: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = run_bench(config(url, workload(trace, 3), model="m", max_model_len=512))
    assert result.errors == {"connection": 3}
    metrics = result.summary.metrics
    assert metrics.failed == 3 and metrics.cumulative.ttft == 1.0


TWO_MODELS = [{"id": "first", "max_model_len": 4096}, {"id": "second", "max_model_len": 2048}]


class TestDiscovery:
    @pytest.fixture
    def long_trace(self, tmp_path: Path) -> Path:
        return write_trace(tmp_path, prompt=40, output=6)

    @pytest.mark.parametrize(
        ("name", "context", "prompt", "output"),
        [(None, 4096, 20, 3), ("second", 2048, 10, 2)],  # 40 and 6 × 1/2, × 1/4 (1.5 → 2)
    )
    def test_model_and_context_from_the_server(
        self, long_trace: Path, name: str | None, context: int, prompt: int, output: int
    ) -> None:
        with FakeServer({"": Behaviour(first_delay=0.01, gap=0.01)}, models=TWO_MODELS) as fake:
            result = run_bench(config(fake.url + "/v1/", workload(long_trace, 2), model=name))
        assert result.model == (name or "first") and result.max_model_len == context
        assert {body["model"] for body in fake.received} == {result.model}
        assert {(len(b["prompt"]), b["max_tokens"]) for b in fake.received} == {(prompt, output)}

    def test_unknown_model_lists_the_served_ones(self, long_trace: Path) -> None:
        with FakeServer(models=TWO_MODELS) as fake, pytest.raises(BenchSetupError) as error:
            run_bench(config(fake.url, workload(long_trace, 1), model="nope"))
        assert "first, second" in str(error.value)

    def test_a_context_is_needed(self, long_trace: Path) -> None:
        with FakeServer(models=[{"id": "bare"}]) as fake:
            with pytest.raises(BenchSetupError, match="--max-model-len"):
                run_bench(config(fake.url, workload(long_trace, 1)))
            result = run_bench(config(fake.url, workload(long_trace, 1), max_model_len=100))
        assert result.model == "bare" and result.summary.metrics.completed == 1

    def test_no_server(self, long_trace: Path) -> None:
        url = f"http://127.0.0.1:{free_port()}"
        with pytest.raises(BenchSetupError, match="cannot list the models"):
            run_bench(config(url, workload(long_trace, 1)))


def test_duration_bounds_sending(server: FakeServer, trace: Path) -> None:
    work = workload(trace, 6)
    sends = [p.send_at for p in plan_requests(work, 20.0, 0, 8192, 1000)]
    cutoff = (sends[2] + sends[3]) / 2
    result = run_bench(config(server.url, work, max_duration=cutoff))
    s = result.summary
    assert (s.requests_sent, s.metrics.completed, s.not_sent, s.interrupted) == (3, 3, 3, False)


def test_a_stop_cancels_in_flight_requests_and_keeps_their_tokens(
    tmp_path: Path, server: FakeServer
) -> None:
    long_trace = write_trace(tmp_path, prompt=20, output=100)  # 100 tokens: 4.2 s each

    async def stopped_run() -> BenchResult:
        stop = asyncio.Event()

        async def stop_soon() -> None:
            deadline = time.monotonic() + WAIT_LIMIT
            while server.count() < 4 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.6)  # five tokens by 0.36 s
            stop.set()

        stopper = asyncio.create_task(stop_soon())
        result = await bench(config(server.url, workload(long_trace, 4), rate=50.0), stop)
        await stopper
        return result

    result = asyncio.run(stopped_run())
    s = result.summary.metrics
    assert result.summary.interrupted and (s.cancelled, s.completed, s.failed) == (4, 0, 0)
    assert s.duration < 1.5  # not the 4.2 s the streams would have taken
    assert all(5 <= len(r.timeline.chunk_times) < 100 for r in result.records)
    assert s.cumulative.judged == 0
    payload = json.loads(write_bench_json(result, tmp_path / "b.json").read_text())
    assert {r["outcome"] for r in payload["requests"]} == {"cancelled"}
    assert payload["summary"]["interrupted"] is True


CLI = """
import argparse, sys
from slidingserve.cli.bench import add_parser
parser = argparse.ArgumentParser(prog="slidingserve")
add_parser(parser.add_subparsers(dest="command", required=True))
args = parser.parse_args(sys.argv[1:])
sys.exit(args.handler(args))
"""


def test_ctrl_c_writes_partial_results(tmp_path: Path, server: FakeServer) -> None:
    traces = tmp_path / "traces"
    write_trace(traces, prompt=20, output=100)
    out = tmp_path / "run" / "bench.json"
    command = [sys.executable, "-c", CLI, "bench", "--url", server.url, "--requests", "3"]
    command += ["--rate", "50", "--trace-dir", str(traces), "--out", str(out), "--no-progress"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: server.count() >= 3 or process.poll() is not None)
        time.sleep(1.0)  # three tokens by 0.28 s, with room for a busy machine
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=WAIT_LIMIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
    assert process.returncode == 130, output.decode()
    assert "(interrupted)" in output.decode()
    payload = json.loads(out.read_text())
    assert payload["summary"]["cancelled"] == 3
    assert all(len(r["chunk_times_s"]) >= 3 for r in payload["requests"])
    assert out.with_suffix(".png").stat().st_size > 0
