"""vLLM's parallel modes served with SlidingServe's scheduler on a CPU host: data parallel (two
engine cores, each loads the adapter) and tensor parallel (two workers, bound to cores by
`serve`'s default binding since the CPU build's own needs a NUMA node per worker).

Each test starts a server of the tiny model (about a minute on two cores) and needs two
cores: skipped at once on fewer.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm", minversion="0.32")

from slidingserve.engines.vllm.runtime import OMP_BIND_ENV  # noqa: E402
from slidingserve.engines.vllm.server import server_command, server_environment  # noqa: E402
from slidingserve.live.servers import serving  # noqa: E402


def usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


pytestmark = pytest.mark.skipif(usable_cores() < 2, reason="two parallel workers need 2 cores")

MAX_TOKENS = 8
ENGINE_ARGS = [
    "--served-model-name", "tiny",
    "--max-model-len", "512",
    "--max-num-batched-tokens", "256",
    "--max-num-seqs", "16",
]  # fmt: skip
ADAPTER_LINE = re.compile(r"^\((\w+) pid=\d+\) INFO .*scheduling by slidingserve, ", re.MULTILINE)
"""The line each engine core logs once it built the policy (`context.build_policy`), with
vLLM's name of the process that logged it."""


def serve(model: Path, parallel: list[str], log: Path) -> tuple[list[int], str, dict[str, str]]:
    """Serve `model` with the `parallel` flags and no binding of the user's; the completion
    tokens of four requests, the server's log and its environment."""
    flags = [*ENGINE_ARGS, *parallel]

    def command(port: int) -> list[str]:
        return server_command(str(model), "slidingserve", port=port, extra_vllm_args=flags)

    base = {key: value for key, value in os.environ.items() if key != OMP_BIND_ENV}
    env = server_environment(base=base, vllm_args=flags)
    with serving(command, env, log) as url:
        tokens = [complete(url, f"request {i} of the parallel test") for i in range(4)]
    return tokens, log.read_text(errors="replace"), env


def complete(base: str, prompt: str) -> int:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "ignore_eos": True}
    request = urllib.request.Request(
        base + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        tokens: int = json.loads(response.read())["usage"]["completion_tokens"]
        return tokens


def test_data_parallel_runs_the_adapter_in_each_engine_core(
    tiny_model: Path, tmp_path: Path
) -> None:
    tokens, log, _ = serve(tiny_model, ["--data-parallel-size", "2"], tmp_path / "server.log")
    assert tokens == [MAX_TOKENS] * 4
    assert set(ADAPTER_LINE.findall(log)) == {"EngineCore_DP0", "EngineCore_DP1"}


def test_tensor_parallel_starts_with_the_default_binding(tiny_model: Path, tmp_path: Path) -> None:
    tokens, log, env = serve(tiny_model, ["--tensor-parallel-size", "2"], tmp_path / "server.log")
    assert tokens == [MAX_TOKENS] * 4
    assert ADAPTER_LINE.findall(log) == ["EngineCore"]  # one engine core, two workers
    if OMP_BIND_ENV in env:  # not where vLLM's own binding has a NUMA node per worker
        assert f"{OMP_BIND_ENV}={env[OMP_BIND_ENV]!r}" in log
        assert "local_rank=1, core ids=" in log
