"""`slidingserve serve` refuses a bad policy, option, predictor file or SLO before vLLM starts,
and binds vLLM's parallel workers to cores on a CPU build. No vLLM needed: the launch
(`os.execve`) is replaced by a stand-in."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

import pytest
from factories import linear_engine_steps

from slidingserve.cli import main
from slidingserve.engines.vllm import server
from slidingserve.engines.vllm.context import STARTING_GUESS
from slidingserve.engines.vllm.runtime import OMP_BIND_ENV, numa_nodes, thread_binding
from slidingserve.engines.vllm.server import ParallelRanks, parallel_ranks, server_environment
from slidingserve.predictor import BatchLatencyPredictor, PredictorMetadata, save_predictor
from slidingserve.predictor.steps import save_engine_steps


class Launch(NamedTuple):
    command: list[str]
    env: dict[str, str]


class LaunchedError(Exception):
    """Raised by the stand-in of `os.execve`: the server would have started."""


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Launch]:
    """The launches `serve` attempted (the stand-in raises `LaunchedError`); vLLM's presence is not
    checked and the metrics folder goes under `tmp_path`."""
    attempts: list[Launch] = []

    def execve(path: str, command: list[str], env: dict[str, str]) -> None:
        attempts.append(Launch(list(command), dict(env)))
        raise LaunchedError

    monkeypatch.setattr(os, "execve", execve)
    monkeypatch.setattr(server, "require_vllm", lambda: "0.32.0")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return attempts


def serve(*flags: str) -> int:
    return main(["serve", "--model", "/models/tiny", *flags])


def predictor_file(folder: Path, *, with_batches: bool = False) -> Path:
    path = folder / "predictor.json"
    metadata = PredictorMetadata("tiny", "vllm-cpu", 300, "2026-11-01T00:00:00+00:00")
    batches = linear_engine_steps().batches if with_batches else ()
    save_predictor(path, BatchLatencyPredictor.single(STARTING_GUESS), metadata, batches)
    return path


def write(folder: Path, name: str, content: str | bytes) -> str:
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def on_cpus(
    monkeypatch: pytest.MonkeyPatch, cores: set[int], *, nodes: int = 1, cpu_build: bool = True
) -> None:
    """This process may use `cores`, on `nodes` NUMA nodes, and vLLM is (not) the CPU build."""
    monkeypatch.setattr(server, "is_cpu_build", lambda: cpu_build)
    monkeypatch.setattr(server, "numa_nodes", lambda cores: nodes)
    monkeypatch.setattr(server, "_usable_cores", lambda: cores)


class TestRefusedBeforeLaunch:
    @pytest.mark.parametrize(
        ("flags", "message"),
        [
            (["--set", "slidingserve.bogus=1"], "unknown option(s) bogus for slidingserve; known:"),
            (["--set", 'slidingserve.window="abc"'], "window must be an integer, got 'abc'"),
            (["--set", "slidingserve.window=1.5"], "window must be an integer, got 1.5"),
            (["--set", "slidingserve.time_margin=[1]"], "time_margin must be a finite number"),
            (["--set", "slidingserve.alpha=1"], "alpha does nothing in this composition"),
            (["--set", "slidingserve.chunker=3"], "unknown chunker 3"),
            (["--policy", "sarathi", "--set", "sarathi.chunk_size=0"], "chunk_size"),
            (["--policy", "qoserve", "--set", "qoserve.safety_factor=0"], "safety_factor"),
            (["--policy", "fcfs"], "unknown policy 'fcfs'; known policies: qoserve,"),
            (
                ["--policy", "sarathi", "--set", "slidingserve.window=3"],
                "--set gives options of slidingserve, but the server runs sarathi",
            ),
            (["--set", "slidingsrve.window=3"], "--set gives options of slidingsrve"),
            (["--set", "window=3"], "--set expects POLICY.OPTION=VALUE"),
            (["--ttft-ms", "-5"], "default SLO ttft_ms=-5.0"),
            (["--tbt-ms", "0"], "tbt must be positive"),
            (["--slo-margin-ms", "-1"], "the SLO margin must be a finite number"),
            (["--slo-margin-ms", "nan"], "the SLO margin must be a finite number"),
            (["--admission-guard-ms", "-1"], "--admission-guard-ms must be a finite number"),
            (["--admission-guard-ms", "inf"], "--admission-guard-ms must be a finite number"),
            (
                ["--ttft-ms", "500", "--slo-margin-ms", "100", "--admission-guard-ms", "400"],
                "must be under the default TTFT less the SLO margin, 400 ms",
            ),
            (["--predictor", "/nonexistent/predictor.json"], "does not exist"),
        ],
    )
    def test_bad_settings(
        self,
        flags: list[str],
        message: str,
        launches: list[Launch],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        assert serve(*flags) == 2
        assert launches == []
        error = capsys.readouterr().err
        assert error.startswith("slidingserve serve: error: ")
        assert error.count("\n") == 1
        assert message in error

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            ('{"format": "slidingserve-predictor", "format_ver', "not valid JSON, truncated"),
            ("", "not valid JSON, truncated or corrupt"),
            (b"\xc4\x00\xff binary", "not a JSON text file"),
            ("[]", "file: expected an object, got list"),
            (
                '{"format": "slidingserve-engine-steps"}',
                "format: expected 'slidingserve-predictor'",
            ),
        ],
    )
    def test_bad_predictor_file(
        self,
        content: str | bytes,
        message: str,
        tmp_path: Path,
        launches: list[Launch],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        path = write(tmp_path, "predictor.json", content)
        assert serve("--predictor", path) == 2
        assert launches == []
        error = capsys.readouterr().err
        assert error.count("\n") == 1
        assert f"slidingserve serve: error: {path}: {message}" in error

    def test_a_steps_file_is_not_a_predictor_file(
        self, tmp_path: Path, launches: list[Launch], capsys: pytest.CaptureFixture[str]
    ) -> None:
        save_engine_steps(tmp_path / "steps.json", linear_engine_steps())
        assert serve("--predictor", str(tmp_path / "steps.json")) == 2
        assert "format: expected 'slidingserve-predictor'" in capsys.readouterr().err
        assert launches == []

    def test_impossible_parallel_sizes(
        self,
        monkeypatch: pytest.MonkeyPatch,
        launches: list[Launch],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        on_cpus(monkeypatch, {0, 1})
        monkeypatch.delenv(OMP_BIND_ENV, raising=False)
        assert serve("--", "--tensor-parallel-size", "4") == 2
        assert "4 parallel vLLM workers need as many cores" in capsys.readouterr().err
        assert serve("--", "--tensor-parallel-size", "two") == 2
        assert "--tensor-parallel-size expects a positive integer" in capsys.readouterr().err
        assert launches == []


class TestLaunched:
    """What passes the checks reaches the launch (so the tests above can fail)."""

    def test_the_launch_gets_the_command_and_its_environment(self, launches: list[Launch]) -> None:
        with pytest.raises(LaunchedError):
            serve("--ttft-ms", "900")
        (launch,) = launches
        assert launch.command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert json.loads(launch.env["SLIDINGSERVE_SLO_DEFAULTS"])["ttft_ms"] == 900.0

    def test_the_slo_margin_reaches_the_engine_and_the_api_server(
        self, launches: list[Launch]
    ) -> None:
        with pytest.raises(LaunchedError):
            serve("--slo-margin-ms", "40")
        (launch,) = launches
        index = launch.command.index("--additional-config")
        config = json.loads(launch.command[index + 1])["slidingserve"]
        assert config["slo_margin_ms"] == 40.0
        assert json.loads(launch.env["SLIDINGSERVE_SLO_DEFAULTS"])["margin_ms"] == 40.0

    def test_the_admission_guard_reaches_the_api_server(self, launches: list[Launch]) -> None:
        with pytest.raises(LaunchedError):
            serve("--admission-guard-ms", "120")
        (launch,) = launches
        assert launch.env["SLIDINGSERVE_ADMISSION_GUARD_MS"] == "120.0"
        index = launch.command.index("--additional-config")
        config = json.loads(launch.command[index + 1])["slidingserve"]
        assert not [key for key in config if "guard" in key]  # the engine tests as before

    def test_the_server_starts_with_the_options(self, launches: list[Launch]) -> None:
        with pytest.raises(LaunchedError):
            serve("--set", "slidingserve.window=3", "--set", "slidingserve.chunker=window")
        (launch,) = launches
        index = launch.command.index("--additional-config")
        config = json.loads(launch.command[index + 1])["slidingserve"]
        assert config["policy_options"] == {"window": 3, "chunker": "window"}

    @pytest.mark.parametrize("policy", ["slidingserve", "qoserve", "sarathi-edf", "vllm"])
    def test_a_predictor_file_with_or_without_batches(
        self, policy: str, tmp_path: Path, launches: list[Launch]
    ) -> None:
        for with_batches in (False, True):
            path = predictor_file(tmp_path, with_batches=with_batches)
            with pytest.raises(LaunchedError):
                serve("--policy", policy, "--predictor", str(path))
        assert len(launches) == 2

    def test_tensor_parallel_gets_a_binding_on_a_cpu_build(
        self, monkeypatch: pytest.MonkeyPatch, launches: list[Launch]
    ) -> None:
        on_cpus(monkeypatch, {0, 1})
        monkeypatch.delenv(OMP_BIND_ENV, raising=False)
        with pytest.raises(LaunchedError):
            serve("--", "--tensor-parallel-size", "2")
        assert launches[0].env[OMP_BIND_ENV] == "0|1"
        assert launches[0].command[-2:] == ["--tensor-parallel-size", "2"]


class TestThreadBinding:
    @pytest.mark.parametrize(
        ("ranks", "cores", "binding"),
        [
            (1, {5}, "5"),
            (2, {0, 1}, "0|1"),
            (2, {0, 1, 2}, "0|1"),  # one core left to the API server and the scheduler
            (2, set(range(8)), "0-2|3-5"),
            (4, set(range(4)), "0|1|2|3"),
            (3, set(range(16)), "0-3|4-7|8-11"),
            (2, {0, 1, 2, 3, 8, 9, 10, 11}, "0-2|3,8-9"),
            (2, {6, 4, 2, 0}, "0|2"),
        ],
    )
    def test_cores_are_split_between_the_ranks(
        self, ranks: int, cores: set[int], binding: str
    ) -> None:
        assert thread_binding(ranks, cores) == binding

    def test_fewer_cores_than_ranks_is_an_error(self) -> None:
        with pytest.raises(ValueError, match=f"set {OMP_BIND_ENV} yourself"):
            thread_binding(3, {0, 1})

    def test_numa_nodes_holding_the_cores(self, tmp_path: Path) -> None:
        for node, cpus in (("node0", "0-3,8"), ("node1", "4-7\n"), ("node2", "")):
            (tmp_path / node).mkdir()
            (tmp_path / node / "cpulist").write_text(cpus)
        assert numa_nodes({0, 1}, tmp_path) == 1
        assert numa_nodes({8, 4}, tmp_path) == 2
        assert numa_nodes(set(range(12)), tmp_path) == 2
        assert numa_nodes({0, 1}, tmp_path / "absent") == 1  # the system lists none


class TestParallelRanks:
    @pytest.mark.parametrize(
        ("flags", "ranks"),
        [
            ([], ParallelRanks(1, 1, 1)),
            (["--tensor-parallel-size", "2"], ParallelRanks(tensor=2)),
            (["--tensor_parallel_size=4"], ParallelRanks(tensor=4)),
            (["-tp", "2", "--max-num-seqs", "8"], ParallelRanks(tensor=2)),
            (["-tp=2", "-tp", "3"], ParallelRanks(tensor=3)),  # the last wins
            (["-pp", "2", "-dp", "2"], ParallelRanks(pipeline=2, data=2)),
            (["--data-parallel-size", "4", "-dpl", "2"], ParallelRanks(data=4, data_local=2)),
        ],
    )
    def test_flags(self, flags: list[str], ranks: ParallelRanks) -> None:
        assert parallel_ranks(flags) == ranks

    def test_workers(self) -> None:
        ranks = ParallelRanks(tensor=2, pipeline=2, data=3)
        assert (ranks.per_engine, ranks.local) == (4, 12)
        assert ParallelRanks(tensor=2, data=4, data_local=1).local == 2

    @pytest.mark.parametrize("flags", [["-tp", "0"], ["-tp", "x"], ["-tp"], ["-dp=-1"]])
    def test_bad_sizes(self, flags: list[str]) -> None:
        with pytest.raises(ValueError, match="expects a positive integer"):
            parallel_ranks(flags)


class TestServerEnvironmentBinding:
    def binding(self, flags: list[str], base: dict[str, str] | None = None) -> str | None:
        env = server_environment(base={"PATH": "/bin", **(base or {})}, vllm_args=flags)
        return env.get(OMP_BIND_ENV)

    def test_tensor_parallel_on_one_numa_node(self, monkeypatch: pytest.MonkeyPatch) -> None:
        on_cpus(monkeypatch, set(range(8)))
        assert self.binding(["-tp", "2"]) == "0-2|3-5"
        assert self.binding(["-tp", "2", "-dp", "2"]) == "0|1|2|3"  # vLLM slices it by DP rank
        assert self.binding(["-pp", "2"]) == "0-2|3-5"

    def test_the_users_binding_wins(self, monkeypatch: pytest.MonkeyPatch) -> None:
        on_cpus(monkeypatch, {0, 1})
        assert self.binding(["-tp", "2"], {OMP_BIND_ENV: "0|0"}) == "0|0"
        assert self.binding(["-tp", "2"], {OMP_BIND_ENV: "auto"}) == "auto"

    @pytest.mark.parametrize("flags", [[], ["-tp", "1"], ["--data-parallel-size", "2"]])
    def test_one_worker_per_engine_keeps_vllms_binding(
        self, flags: list[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        on_cpus(monkeypatch, {0, 1})
        assert self.binding(flags) is None

    def test_enough_numa_nodes_keep_vllms_binding(self, monkeypatch: pytest.MonkeyPatch) -> None:
        on_cpus(monkeypatch, set(range(8)), nodes=2)
        assert self.binding(["-tp", "2"]) is None
        assert self.binding(["-tp", "4"]) == "0|1|2|3"

    def test_not_on_a_cpu_build(self, monkeypatch: pytest.MonkeyPatch) -> None:
        on_cpus(monkeypatch, {0, 1}, cpu_build=False)
        assert self.binding(["-tp", "2"]) is None
