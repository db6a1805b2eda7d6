"""`slidingserve goodput --hardware`: one experiment per hardware point, then a summary."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from slidingserve.cli import main
from slidingserve.cli.goodput import point_folders
from slidingserve.eval.ratios import RatioInterval
from slidingserve.sim.hardware import HardwarePoint

TINY = ["--policies", "sarathi,sarathi-edf", "--workloads", "sharegpt", "--seeds", "2"]
TINY += ["--requests", "40", "--precision", "0.2", "--curve-points", "0", "--jobs", "1"]
TINY += ["--no-progress"]
TP1, TP2 = "a100:llama-3-8b:1", "a100:llama-2-7b:2"


class Run(NamedTuple):
    code: int
    out: str
    err: str
    out_dir: Path


def goodput(out_dir: Path, *argv: str) -> Run:
    """`slidingserve goodput` on the tiny setup, its output captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["goodput", *TINY, "--out-dir", str(out_dir), *argv])
    return Run(code, out.getvalue(), err.getvalue(), out_dir)


def hardware_args(*points: str) -> list[str]:
    return [arg for point in points for arg in ("--hardware", point)]


def headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("== ")]


def summary_rows(text: str) -> dict[str, list[str]]:
    """The summary table's rows (after its caption, criterion, header and rule) by hardware
    point; cells are apart by two spaces or more."""
    table = text.split("== summary ==")[1].strip().splitlines()[5:]
    return {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line) for line in table)}


def payload(run: Run, folder: str) -> Any:
    return json.loads((run.out_dir / folder / "goodput.json").read_text())


