"""The `slidingserve diagnose` command end to end, and its errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slidingserve.cli import main
from slidingserve.eval.diagnose import Cause


def test_diagnose_prints_the_table_and_writes_png_csv_and_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        ["diagnose", "--requests", "120", "--rate", "4", "--seed", "1", "--out-dir", str(tmp_path)]
    )
    text = capsys.readouterr().out
    assert code == 0
    header = next(line for line in text.splitlines() if line.startswith("policy "))
    causes = [c.value for c in Cause]
    assert header.split()[: 3 + len(causes)] == ["policy", "requests", "violating", *causes]
    rows = [line.split() for line in text.splitlines()[3:] if line.startswith(("sar", "sli"))]
    assert [(row[0], row[1]) for row in rows] == [("sarathi-edf", "120"), ("slidingserve", "120")]
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    csv_lines = (tmp_path / "causes.csv").read_text().splitlines()
    assert csv_lines[0].startswith("policy,workload,rate,seed,tbt_reading,requests,violating")
    assert len(csv_lines) == 3
    payload = json.loads((tmp_path / "causes.json").read_text())
    for row in payload["policies"]:
        assert row["requests"] == 120 and row["rate"] == 4.0
        assert sum(row[cause.key] for cause in Cause) == row["violating"] > 0
        assert len(row["violations"]) == row["violating"]
        assert {v["cause"] for v in row["violations"]} <= {cause.value for cause in Cause}


def test_diagnose_help_says_how_the_default_rate_was_chosen(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # no line breaks inside names
    with pytest.raises(SystemExit):
        main(["diagnose", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default sarathi-edf,slidingserve" in text
    assert "(default 2.4: on seed 0, ShareGPT, strict SLOs" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "sarathi,fifo"], "unknown policy 'fifo'"),
        (["--policies", ","], "--policies needs at least one policy name"),
        (["--workload", "chat"], "unknown workload 'chat'"),
        (["--rate", "1e-9"], "rate must be at least"),
        (["--tbt-reading", "sometimes"], "unknown tbt_reading"),
    ],
)
def test_bad_input_gets_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    code = main(["diagnose", "--requests", "5", "--out-dir", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("slidingserve diagnose: error: ") and message in err
    assert err.count("\n") == 1
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("rate", ["0", "-2"])
def test_non_positive_rate_is_refused(capsys: pytest.CaptureFixture[str], rate: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["diagnose", "--rate", rate])
    assert exit_info.value.code == 2
    assert "must be positive" in capsys.readouterr().err


def test_diagnose_shows_the_prefix_cache_s_hits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        [
            "diagnose", "--requests", "80", "--rate", "2", "--system-prompt", "512",
            "--policies", "sarathi-edf", "--out-dir", str(tmp_path),
        ]
    )  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0
    header = next(line for line in text.splitlines() if line.startswith("policy "))
    assert header.rstrip().endswith("prefix hits")
    row = json.loads((tmp_path / "causes.json").read_text())["policies"][0]
    assert 0.1 < row["prefix_hit_rate"] < 0.5
