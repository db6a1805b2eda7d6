"""The adapter's departure counts and state sizes, their rate-limited log line, the policy's
errors, and the Prometheus counters and gauges."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:  # prometheus_client comes with the `vllm` extra; the tests that need it skip without it
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector
except ModuleNotFoundError:
    HAS_PROMETHEUS = False
else:
    HAS_PROMETHEUS = True

from slidingserve.engines.vllm.health import (
    STATE_HELP,
    AdapterHealth,
    HealthCounts,
    PrometheusCounts,
    share_vllm_log_handlers,
)

HEALTH_LOGGER = "slidingserve.engines.vllm.health"
needs_prometheus = pytest.mark.skipif(
    not HAS_PROMETHEUS, reason="prometheus_client comes with the vllm extra"
)


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeLearner:
    def __init__(self) -> None:
        self.num_failures = 0
        self.num_listener_failures = 0
        self.num_dropped = 0


class FakeSizes:
    """The scheduler's `state_sizes`: one size per `STATE_HELP` name, set by the test."""

    def __init__(self) -> None:
        self.sizes = dict.fromkeys(STATE_HELP, 0)

    def __call__(self) -> dict[str, int]:
        return dict(self.sizes)


def make_health(
    interval: float = 60.0,
    metrics: PrometheusCounts | None = None,
    sizes: FakeSizes | None = None,
) -> tuple[AdapterHealth, FakeClock, FakeLearner]:
    clock, learner = FakeClock(), FakeLearner()
    return AdapterHealth(learner, interval, clock, metrics, sizes), clock, learner


def counts(steps: int, empty: int = 0, mismatches: int = 0, **more: int) -> HealthCounts:
    """Counts with every other field 0 unless given by name."""
    zeros = dict.fromkeys(HealthCounts._fields[3:], 0)
    return HealthCounts(steps, empty, mismatches, **{**zeros, **more})


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == HEALTH_LOGGER]


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in records(caplog)]


def test_the_log_line_names_every_count() -> None:
    line = HealthCounts(1234, 3, 2, 1, 5, 7, 11, 13, 800, 200).line()
    assert line == (
        "slidingserve: 1234 steps, 3 fell back to vLLM (empty plan), 2 plan mismatches, "
        "1 failed refits, 5 failed policy refits, 7 preemptions, 11 policy errors, "
        "13 dropped samples, 25.0% prefix-cache hits"
    )


def test_the_prefix_cache_s_tokens_add_up_over_steps() -> None:
    health, _, _ = make_health()
    health.step(fell_back=False, mismatch=False, prefix_queried=300, prefix_hit=0)
    health.step(fell_back=False, mismatch=False, prefix_queried=100, prefix_hit=96)
    counts = health.counts
    assert (counts.prefix_queried_tokens, counts.prefix_hit_tokens) == (400, 96)
    assert counts.prefix_hit_rate == pytest.approx(0.24)
    assert HealthCounts(0, 0, 0, 0, 0, 0, 0, 0).prefix_hit_rate == 0.0


def test_steps_fallbacks_mismatches_and_preemptions_are_counted_apart() -> None:
    health, _, learner = make_health()
    health.step(fell_back=False, mismatch=False)
    health.step(fell_back=True, mismatch=False)
    health.step(fell_back=False, mismatch=True, preempted=3)
    health.step(fell_back=False, mismatch=True, preempted=2)
    health.policy_failed(RuntimeError("bug"), "schedule")
    learner.num_failures, learner.num_listener_failures, learner.num_dropped = 2, 7, 4
    assert health.counts == HealthCounts(4, 1, 2, 2, 7, 5, 1, 4)


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
        assert lines(caplog) == [counts(3, 1, 1).line()]
        clock.now += 30.0
        health.step(fell_back=False, mismatch=False)
    assert lines(caplog) == [counts(3, 1, 1).line(), counts(5, 1, 1).line()]


def test_a_quiet_engine_logs_on_its_next_step(caplog: pytest.LogCaptureFixture) -> None:
    health, clock, _ = make_health(60.0)
    clock.now += 3600.0  # idle for an hour: no step, no line
    with caplog.at_level(logging.INFO, logger=HEALTH_LOGGER):
        health.step(fell_back=False, mismatch=False)
        clock.now += 1.0
        health.step(fell_back=False, mismatch=False)
    assert lines(caplog) == [counts(1).line()]  # then a new minute starts


def test_the_line_ends_with_the_size_of_every_structure(caplog: pytest.LogCaptureFixture) -> None:
    sizes = FakeSizes()
    sizes.sizes["tracked_requests"], sizes.sizes["timed_steps"] = 12, 345
    health, _, _ = make_health(sizes=sizes)
    with caplog.at_level(logging.INFO, logger=HEALTH_LOGGER):
        health.log_now()
    state = " ".join(f"{name}={sizes.sizes[name]}" for name in STATE_HELP)
    assert lines(caplog) == [f"{counts(0).line()}; state: {state}"]
    assert "tracked_requests=12 imposer_caps=0" in lines(caplog)[0]
    assert "timed_steps=345" in lines(caplog)[0]


def test_bad_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="log_interval"):
        make_health(0.0)


# -- a policy that raises ---------------------------------------------------------------


