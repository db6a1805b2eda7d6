"""Settings: built from the file and flags without changing either, defaults from the configs."""

from __future__ import annotations

import pytest

from slidingserve.cli import settings as cfg
from slidingserve.eval.experiment import GoodputExperiment
from slidingserve.workloads import ArrivalConfig, Conversations, SystemPrompt, WorkloadConfig


def test_override_and_assignments_build_new_settings() -> None:
    base = cfg.override(cfg.empty_settings(), "workload", slo="relaxed", requests=None)
    assert base["workload"] == {"slo": "relaxed"}
    over = cfg.override(base, "workload", slo="strict")
    assert (base["workload"]["slo"], over["workload"]["slo"]) == ("relaxed", "strict")
    set_once = cfg.with_assignments(base, ["sarathi.chunk_size=256"])
    set_twice = cfg.with_assignments(set_once, ["sarathi.chunk_size=512", 'qoserve.x="y"'])
    assert base["policies"] == {}
    assert set_once["policies"] == {"sarathi": {"chunk_size": 256}}
    assert set_twice["policies"] == {"sarathi": {"chunk_size": 512}, "qoserve": {"x": "y"}}


def test_without_settings_the_configs_hold_their_own_defaults() -> None:
    empty = cfg.empty_settings()
    assert cfg.workload_config(empty, "arxiv", 7) == WorkloadConfig("arxiv", 7)
    assert cfg.arrival_config(empty) == ArrivalConfig()
    assert cfg.experiment_from(empty) == GoodputExperiment()
    assert cfg.tbt_reading(empty) == GoodputExperiment().tbt_reading


def test_given_settings_reach_the_workload_and_the_experiment() -> None:
    settings = cfg.override(
        cfg.empty_settings(), "workload", slo="relaxed", slo_scale=2.0, requests=40
    )
    settings = cfg.override(settings, "goodput", seeds=2, criteria=["overall"], jobs=1)
    workload = cfg.workload_config(settings, "sharegpt", 1000)
    assert (workload.slo_preset, workload.slo_scale, workload.num_requests) == ("relaxed", 2.0, 40)
    experiment = cfg.experiment_from(settings)
    assert (experiment.slo_preset, experiment.slo_scale, experiment.num_requests) == (
        "relaxed",
        2.0,
        40,
    )
    assert (experiment.seeds, experiment.jobs) == ((0, 1), 1)


@pytest.mark.parametrize(("given", "rates"), [(None, [cfg.RATE]), ([2.0, 3.0], [2.0, 3.0])])
def test_rates_are_those_given_else_the_default(
    given: list[float] | None, rates: list[float]
) -> None:
    assert cfg.default_rates(given, WorkloadConfig("sharegpt", 5), seed=0) == rates


@pytest.mark.parametrize(
    ("given", "system", "conversations"),
    [
        ({"system_prompt": "300", "conversations": "4"}, SystemPrompt(300), Conversations(4, 16)),
        (
            {"system_prompt": {"tokens": 300, "share": 0.5}, "conversations": "4:2"},
            SystemPrompt(300, 0.5),
            Conversations(4, 2),
        ),
        ({"conversations": {"turns": 5, "concurrent": 3}}, None, Conversations(5, 3)),
    ],
)
def test_prefix_options_reach_the_workload(
    given: dict[str, object], system: SystemPrompt | None, conversations: Conversations | None
) -> None:
    settings = cfg.override(cfg.empty_settings(), "workload", trace_block_size=256, **given)
    workload = cfg.workload_config(settings, "sharegpt", 10)
    assert (workload.system_prompt, workload.conversations) == (system, conversations)
    assert workload.trace_block_size == 256


def test_prefix_options_reach_the_goodput_experiment_and_bad_ones_are_refused() -> None:
    settings = cfg.override(cfg.empty_settings(), "workload", system_prompt="300")
    experiment = cfg.experiment_from(settings)
    assert experiment.workload_config("sharegpt").system_prompt == SystemPrompt(300, 1.0)
    off = cfg.override(settings, "engine", prefix_caching=False)
    assert not cfg.experiment_from(off).limits.prefix_caching
    bad = cfg.override(cfg.empty_settings(), "workload", conversations={"turns": 3, "x": 1})
    with pytest.raises(ValueError, match=r"\[workload.conversations\]: unknown key\(s\) x"):
        cfg.workload_config(bad, "sharegpt", 10)