@pytest.fixture(scope="module")
def two_points(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return goodput(tmp_path_factory.mktemp("two"), *hardware_args(TP1, TP2))


class TestTwoPoints:
    def test_each_point_runs_under_its_heading_then_the_summary(self, two_points: Run) -> None:
        assert two_points.code == 0 and two_points.err == ""
        assert headings(two_points.out) == [f"== {TP1} ==", f"== {TP2} ==", "== summary =="]
        first, second = two_points.out.split(f"== {TP2} ==")
        assert "a100 llama-3-8b TP1, strict SLOs" in first
        assert "a100 llama-2-7b TP2, strict SLOs" in second

    def test_each_point_writes_its_files_into_its_own_folder(self, two_points: Run) -> None:
        folders = {
            "a100_llama-3-8b_tp1": ("llama-3-8b", 1),
            "a100_llama-2-7b_tp2": ("llama-2-7b", 2),
        }
        assert sorted(p.name for p in two_points.out_dir.iterdir()) == sorted(folders)
        for folder, (model, tp) in folders.items():
            hardware = payload(two_points, folder)["experiment"]["hardware"]
            assert (hardware["model"], hardware["tp"]) == (model, tp)
            csv = (two_points.out_dir / folder / "goodput.csv").read_text().splitlines()
            assert len(csv) == 3  # header, then sarathi and sarathi-edf on sharegpt
        assert f"wrote {two_points.out_dir / 'a100_llama-2-7b_tp2' / 'goodput.json'}" in (
            two_points.out
        )

    def test_the_points_really_differ(self, two_points: Run) -> None:
        bounds = [
            payload(two_points, folder)["capacity_bounds"]["sharegpt"]["rate"]
            for folder in ("a100_llama-3-8b_tp1", "a100_llama-2-7b_tp2")
        ]
        assert bounds[1] > 1.2 * bounds[0]  # two GPUs for a smaller model

    def test_the_summary_holds_each_points_goodput_and_ratio(self, two_points: Run) -> None:
        text = two_points.out.split("== summary ==")[1]
        assert "Goodput, req/s (mean ± std over seeds), then goodput ÷ sarathi-edf's" in text
        header = text.strip().splitlines()[3].split()
        assert header == ["hardware", "workload", "sarathi", "sarathi-edf", "sarathi", "÷",
                          "sarathi-edf"]  # fmt: skip
        rows = summary_rows(two_points.out)
        assert list(rows) == [TP1, TP2]
        for point, folder in ((TP1, "a100_llama-3-8b_tp1"), (TP2, "a100_llama-2-7b_tp2")):
            saved = payload(two_points, folder)
            goodput = {row["policy"]: row for row in saved["goodput"]}
            expected = [
                f"{goodput[p]['goodput_mean']:.2f} ± {goodput[p]['goodput_std']:.2f}"
                for p in ("sarathi", "sarathi-edf")
            ]
            ratio = saved["goodput_ratios"][0]["interval"]
            ratio["per_seed"] = tuple(ratio["per_seed"])
            assert rows[point] == ["sharegpt", *expected, RatioInterval(**ratio).format()]


def test_a_failing_point_is_reported_and_the_others_still_run(tmp_path: Path) -> None:
    bad = ["a100:llama-3-8b:3", "h999:llama-3-8b:1", f"a100:{tmp_path / 'none/config.json'}:1"]
    run = goodput(tmp_path / "out", *hardware_args(*bad, TP2))
    assert run.code == 2
    errors = run.err.splitlines()
    for line, point in zip(errors, bad, strict=False):
        assert line.startswith(f"slidingserve goodput: error: {point}: ")
    assert "tp=3" in errors[0] and "h999" in errors[1] and "none/config.json" in errors[2]
    assert errors[3:] == [
        f"slidingserve goodput: error: 3 of 4 hardware points failed: {', '.join(bad)}"
    ]
    assert headings(run.out) == [*(f"== {point} ==" for point in bad), f"== {TP2} ==",
                                 "== summary =="]  # fmt: skip
    assert list(summary_rows(run.out)) == [TP2]
    assert [p.name for p in run.out_dir.iterdir()] == ["a100_llama-2-7b_tp2"]
    assert payload(run, "a100_llama-2-7b_tp2")["goodput"][0]["goodput_mean"] > 0


def test_without_hardware_the_output_has_no_heading_and_no_subfolder(tmp_path: Path) -> None:
    run = goodput(tmp_path)
    assert run.code == 0
    assert headings(run.out) == []
    assert run.out.startswith("Searching goodput: 2 policies × 1 workloads × 2 seeds")
    assert "summary" not in run.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["goodput.csv", "goodput.json"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hardware", TP1, "--gpu", "a100"], "give --hardware or --gpu, not both"),
        (["--hardware", TP1, "--model", "llama-2-7b", "--tp", "2"],
         "give --hardware or --model/--tp, not both"),
        (["--hardware", "a100:llama-3-8b"], "a hardware point is GPU:MODEL:TP"),
        (["--hardware", TP1, "--hardware", "a100:llama-3-8b:two"],
         "a hardware point is GPU:MODEL:TP"),
        (["--hardware", TP1, "--hardware", f" {TP1}"], "repeated hardware points"),
        (["--hardware", TP1, "--hardware", f"{TP1}:0.9"], "repeated hardware points"),
    ],
)  # fmt: skip
def test_bad_flags_stop_before_any_point_runs(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    run = goodput(tmp_path / "out", *argv)
    assert run.code == 2
    assert run.err.startswith("slidingserve goodput: error: ") and run.err.count("\n") == 1
    assert message in run.err
    assert run.out == ""
    assert not run.out_dir.exists()


def test_points_that_would_share_a_folder_get_numbered() -> None:
    points = [
        HardwarePoint("a100", "/models/a/llama/config.json", 1),
        HardwarePoint("a100", "/models/b/llama/config.json", 1),
        HardwarePoint("a100", "/models/b/llama/config.json", 2),
        HardwarePoint("a100", "llama", 1),
    ]
    assert point_folders(points) == [
        "a100_llama_tp1",
        "a100_llama_tp1-2",
        "a100_llama_tp2",
        "a100_llama_tp1-3",
    ]


def test_a_point_with_its_cache_cut_runs_beside_the_full_one(tmp_path: Path) -> None:
    cut = "a40:llama-2-7b:1:0.6"
    run = goodput(tmp_path, *hardware_args("a40:llama-2-7b:1", cut))
    assert run.code == 0, run.err
    assert headings(run.out) == ["== a40:llama-2-7b:1 ==", f"== {cut} ==", "== summary =="]
    assert list(summary_rows(run.out)) == ["a40:llama-2-7b:1", cut]
    full, half = (payload(run, f) for f in ("a40_llama-2-7b_tp1", "a40_llama-2-7b_tp1_mem0.6"))
    assert full["experiment"]["hardware"]["gpu_memory_utilization"] == 0.9
    assert half["experiment"]["hardware"]["gpu_memory_utilization"] == 0.6
    bound = {
        name: saved["memory_aware_bounds"]["sharegpt"]["rate"]
        for name, saved in (("full", full), ("half", half))
    }
    assert bound["half"] < 0.9 * bound["full"]  # half the cache: fewer requests share a step
