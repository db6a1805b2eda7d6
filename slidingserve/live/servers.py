"""Start and stop a local vLLM server scheduled by one policy (ours or vLLM's own)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from slidingserve.core.slo_args import DEFAULT_SLO
from slidingserve.engines.vllm.runtime import CPU_ENGINE_LIMITS, check_policy_name
from slidingserve.engines.vllm.server import (
    API_SERVER_MODULE,
    engine_flags,
    server_command,
    server_environment,
)

BUILTIN_PREFIX = "vllm:"
BUILTIN_POLICIES = ("fcfs", "priority")
STARTUP_TIMEOUT = 180.0  # seconds for /health to answer
STOP_TIMEOUT = 30.0  # seconds the API server gets to shut its engine down


@dataclass(frozen=True)
class ServerSpec:
    """A server to compare: a model, a policy and the engine's limits."""

    model: str  # model folder
    policy: str  # a project policy name, or "vllm:fcfs" / "vllm:priority"
    ttft_ms: float = DEFAULT_SLO.ttft_ms  # SLO of requests that give none (ours only), ms
    tbt_ms: float = DEFAULT_SLO.tbt_ms
    max_num_batched_tokens: int = CPU_ENGINE_LIMITS.max_num_batched_tokens
    max_num_seqs: int = CPU_ENGINE_LIMITS.max_num_seqs
    extra_args: tuple[str, ...] = field(default=())
    steps_out: Path | None = None  # ours only: the engine's step periods, written at shutdown

    def __post_init__(self) -> None:
        if self.is_builtin:
            if self.builtin not in BUILTIN_POLICIES:
                known = ", ".join(BUILTIN_PREFIX + p for p in BUILTIN_POLICIES)
                raise ValueError(f"unknown vLLM policy {self.policy!r}; known: {known}")
            if self.steps_out is not None:
                raise ValueError("step periods are recorded by the adapter: not for vllm: policies")
        else:
            check_policy_name(self.policy)

    @property
    def is_builtin(self) -> bool:
        return self.policy.startswith(BUILTIN_PREFIX)

    @property
    def builtin(self) -> str:
        return self.policy.removeprefix(BUILTIN_PREFIX)

    def command(self, port: int) -> list[str]:
        limits = [
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--max-num-seqs", str(self.max_num_seqs),
            *self.extra_args,
        ]  # fmt: skip
        if not self.is_builtin:
            return server_command(
                self.model,
                self.policy,
                port=port,
                ttft_ms=self.ttft_ms,
                tbt_ms=self.tbt_ms,
                steps_out=None if self.steps_out is None else str(self.steps_out),
                extra_vllm_args=limits,
            )
        return [
            sys.executable, "-m", API_SERVER_MODULE,
            "--model", self.model, "--host", "127.0.0.1", "--port", str(port),
            "--scheduling-policy", self.builtin, *engine_flags(), *limits,
        ]  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def running_server(spec: ServerSpec, log: Path) -> Iterator[str]:
    """The base URL of a server started for `spec`; it is stopped on exit, whatever happens."""
    env = server_environment(ttft_ms=spec.ttft_ms, tbt_ms=spec.tbt_ms)
    with serving(spec.command, env, log) as base:
        yield base


@contextlib.contextmanager
def serving(
    command_for: Callable[[int], list[str]], env: dict[str, str], log: Path
) -> Iterator[str]:
    """Start `command_for(port)` on a free local port with this package importable, wait for
    /health, yield its base URL; SIGTERM then SIGKILL on exit. Output goes to `log`."""
    port = free_port()
    env = dict(env)
    source_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source_root, env.get("PYTHONPATH")]))
    base = f"http://127.0.0.1:{port}"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command_for(port), env=env, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        _wait_until_healthy(base, process, log)
        yield base
    finally:
        _stop(process)


def scrape_metrics(base: str, timeout: float = 10.0) -> dict[str, float]:
    """Every sample on the server's `/metrics`, summed over its labels, by name."""
    with urllib.request.urlopen(base + "/metrics", timeout=timeout) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for name, value in _SAMPLE.findall(text):
        values[name] = values.get(name, 0.0) + float(value)
    return values


_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{[^}]*\})? (\S+)$", re.M)
"""One Prometheus text-format sample line: its name (labels dropped) and value."""


def _wait_until_healthy(base: str, process: subprocess.Popen[bytes], log: Path) -> None:
    started = time.perf_counter()
    while _status(f"{base}/health") != 200:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}; see {log}")
        if time.perf_counter() - started > STARTUP_TIMEOUT:
            raise RuntimeError(f"server not up after {STARTUP_TIMEOUT:.0f} s; see {log}")
        time.sleep(0.5)


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            status: int = response.status
            return status
    except (urllib.error.URLError, OSError):
        return None


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the API server (it shuts its engine down), then SIGKILL to what is left."""
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_TIMEOUT)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
