"""`slidingserve predictor --features paper|rich [--steps FILE]`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from factories import linear_engine_steps

from slidingserve.cli import main
from slidingserve.predictor import load_predictor
from slidingserve.predictor.steps import save_engine_steps

if TYPE_CHECKING:
    from pathlib import Path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def overall_mape(text: str) -> float:
    """The MAPE % column of the table's overall row."""
    row = next(line for line in text.splitlines() if line.startswith("overall"))
    return float(row.split()[-1])


@pytest.mark.parametrize(("features", "width"), [("paper", 7), ("rich", 13)])
def test_the_feature_set_is_fitted_reported_and_saved(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, features: str, width: int
) -> None:
    out = tmp_path / "predictor.json"
    text = run(capsys, "predictor", "--samples", "1200", "--features", features, "--out", str(out))
    assert f"({features} features) fitted on 1200 batches of the simulated" in text
    assert json.loads(out.read_text())["features"] == features
    assert len(load_predictor(out).predictor.global_model.weights) == width


def test_rich_is_the_default_and_the_more_accurate(capsys: pytest.CaptureFixture[str]) -> None:
    rich = run(capsys, "predictor", "--samples", "1200")
    paper = run(capsys, "predictor", "--samples", "1200", "--features", "paper")
    assert "(rich features)" in rich
    assert overall_mape(rich) < 5.0 < overall_mape(paper)


def test_fits_an_engine_steps_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    steps = tmp_path / "steps.json"
    save_engine_steps(steps, linear_engine_steps(count=400, noise=0.02))
    text = run(capsys, "predictor", "--steps", str(steps), "--features", "paper")
    assert "(paper features) fitted on 400 steps of linear engine" in text
    assert overall_mape(text) < 3.0  # a linear engine: the paper's features suffice


def test_an_unknown_feature_set_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["predictor", "--features", "fancy"])
    assert "invalid choice: 'fancy'" in capsys.readouterr().err
