"""The `slidingserve` command end to end, and its errors on bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from factories import run_cli as run

from slidingserve.cli import main


def test_simulate_prints_a_row_per_policy_and_rate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "runs.json"
    code, text, _ = run(
        capsys,
        "simulate", "--policy", "vllm,sarathi", "--workload", "arxiv",
        "--rate", "0.5", "1.0", "--requests", "40", "--out", str(out),
    )  # fmt: skip
    assert code == 0
    assert len([line for line in text.splitlines() if " arxiv " in line]) == 4
    rows = json.loads(out.read_text())
    assert [(r["policy"], r["rate"]) for r in rows] == [
        ("vllm", 0.5), ("vllm", 1.0), ("sarathi", 0.5), ("sarathi", 1.0),
    ]  # fmt: skip
    assert all(r["requests"] == 40 for r in rows)


def test_simulate_names_the_shared_prefixes_in_its_header(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, text, _ = run(
        capsys,
        "simulate", "--workload", "sharegpt", "--rate", "1.0", "--requests", "40",
        "--system-prompt", "200:0.5", "--conversations", "3",
    )  # fmt: skip
    assert code == 0
    header = next(line for line in text.splitlines() if line.startswith("workload sharegpt"))
    assert header.endswith(
        "a 200-token system prompt on 50% of requests; conversations of 3 turns, 16 at once; "
        "prefix cache on"
    )
    assert "prefix hits%" in text


def test_simulate_without_the_prefix_cache_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = run(
        capsys,
        "simulate", "--workload", "sharegpt", "--rate", "1.0", "--requests", "40",
        "--system-prompt", "200", "--no-prefix-cache",
    )  # fmt: skip
    assert code == 0
    assert "prefix cache off (--no-prefix-cache)" in text
    assert "prefix hits%" not in text  # no run had a cache


SMALL_GOODPUT = (
    "goodput", "--policies", "sarathi", "--workloads", "sharegpt", "--seeds", "1",
    "--requests", "60", "--precision", "0.2", "--jobs", "1", "--no-progress",
)  # fmt: skip
"""A goodput run of a few seconds: one policy, one workload, one seed of 60 requests."""


def test_goodput_runs_with_a_shared_system_prompt_and_reports_the_hits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, text, _ = run(
        capsys, *SMALL_GOODPUT, "--curve-points", "0", "--out-dir", str(tmp_path),
        "--system-prompt", "512",
    )  # fmt: skip
    assert code == 0
    assert "a 512-token system prompt on 100% of requests; prefix cache on" in text
    (row,) = csv.DictReader((tmp_path / "goodput.csv").read_text().splitlines())
    assert 0.1 < float(row["prefix_hit_rate_at_goodput"]) < 0.5  # 512 of ~2,400 tokens
    assert "% hits)" in text


def test_goodput_writes_table_json_csv_and_plot(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, text, _ = run(capsys, *SMALL_GOODPUT, "--curve-points", "2", "--out-dir", str(tmp_path))
    assert code == 0
    assert "sharegpt" in text and "sarathi" in text
    payload = json.loads((tmp_path / "goodput.json").read_text())
    row = payload["goodput"][0]
    assert row["policy"] == "sarathi" and row["goodput_mean"] > 0
    assert len(payload["violation_curve"]) == 2
    assert (
        (tmp_path / "goodput.csv").read_text().startswith("policy,workload,criterion,goodput_mean")
    )
    assert (tmp_path / "violation_vs_rate.png").read_bytes()[:4] == b"\x89PNG"


def test_goodput_prints_ratios_with_intervals_and_per_gap_tbt(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, text, _ = run(
        capsys,
        "goodput", "--policies", "sarathi,sarathi-edf", "--reference", "sarathi",
        "--workloads", "sharegpt", "--seeds", "2", "--requests", "60", "--precision", "0.2",
        "--curve-points", "0", "--jobs", "1", "--no-progress", "--out-dir", str(tmp_path),
    )  # fmt: skip
    assert code == 0
    assert "Goodput ÷ sarathi's on the same seed" in text
    assert "p99 gap between tokens" in text
    rows = {r["policy"]: r for r in json.loads((tmp_path / "goodput.json").read_text())["goodput"]}
    assert rows["sarathi-edf"]["at_goodput"][0] > 0  # p99 per-gap TBT, seconds
    ratios = json.loads((tmp_path / "goodput.json").read_text())["goodput_ratios"]
    assert [(r["policy"], r["reference"]) for r in ratios] == [("sarathi-edf", "sarathi")]
    per_seed = rows["sarathi-edf"]["per_seed"]
    reference = rows["sarathi"]["per_seed"]
    expected = [a / b for a, b in zip(per_seed, reference, strict=True)]
    assert ratios[0]["interval"]["per_seed"] == pytest.approx(expected)


def test_goodput_help_states_the_true_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    from slidingserve.eval.experiment import GoodputExperiment

    with pytest.raises(SystemExit):
        main(["goodput", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = GoodputExperiment()
    # argparse may wrap the list at a hyphen: compare without the white space.
    assert f"default{','.join(defaults.policies)}" in "".join(text.split())
    assert f"number of seeds (default {len(defaults.seeds)})" in text


def test_config_file_and_flags_combine(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "settings.toml"
    config.write_text(
        '[workload]\nrequests = 30\nslo = "relaxed"\n[policies.sarathi]\nchunk_size = 256\n'
    )
    out = tmp_path / "runs.csv"
    code, _, _ = run(
        capsys, "simulate", "--config", str(config), "--requests", "20", "--out", str(out)
    )
    assert code == 0
    assert out.read_text().splitlines()[1].split(",")[4] == "20"  # the flag won


def test_predictor_reports_accuracy_and_saves(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "predictor.json"
    code, text, _ = run(capsys, "predictor", "--samples", "600", "--out", str(out))
    assert code == 0
    assert "decode_only" in text and "R²" in text
    assert json.loads(out.read_text())["metadata"]["model"] == "llama-3-8b"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--policy", "fifo"], "unknown policy 'fifo'"),
        (["simulate", "--workload", "chat"], "unknown workload 'chat'"),
        (["simulate", "--model", "gpt-9"], "unknown model 'gpt-9'"),
        (["simulate", "--slo-scale", "-1"], "scale"),
        (["simulate", "--slo", "loose"], "unknown SLO preset 'loose'"),
        (["simulate", "--set", "sarathi.chunk=3"], "unknown option(s) chunk"),
        (["simulate", "--set", "sarathi.chunk_size=0"], "chunk_size must be at least 1"),
        (["simulate", "--overload", "1:2"], "START:DURATION:FACTOR"),
        (["simulate", "--tbt-reading", "sometimes"], "unknown tbt_reading"),
        (["simulate", "--requests", "0"], "num_requests must be at least 1"),
        (["goodput", "--policies", "vllm,magic"], "unknown policy 'magic'"),
        (["goodput", "--seeds", "0"], "seeds must be a positive count"),
        (
            ["goodput", "--policies", "vllm,sarathi", "--reference", "qoserve"],
            "reference policy 'qoserve' is not among vllm, sarathi",
        ),
        (["simulate", "--set", "sarathi.chunk_size=abc"], "chunk_size must be an integer"),
        (["simulate", "--set", "sarathi.chunk_size=1.5"], "chunk_size must be an integer"),
        (["simulate", "--set", "sarathi.chunk_size=true"], "chunk_size must be an integer"),
        (["simulate", "--set", "sarthi.chunk_size=128"], "unknown policy 'sarthi'"),
        (["simulate", "--out", "results.txt"], "--out must end in .json or .csv"),
        (["simulate", "--max-num-seqs", "0"], "max_num_seqs must be at least 1"),
        (["simulate", "--rate", "1e-9"], "rate must be at least"),
        (["simulate", "--gpu-memory-utilization", "1.5"], "gpu_memory_utilization must be in"),
        (
            ["simulate", "--model", "llama-2-7b", "--gpu-memory-utilization", "0.15"],
            "does not fit on 1 × a100",
        ),
    ],
)
def test_bad_input_gets_a_clear_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err


def test_non_positive_rate_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--rate", "0"])
    assert exit_info.value.code == 2
    assert "must be positive" in capsys.readouterr().err


def test_wrongly_typed_config_values_are_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "typed.toml"
    for text, message in [
        ('[engine]\nmax_num_seqs = "8"\n', "max_num_seqs must be an integer"),
        ("[workload]\noverload = 3\n", "overload must be a table"),
        ("[policies]\nsarathi = 5\n", "must be a table of options"),
    ]:
        config.write_text(text)
        code, _, err = run(capsys, "simulate", "--config", str(config), "--requests", "5")
        assert code == 2, text
        assert message in err, err


def test_goodput_honours_the_tbt_reading(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    common = ["goodput", "--policies", "vllm", "--workloads", "sharegpt", "--seeds", "1"]
    common += ["--requests", "60", "--precision", "0.2", "--curve-points", "0", "--jobs", "1"]
    goodput = {}
    for reading in ("cumulative", "per-gap"):
        out = tmp_path / reading
        code, _, _ = run(
            capsys, *common, "--no-progress", "--out-dir", str(out), "--tbt-reading", reading
        )
        assert code == 0
        payload = json.loads((out / "goodput.json").read_text())
        assert f"read {reading}" in payload["setup"]
        goodput[reading] = payload["goodput"][0]["goodput_mean"]
    # vLLM's 2048-token chunks stall decodes for longer than 50 ms: per gap that counts.
    assert goodput["per-gap"] < goodput["cumulative"]


def test_malformed_config_file_is_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[workload\nrequests = 3")
    code, _, err = run(capsys, "simulate", "--config", str(config))
    assert code == 2 and "not valid TOML" in err
    config.write_text("[scheduler]\nx = 1\n")
    code, _, err = run(capsys, "simulate", "--config", str(config))
    assert code == 2 and "unknown table(s) scheduler" in err


def test_malformed_trace_file_names_the_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = tmp_path / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
    trace.write_text("num_prefill_tokens,num_decode_tokens\n10,5\n12,x\n")
    code, _, err = run(capsys, "simulate", "--trace-dir", str(tmp_path), "--requests", "5")
    assert code == 2
    assert "line 3" in err


def test_the_memory_share_flag_cuts_the_kv_cache(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`--gpu-memory-utilization` reaches the replica: with a quarter of the A100's memory
    Llama-2-7B's cache holds a few arXiv requests, and the same run preempts."""
    preemptions = []
    for share in ("0.9", "0.25"):
        out = tmp_path / f"runs{share}.json"
        argv = ["simulate", "--model", "llama-2-7b", "--workload", "arxiv", "--requests", "30"]
        argv += ["--rate", "4", "--gpu-memory-utilization", share, "--out", str(out)]
        code, _, _ = run(capsys, *argv)
        assert code == 0
        preemptions.append(json.loads(out.read_text())[0]["preemptions"])
    assert preemptions[0] == 0 < preemptions[1]
