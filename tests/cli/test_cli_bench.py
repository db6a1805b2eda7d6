"""`slidingserve bench` arguments → BenchConfig (the run itself is tested with a fake server)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from slidingserve.cli.bench import add_parser, bench_config
from slidingserve.cli.settings import parse_overload
from slidingserve.workloads import OverloadWindow


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="slidingserve")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["bench", "--url", "http://127.0.0.1:9", *argv])


def test_defaults() -> None:
    config = bench_config(parse())
    assert config.workload.name == "sharegpt" and config.workload.num_requests == 200
    assert (config.rate, config.seed, config.vocab_size) == (1.0, 0, 1000)
    assert (config.max_duration, config.request_timeout) == (600.0, 300.0)
    assert config.model is None and config.max_model_len is None
    assert config.xargs and not config.priority_from_slo and config.progress


def test_flags_reach_the_config() -> None:
    args = parse(
        "--workload", "mixed-v1", "--rate", "2.5", "--requests", "40", "--seed", "3",
        "--duration", "30", "--timeout", "9", "--max-model-len", "512", "--model", "tiny",
        "--vocab-size", "300", "--no-xargs", "--priority-from-slo", "--no-progress",
        "--arrival", "gamma", "--burstiness", "2", "--overload", "5:10:3",
        "--slo", "relaxed", "--slo-scale", "0.5", "--tiers", "premium-standard",
    )  # fmt: skip
    config = bench_config(args)
    work = config.workload
    assert (work.name, work.num_requests, work.slo_preset, work.slo_scale) == (
        "mixed-v1",
        40,
        "relaxed",
        0.5,
    )
    assert work.arrival.process == "gamma" and work.arrival.burstiness == 2.0
    assert work.arrival.overload == OverloadWindow(5.0, 10.0, 3.0)
    assert work.tiers is not None and work.tiers.names == ("premium", "standard")
    assert (config.rate, config.seed, config.max_duration, config.request_timeout) == (
        2.5,
        3,
        30.0,
        9.0,
    )
    assert (config.model, config.max_model_len, config.vocab_size) == ("tiny", 512, 300)
    assert not config.xargs and config.priority_from_slo and not config.progress


def test_settings_file_with_flags_on_top(tmp_path: Path) -> None:
    settings = tmp_path / "bench.toml"
    settings.write_text('[workload]\nrequests = 7\nslo = "relaxed"\nslo_scale = 2.0\n')
    config = bench_config(parse("--config", str(settings), "--slo-scale", "3"))
    assert config.workload.num_requests == 7 and config.workload.slo_preset == "relaxed"
    assert config.workload.slo_scale == 3.0


@pytest.mark.parametrize("text", ["5:10", "a:b:c", "1:2:3:4"])
def test_bad_overload(text: str) -> None:
    with pytest.raises(ValueError, match="START:DURATION:FACTOR"):
        parse_overload(text)


@pytest.mark.parametrize("flag", ["--rate", "--duration", "--timeout"])
def test_non_positive_numbers_are_refused(flag: str) -> None:
    with pytest.raises(SystemExit):
        parse(flag, "0")


def test_bad_url_and_workload() -> None:
    args = parse()
    args.url = "localhost:80"
    with pytest.raises(ValueError, match="http"):
        bench_config(args)
    with pytest.raises(ValueError, match="unknown workload"):
        bench_config(parse("--workload", "nope"))
