"""The regime map: the best-baseline ratio by hand, a tiny simulated map, its files, its CLI."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import pytest

from slidingserve.cli import build_parser, main
from slidingserve.cli.regimes import regime_map_from
from slidingserve.eval.experiment import GoodputExperiment, run_experiment
from slidingserve.eval.goodput import SearchSettings
from slidingserve.eval.regime_plot import plot_regime_map
from slidingserve.eval.regime_report import heatmap_grid, regime_rows, regime_table
from slidingserve.eval.regimes import (
    RegimeCell,
    RegimeMap,
    RegimeResult,
    arrival_label,
    parse_arrival,
    regime_cell,
    run_regimes,
)
from slidingserve.sim.hardware import HardwareConfig
from slidingserve.workloads import ArrivalConfig

T_975_2 = 4.302652729911275  # Student t: 97.5% quantile at 2 degrees of freedom
A100 = "a100:llama-3-8b:1"


def make_cell(
    goodput: dict[str, list[float]], *, scale: float = 1.0, hardware: str = A100
) -> RegimeCell:
    """A cell of slidingserve against sarathi-edf and qoserve (in that order) on sharegpt."""
    return regime_cell(
        "slidingserve",
        ("sarathi-edf", "qoserve"),
        goodput,
        hardware=hardware,
        workload="sharegpt",
        arrival="poisson",
        slo_scale=scale,
        seeds=range(len(goodput["slidingserve"])),
    )


class TestTheBestBaseline:
    def test_is_the_best_on_each_seed_not_the_best_on_average(self) -> None:
        made = make_cell(
            {
                "slidingserve": [2.0, 3.0, 1.2],
                "sarathi-edf": [1.6, 2.0, 1.5],  # the best on average (1.70 against 1.50)
                "qoserve": [1.0, 2.5, 1.0],  # but the best on seed 1
            }
        )
        assert made.best_baseline == ("sarathi-edf", "qoserve", "sarathi-edf")
        assert made.best_baseline_goodput == (1.6, 2.5, 1.5)
        # 2.0/1.6, 3.0/2.5, 1.2/1.5; against sarathi-edf alone seed 1 would be 1.5.
        assert made.ratio.per_seed == pytest.approx((1.25, 1.2, 0.8))
        assert made.ratio.mean == pytest.approx(3.25 / 3)
        # deviations 1/6, 7/60, -17/60: squares sum to 0.121667, variance 0.060833
        half = T_975_2 * math.sqrt(0.1216667 / 2 / 3)
        assert made.ratio.low == pytest.approx(3.25 / 3 - half, rel=1e-5)
        assert made.ratio.high == pytest.approx(3.25 / 3 + half, rel=1e-5)
        assert not made.ratio.significant

    def test_a_tight_interval_above_one_is_significant(self) -> None:
        made = make_cell(
            {
                "slidingserve": [1.1, 1.2, 1.3],
                "sarathi-edf": [1.0, 1.0, 1.0],
                "qoserve": [0.5, 1.1, 1.2],
            }
        )
        assert made.ratio.per_seed == pytest.approx((1.1, 1.2 / 1.1, 1.3 / 1.2))
        assert made.ratio.low > 1 and made.ratio.significant

    def test_a_tie_goes_to_the_baseline_listed_first(self) -> None:
        made = make_cell({"slidingserve": [1.0], "sarathi-edf": [2.0], "qoserve": [2.0]})
        assert made.best_baseline == ("sarathi-edf",)
        assert made.ratio.mean == 0.5 and math.isnan(made.ratio.low)  # one seed: no interval

    def test_a_seed_where_no_baseline_passed_is_left_out(self) -> None:
        made = make_cell(
            {"slidingserve": [0.3, 1.0], "sarathi-edf": [0.0, 0.8], "qoserve": [0.0, 0.5]}
        )
        assert made.ratio.per_seed == (1.25,)

    def test_every_policy_needs_a_goodput_per_seed(self) -> None:
        with pytest.raises(ValueError, match="one goodput per seed"):
            make_cell({"slidingserve": [1.0, 1.0], "sarathi-edf": [1.0], "qoserve": [1.0, 1.0]})


def hand_made_map(hardware: tuple[HardwareConfig, ...] = (HardwareConfig(),)) -> RegimeResult:
    """slidingserve on sharegpt, Poisson: behind at ×0.5 (significant), level at ×1."""
    regimes = RegimeMap(
        slo_scales=(0.5, 1.0),
        arrivals=(ArrivalConfig(),),
        hardware=hardware,
        setup=GoodputExperiment(workloads=("sharegpt",), seeds=(0, 1, 2), curve_points=0),
    )
    behind = {"slidingserve": [0.8, 0.9, 1.0], "sarathi-edf": [1.0, 1.1, 1.2], "qoserve": [0.9] * 3}
    level = {
        "slidingserve": [2.0, 2.2, 1.9],
        "sarathi-edf": [2.1, 2.0, 2.0],
        "qoserve": [1.9, 1.9, 2.05],
    }
    cells = [
        make_cell(goodput, scale=scale, hardware=point)
        for point in regimes.hardware_labels
        for scale, goodput in ((0.5, behind), (1.0, level))
    ]
    return RegimeResult(regimes, cells)


class TestTheReport:
    def test_the_heatmap_grid_marks_the_significant_cells(self) -> None:
        grid = heatmap_grid(hand_made_map(), A100)
        assert grid.rows == ["sharegpt poisson"] and grid.columns == ["×0.5", "×1"]
        assert grid.significant == [[True, False]]
        assert grid.ratio[0][0] == pytest.approx((0.8 + 0.9 / 1.1 + 1.0 / 1.2) / 3)
        assert grid.labels[0][0].endswith(" *") and not grid.labels[0][1].endswith("*")

    def test_the_table_prints_every_cell(self) -> None:
        lines = regime_table(hand_made_map(), A100).splitlines()
        assert lines[0].split() == ["workload", "arrival", "×0.5", "×1"]
        assert lines[2].startswith("sharegpt poisson") and lines[2].count("[") == 2
        assert lines[2].count("*") == 1

    def test_the_csv_rows_hold_the_seeds_the_best_baseline_and_the_ratio(self) -> None:
        rows = regime_rows(hand_made_map())
        assert [(r["workload"], r["arrival"], r["slo_scale"]) for r in rows] == [
            ("sharegpt", "poisson", 0.5),
            ("sharegpt", "poisson", 1.0),
        ]
        first = rows[0]
        assert first["goodput_slidingserve"] == "0.8000 0.9000 1.0000"
        assert first["goodput_qoserve"] == "0.9000 0.9000 0.9000"
        assert first["best_baseline"] == "sarathi-edf sarathi-edf sarathi-edf"
        assert first["significant"] is True and rows[1]["significant"] is False
        assert rows[1]["best_baseline"] == "sarathi-edf sarathi-edf qoserve"

    def test_the_bounds_follow_the_ratios_where_they_were_computed(self) -> None:
        made = hand_made_map()
        assert "memory-aware" not in regime_table(made, A100)  # no bounds: no second table
        cells = [dataclasses.replace(c, capacity_bound=3.2, memory_bound=2.5, memory_binding="kv")
                 for c in made.cells]  # fmt: skip
        bounded = RegimeResult(made.regimes, cells)
        text = regime_table(bounded, A100)
        assert "slidingserve's goodput (mean over seeds) ÷ the memory-aware bound" in text
        line = next(row for row in text.splitlines()[4:] if row.startswith("sharegpt"))
        assert line.split() == ["sharegpt", "3.20", "2.50", "(kv)", "36%", "81%"]  # 0.9, 2.03
        rows = regime_rows(bounded)
        assert rows[0]["memory_aware_bound"] == 2.5 and rows[0]["memory_bound_binding"] == "kv"
        assert rows[1]["candidate_share_of_memory_bound"] == pytest.approx(6.1 / 3 / 2.5)

    def test_the_heatmap_png_has_a_panel_per_hardware_point(self, tmp_path: Path) -> None:
        result = hand_made_map((HardwareConfig(), HardwareConfig(tp=2)))
        assert [heatmap_grid(result, p).title for p in result.regimes.hardware_labels] == [
            A100,
            "a100:llama-3-8b:2",
        ]
        path = plot_regime_map(result, tmp_path / "map.png")
        assert path.read_bytes()[:4] == b"\x89PNG"


TINY = RegimeMap(
    candidate="vllm",
    baselines=("sarathi", "sarathi-edf"),
    slo_scales=(1.0,),
    arrivals=(ArrivalConfig(), ArrivalConfig("gamma", 2.0)),
    setup=GoodputExperiment(
        workloads=("sharegpt",),
        seeds=(0, 1),
        num_requests=60,
        search=SearchSettings(precision=0.1),
        curve_points=0,
        jobs=1,
    ),
)


def test_a_tiny_map_searches_every_policy_once_per_cell_and_seed() -> None:
    finished: list[int] = []
    result = run_regimes(TINY, finished.append)
    assert sum(finished) == TINY.search_count == 2 * 3 * 2  # cells × policies × seeds
    assert [(c.workload, c.arrival, c.slo_scale) for c in result.cells] == [
        ("sharegpt", "poisson", 1.0),
        ("sharegpt", "gamma:2", 1.0),
    ]
    for made in result.cells:
        assert set(made.goodput) == {"vllm", "sarathi", "sarathi-edf"}
        for seed, best in enumerate(made.best_baseline):
            bar = max(made.goodput["sarathi"][seed], made.goodput["sarathi-edf"][seed])
            assert made.goodput[best][seed] == bar > 0
            assert made.ratio.per_seed[seed] == made.goodput["vllm"][seed] / bar
    # The shared pool gives what each cell's own experiment gives (common random numbers).
    bursty = run_experiment(TINY.experiments()[A100, "gamma:2", 1.0])
    assert {row.policy: row.per_seed for row in bursty.rows} == result.cells[1].goodput


def test_the_default_map_is_the_one_the_issue_asks_for() -> None:
    regimes = RegimeMap()
    assert regimes.policies == ("slidingserve", "sarathi-edf", "qoserve")
    assert regimes.slo_scales == (0.5, 0.75, 1.0, 1.5, 2.0)
    assert regimes.arrival_labels == ["poisson", "gamma:2"]
    assert regimes.hardware_labels == [A100]
    assert (regimes.setup.num_requests, len(regimes.setup.seeds)) == (600, 3)
    assert regimes.search_count == 4 * 5 * 2 * 3 * 3
    assert all(e.curve_points == 0 for e in regimes.experiments().values())


def test_arrival_labels_read_back() -> None:
    for arrival in (ArrivalConfig(), ArrivalConfig("gamma", 2.5)):
        assert parse_arrival(arrival_label(arrival)) == arrival


def test_one_value_flags_make_one_value_axes() -> None:
    def parsed(*argv: str) -> RegimeMap:
        return regime_map_from(build_parser().parse_args(["regimes", *argv]))

    one = parsed("--slo-scale", "0.5", "--arrival", "gamma", "--burstiness", "3", "--tp", "2")
    assert one.slo_scales == (0.5,)
    assert one.arrival_labels == ["gamma:3"]
    assert one.hardware_labels == ["a100:llama-3-8b:2"]
    many = parsed("--arrivals", "poisson,gamma:4", "--overload", "10:5:3", "--hardware",
                  "a100:llama-3-8b:1", "--hardware", "a100:llama-2-7b:1")  # fmt: skip
    assert many.arrival_labels == ["poisson", "gamma:4"]
    assert all(a.overload is not None and a.overload.factor == 3 for a in many.arrivals)
    assert many.hardware_labels == [A100, "a100:llama-2-7b:1"]


def test_the_command_prints_the_map_and_writes_its_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        ["regimes", "--candidate", "sarathi", "--baselines", "vllm", "--workloads", "arxiv",
         "--slo-scales", "1", "--arrivals", "poisson", "--seeds", "1", "--requests", "60",
         "--precision", "0.2", "--jobs", "1", "--no-progress", "--out-dir", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "arxiv poisson" in out and "sarathi's goodput ÷ the best of vllm" in out
    with (tmp_path / "regimes.csv").open() as stream:
        rows = list(csv.DictReader(stream))
    assert [(r["workload"], r["arrival"], r["best_baseline"]) for r in rows] == [
        ("arxiv", "poisson", "vllm")
    ]
    payload = json.loads((tmp_path / "regimes.json").read_text())
    assert payload["cells"][0]["goodput"].keys() == {"sarathi", "vllm"}
    assert payload["cells"][0]["best_baseline"] == ["vllm"]
    assert payload["cells"][0]["ratio"]["per_seed"] == [float(rows[0]["ratio_mean"])]
    assert (tmp_path / "regimes.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workloads", "chat"], "unknown workload 'chat'"),
        (["--baselines", "sarathi-edf,fifo"], "unknown policy 'fifo'"),
        (["--candidate", "nope"], "unknown policy 'nope'"),
        (["--slo-scales", "0.5,0"], "SLO scales must be positive, got 0"),
        (["--slo-scales", "-1"], "SLO scales must be positive, got -1"),
        (["--slo-scales", "1,x"], "--slo-scales takes numbers"),
        (["--baselines", "qoserve,slidingserve"], "the baselines include the candidate"),
        (["--slo-scales", "1", "--slo-scale", "2"], "give --slo-scales or --slo-scale"),
        (["--arrivals", "poisson", "--burstiness", "2"], "give --arrivals or --burstiness"),
        (["--arrivals", "gamma:x"], "an arrival is poisson or gamma:CV"),
        (["--arrivals", "uniform"], "unknown arrival process 'uniform'"),
        (["--hardware", "a100:llama-3-8b"], "a hardware point is GPU:MODEL:TP"),
        (["--hardware", "a100:llama-3-8b:1", "--tp", "2"], "give --hardware or --tp"),
        (["--slo-scales", "1,1"], "repeated SLO scales"),
    ],
)
def test_bad_input_gets_one_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["regimes", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("slidingserve regimes: error: ") and err.count("\n") == 1
    assert message in err
