"""The vLLM server's command line and environment, built without vLLM installed."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from slidingserve.core.slo_args import SLODefaults
from slidingserve.engines.vllm.runtime import (
    SCHEDULER_CLS,
    SLO_DEFAULTS_ENV,
    AdapterSettings,
    VllmMissingError,
    adapter_config,
    adapter_kwargs,
    engine_environment,
    engine_kwargs,
    require_vllm,
)
from slidingserve.engines.vllm.server import (
    check_async_support,
    server_command,
    server_environment,
)
from slidingserve.policies import POLICIES


def flag_value(command: list[str], flag: str) -> str:
    """The value after the last occurrence of `flag` (argparse keeps the last one)."""
    index = len(command) - 1 - command[::-1].index(flag)
    return command[index + 1]


def test_command_runs_the_api_server_module_with_the_adapter_and_validators() -> None:
    command = server_command("/models/tiny", "sarathi-edf", port=8123, python="/venv/python")
    assert command[:3] == ["/venv/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag_value(command, "--model") == "/models/tiny"
    assert flag_value(command, "--host") == "127.0.0.1"
    assert flag_value(command, "--port") == "8123"
    assert flag_value(command, "--scheduler-cls") == SCHEDULER_CLS
    assert flag_value(command, "--middleware") == (
        "slidingserve.engines.vllm.validation.slo_middleware"
    )
    assert flag_value(command, "--logits-processors") == (
        "slidingserve.engines.vllm.validation:SLOValidator"
    )


def test_command_carries_the_cpu_engine_settings() -> None:
    command = server_command("m", "vllm", seed=7)
    assert flag_value(command, "--block-size") == "32"
    assert flag_value(command, "--dtype") == "float32"
    assert flag_value(command, "--seed") == "7"
    for flag in ("--enforce-eager", "--enable-chunked-prefill"):
        assert flag in command
    # vLLM's own default, prefix caching on: the adapter plans with the hits.
    assert not {"--enable-prefix-caching", "--no-enable-prefix-caching"} & set(command)
    # vLLM's own choice (async on GPUs): the adapter follows it.
    assert not {"--async-scheduling", "--no-async-scheduling"} & set(command)


@pytest.mark.parametrize(
    ("vllm_args", "refused"),
    [
        ([], None),
        (["-pp", "2"], "pipeline parallelism"),
        (["--pipeline-parallel-size=2", "--no-async-scheduling"], None),
        (["--no-async-scheduling", "-pp", "2", "--async-scheduling"], "pipeline parallelism"),
        (["--speculative-config", '{"method": "ngram"}'], "speculative decoding"),
        (["-sc={}", "--no-async-scheduling"], None),
        (["--tensor-parallel-size", "2", "--data-parallel-size", "2"], None),
    ],
)
def test_async_modes_the_adapter_cannot_steer_are_refused_in_one_line(
    vllm_args: list[str], refused: str | None
) -> None:
    if refused is None:
        check_async_support(vllm_args, cpu=False)
        return
    with pytest.raises(ValueError, match=refused) as error:
        check_async_support(vllm_args, cpu=False)
    assert "\n" not in str(error.value) and "--no-async-scheduling" in str(error.value)
    check_async_support(vllm_args, cpu=True)  # a CPU engine never schedules asynchronously


def test_additional_config_holds_policy_slo_and_predictor(tmp_path: Path) -> None:
    predictor = tmp_path / "predictor.json"
    predictor.write_text("{}")
    command = server_command(
        "m",
        "slidingserve",
        ttft_ms=800,
        tbt_ms=40.5,
        slo_margin_ms=12.5,
        predictor=str(predictor),
        policy_options={"chunker": "window", "window": 2},
        online_learning=False,
        steps_out=str(tmp_path / "steps.json"),
        health_log_seconds=5,
        load_dir=tmp_path,
    )
    config = json.loads(flag_value(command, "--additional-config"))
    assert config == {
        "slidingserve": {
            "policy": "slidingserve",
            "policy_options": {"chunker": "window", "window": 2},
            "ttft_ms": 800.0,
            "tbt_ms": 40.5,
            "slo_margin_ms": 12.5,
            "predictor": str(predictor),
            "online_learning": False,
            "steps_out": str(tmp_path / "steps.json"),
            "health_log_seconds": 5.0,
            "load_dir": str(tmp_path),
        }
    }


def test_the_adapter_reads_back_what_the_launcher_writes() -> None:
    config = adapter_config("sarathi", ttft_ms=800, policy_options={"chunk_size": 64})
    assert AdapterSettings.from_vllm(config) == AdapterSettings(
        "sarathi", {"chunk_size": 64}, ttft_ms=800.0
    )
    # The launcher's defaults are the adapter's: a bare config reads as one written by it.
    assert AdapterSettings.from_vllm(adapter_config("slidingserve")) == AdapterSettings()
    assert AdapterSettings.from_vllm(None) == AdapterSettings()
    other = {"slidingserve": {"policy": "vllm", "a_later_setting": 1}, "another_plugin": {}}
    assert AdapterSettings.from_vllm(other) == AdapterSettings("vllm")


def test_health_lines_come_once_a_minute_by_default() -> None:
    config = json.loads(flag_value(server_command("m", "vllm"), "--additional-config"))
    assert config["slidingserve"]["health_log_seconds"] == 60.0


def test_steps_out_needs_an_existing_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"folder of .* does not exist"):
        server_command("m", "slidingserve", steps_out=str(tmp_path / "no" / "steps.json"))


def test_extra_vllm_args_come_last_so_they_win() -> None:
    command = server_command(
        "m", "vllm", extra_vllm_args=["--block-size", "64", "--max-num-seqs", "4"]
    )
    assert command[-4:] == ["--block-size", "64", "--max-num-seqs", "4"]
    assert flag_value(command, "--block-size") == "64"


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_registered_policy_is_accepted(policy: str) -> None:
    config = json.loads(flag_value(server_command("m", policy), "--additional-config"))
    assert config["slidingserve"]["policy"] == policy


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"policy": "fcfs"}, "unknown policy 'fcfs'; known policies: "),
        ({"policy": "slidingserve#w2"}, "unknown policy 'slidingserve#w2'"),
        ({"ttft_ms": -5.0}, "ttft must be positive"),
        ({"tbt_ms": 0.0}, "tbt must be positive"),
        ({"ttft_ms": 5e9}, "was it given in milliseconds"),
        ({"predictor": "/nonexistent/predictor.json"}, "does not exist"),
        ({"policy_options": {"window": float("nan")}}, "plain JSON values"),
        ({"policy_options": {"window": object()}}, "plain JSON values"),
        ({"port": 70000}, "port must be in 1..65535"),
        ({"health_log_seconds": 0.0}, "health_log_seconds must be positive"),
    ],
)
def test_bad_settings_are_refused_before_launch(settings: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"policy": "vllm", **settings}
    policy = str(arguments.pop("policy"))
    with pytest.raises(ValueError, match=re.escape(message)):
        server_command("m", policy, **arguments)  # type: ignore[arg-type]


def test_unknown_policy_error_lists_every_registered_policy() -> None:
    with pytest.raises(ValueError, match="known policies") as error:
        server_command("m", "fcfs")
    listed = str(error.value).split("known policies: ", 1)[1].split(", ")
    assert listed == sorted(POLICIES)


def test_server_environment_runs_the_engine_in_its_own_process_with_slo_defaults() -> None:
    env = server_environment(ttft_ms=900, tbt_ms=30, base={"PATH": "/bin", "OMP_NUM_THREADS": "2"})
    assert env["PATH"] == "/bin"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1"
    slo = {"ttft_ms": 900.0, "tbt_ms": 30.0, "margin_ms": 0.0}
    assert json.loads(env[SLO_DEFAULTS_ENV]) == slo
    assert "PROMETHEUS_MULTIPROC_DIR" not in env  # vLLM's single-process metrics


def test_the_api_server_gets_the_slo_margin_the_engine_plans_with() -> None:
    env = server_environment(ttft_ms=900, tbt_ms=30, slo_margin_ms=25, base={})
    assert json.loads(env[SLO_DEFAULTS_ENV])["margin_ms"] == 25.0
    settings = AdapterSettings.from_vllm(adapter_config("slidingserve", slo_margin_ms=25))
    assert settings.slo_defaults == SLODefaults(margin_ms=25.0)


def test_a_metrics_folder_puts_prometheus_in_multiprocess_mode(tmp_path: Path) -> None:
    env = server_environment(base={"PATH": "/bin"}, metrics_dir=tmp_path)
    assert env["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path)
    mine = server_environment(base={"PROMETHEUS_MULTIPROC_DIR": "/mine"}, metrics_dir=tmp_path)
    assert mine["PROMETHEUS_MULTIPROC_DIR"] == "/mine"  # the caller's folder wins


def test_engine_environment_keeps_the_callers_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    env = engine_environment(multiprocessing=False)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # offline: the engine stays in-process


def test_offline_kwargs_enable_the_adapter_with_cpu_settings() -> None:
    kwargs = {**engine_kwargs(seed=3, max_num_seqs=8), **adapter_kwargs("sarathi", tbt_ms=25)}
    assert kwargs["scheduler_cls"] == SCHEDULER_CLS
    assert kwargs["additional_config"]["slidingserve"]["tbt_ms"] == 25.0
    assert (kwargs["block_size"], kwargs["seed"], kwargs["max_num_seqs"]) == (32, 3, 8)
    assert "max_model_len" not in kwargs


def test_missing_vllm_is_reported_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "vllm" else real_find_spec(name, *args),
    )
    with pytest.raises(VllmMissingError, match=re.escape('pip install -e ".[vllm]"')):
        require_vllm()
