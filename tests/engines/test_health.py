"""The adapter's departure counts, their rate-limited log line and Prometheus counters."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slidingserve.engines.vllm.health import (
    AdapterHealth,
    HealthCounts,
    PrometheusCounts,
    share_vllm_log_handlers,
)

HEALTH_LOGGER = "slidingserve.engines.vllm.health"


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeLearner:
    def __init__(self) -> None:
        self.num_failures = 0
        self.num_listener_failures = 0


def make_health(
    interval: float = 60.0, metrics: PrometheusCounts | None = None
) -> tuple[AdapterHealth, FakeClock, FakeLearner]:
    clock, learner = FakeClock(), FakeLearner()
    return AdapterHealth(learner, interval, clock, metrics), clock, learner


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == HEALTH_LOGGER]


def test_the_log_line_names_every_count() -> None:
    counts = HealthCounts(1234, 3, 2, 1, 5)
    assert counts.line() == (
        "slidingserve: 1234 steps, 3 fell back to vLLM (empty plan), 2 plan mismatches, "
        "1 failed refits, 5 failed policy refits"
    )


def test_steps_fallbacks_and_mismatches_are_counted_apart() -> None:
    health, _, learner = make_health()
    health.step(fell_back=False, mismatch=False)
    health.step(fell_back=True, mismatch=False)
    health.step(fell_back=False, mismatch=True)
    health.step(fell_back=False, mismatch=True)
    learner.num_failures, learner.num_listener_failures = 2, 7
    assert health.counts == HealthCounts(4, 1, 2, 2, 7)


def test_at_most_one_line_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    health, clock, _ = make_health(60.0)
    with caplog.at_level(logging.INFO, logger=HEALTH_LOGGER):
        health.step(fell_back=True, mismatch=False)
        clock.now += 59.9
        health.step(fell_back=False, mismatch=False)
        assert lines(caplog) == []  # not a minute since the start
        clock.now += 0.1
        health.step(fell_back=False, mismatch=True)
        clock.now += 30.0
        health.step(fell_back=False, mismatch=False)
        assert lines(caplog) == [HealthCounts(3, 1, 1, 0, 0).line()]
        clock.now += 30.0
        health.step(fell_back=False, mismatch=False)
    assert lines(caplog) == [HealthCounts(3, 1, 1, 0, 0).line(), HealthCounts(5, 1, 1, 0, 0).line()]


def test_a_quiet_engine_logs_on_its_next_step(caplog: pytest.LogCaptureFixture) -> None:
    health, clock, _ = make_health(60.0)
    clock.now += 3600.0  # idle for an hour: no step, no line
    with caplog.at_level(logging.INFO, logger=HEALTH_LOGGER):
        health.step(fell_back=False, mismatch=False)
        clock.now += 1.0
        health.step(fell_back=False, mismatch=False)
    assert lines(caplog) == [HealthCounts(1, 0, 0, 0, 0).line()]  # then a new minute starts


def test_bad_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="log_interval"):
        make_health(0.0)


def test_prometheus_counters_follow_the_counts() -> None:
    registry = CollectorRegistry()
    health, _, learner = make_health(metrics=PrometheusCounts(registry))
    for fell_back, mismatch in [(True, False), (False, True), (False, False)]:
        health.step(fell_back=fell_back, mismatch=mismatch)
    learner.num_listener_failures = 2
    health.step(fell_back=True, mismatch=False)
    values = {
        name: registry.get_sample_value(f"slidingserve:{name}_total")
        for name in HealthCounts._fields
    }
    assert values == {
        "steps": 4.0,
        "empty_plans": 2.0,
        "plan_mismatches": 1.0,
        "failed_refits": 0.0,
        "failed_policy_refits": 2.0,
    }


def test_prometheus_counters_only_when_served(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    assert PrometheusCounts.if_exported() is None
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert isinstance(PrometheusCounts.if_exported(), PrometheusCounts)


def test_log_lines_reach_vllm_s_handlers_when_logging_is_unconfigured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handler = logging.NullHandler()
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(logging.getLogger("vllm"), "handlers", [handler])
    ours = logging.getLogger("slidingserve.test_share_unconfigured")
    try:
        share_vllm_log_handlers(ours.name)
        assert ours.handlers == [handler]
        assert ours.getEffectiveLevel() <= logging.INFO
    finally:
        ours.handlers.clear()
        ours.setLevel(logging.NOTSET)


def test_configured_logging_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.NullHandler()])
    monkeypatch.setattr(logging.getLogger("vllm"), "handlers", [logging.NullHandler()])
    ours = logging.getLogger("slidingserve.test_share_configured")
    share_vllm_log_handlers(ours.name)
    assert ours.handlers == [] and ours.level == logging.NOTSET