def fail(health: AdapterHealth, times: int, message: str = "bug") -> None:
    for _ in range(times):
        try:
            raise ZeroDivisionError(message)
        except ZeroDivisionError as error:
            health.policy_failed(error, "schedule")


def test_the_first_policy_error_is_logged_with_its_traceback_later_ones_only_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    health, _, _ = make_health()
    with caplog.at_level(logging.INFO, logger=HEALTH_LOGGER):
        fail(health, 1, "first")
        fail(health, 49, "again")
    (first,) = records(caplog)
    assert first.levelno == logging.ERROR and "raised in schedule" in first.getMessage()
    assert first.exc_info is not None and first.exc_info[0] is ZeroDivisionError
    assert "ZeroDivisionError: first" in caplog.text  # the traceback
    assert health.counts.policy_errors == 50


def test_a_policy_failing_every_step_makes_every_line_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    health, clock, _ = make_health(60.0)
    with caplog.at_level(logging.INFO, logger=HEALTH_LOGGER):
        for _ in range(181):  # three minutes of failing steps, a step a second
            fail(health, 1, "still broken")
            health.step(fell_back=True, mismatch=False)
            clock.now += 1.0
        logged = records(caplog)[1:]  # after the first error's traceback
        assert [r.levelno for r in logged] == [logging.ERROR] * 3
        new = [int(r.getMessage().split("policy raised ")[1].split()[0]) for r in logged]
        assert new == [61, 60, 60]  # lines at steps 61, 121 and 181
        assert "latest in schedule: ZeroDivisionError: still broken" in logged[-1].getMessage()
        assert "181 policy errors" in logged[-1].getMessage()
        for _ in range(61):  # the policy recovered: the next line is an INFO again
            health.step(fell_back=False, mismatch=False)
            clock.now += 1.0
    assert records(caplog)[-1].levelno == logging.INFO
    assert len(records(caplog)) == 5


# -- Prometheus -------------------------------------------------------------------------


@needs_prometheus
def test_prometheus_counters_follow_the_counts() -> None:
    registry = CollectorRegistry()
    health, _, learner = make_health(metrics=PrometheusCounts(registry))
    for fell_back, mismatch in [(True, False), (False, True), (False, False)]:
        health.step(fell_back=fell_back, mismatch=mismatch)
    learner.num_listener_failures, learner.num_dropped = 2, 6
    fail(health, 3)
    health.step(fell_back=True, mismatch=False, preempted=4, prefix_queried=64, prefix_hit=32)
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
        "preemptions": 4.0,
        "policy_errors": 3.0,
        "dropped_samples": 6.0,
        "prefix_queried_tokens": 64.0,
        "prefix_hit_tokens": 32.0,
    }


@needs_prometheus
def test_prometheus_gauges_follow_the_sizes_down_to_zero() -> None:
    registry, sizes = CollectorRegistry(), FakeSizes()
    health, _, _ = make_health(metrics=PrometheusCounts(registry), sizes=sizes)
    sizes.sizes.update(tracked_requests=40, imposer_caps=7, learner_samples=900)
    health.step(fell_back=False, mismatch=False)
    assert registry.get_sample_value("slidingserve:tracked_requests") == 40.0
    assert registry.get_sample_value("slidingserve:learner_samples") == 900.0
    sizes.sizes.update(tracked_requests=0, imposer_caps=0)
    health.state_changed()  # the requests left after the step
    values = {name: registry.get_sample_value(f"slidingserve:{name}") for name in STATE_HELP}
    assert values == {**dict.fromkeys(STATE_HELP, 0.0), "learner_samples": 900.0}


PUBLISH_IN_ENGINE = """
from slidingserve.engines.vllm.health import STATE_HELP, PrometheusCounts
metrics = PrometheusCounts.if_exported()
metrics.publish_sizes({**dict.fromkeys(STATE_HELP, 0), "tracked_requests": %d})
if %s:
    metrics.close()
"""


def publish_in_another_process(folder: Path, tracked: int, close: bool = False) -> None:
    """What an engine core process does: publish sizes into the multiprocess folder (and,
    with `close`, shut down cleanly)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder)}
    code = textwrap.dedent(PUBLISH_IN_ENGINE % (tracked, close))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)


def served_registry(folder: Path) -> CollectorRegistry:
    """What vLLM's API server reads for `/metrics`: every process's files in `folder`."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, str(folder))  # type: ignore[no-untyped-call]
    return registry


@needs_prometheus
def test_the_gauges_reach_a_multiprocess_registry_summed_over_engines(tmp_path: Path) -> None:
    publish_in_another_process(tmp_path, 5)
    publish_in_another_process(tmp_path, 3)
    registry = served_registry(tmp_path)
    assert registry.get_sample_value("slidingserve:tracked_requests") == 8.0
    assert registry.get_sample_value("slidingserve:imposer_caps") == 0.0


@needs_prometheus
def test_an_engine_that_shut_down_leaves_the_sum(tmp_path: Path) -> None:
    publish_in_another_process(tmp_path, 5)
    publish_in_another_process(tmp_path, 3, close=True)
    registry = served_registry(tmp_path)
    assert registry.get_sample_value("slidingserve:tracked_requests") == 5.0


@needs_prometheus
def test_prometheus_metrics_only_when_served(
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
