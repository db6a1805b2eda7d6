"""`compare`'s procedure on a fake `Trials`: names checked first, the SLO scale calibrated
once inside the first policy's server, repeats by consecutive seeds, median rows, searches
judged by the median."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from factories import run_metrics as metrics

from slidingserve.bench.runner import BenchConfig
from slidingserve.eval.goodput import SearchSettings
from slidingserve.live.compare import LiveComparison, LiveSettings, compare
from slidingserve.metrics import RunMetrics
from slidingserve.workloads import WorkloadConfig

SETTINGS = LiveSettings("unused", seed=10, repeats=3, search=SearchSettings(precision=0.05))


class FakeTrials:
    """Policies with a capacity each: above it every request is late. Seed 11 is a noisy
    run that loses 5% of its requests at any rate."""

    venue = "the fake"
    goodput_label = "fake goodput"
    capacity: ClassVar[dict[str, float]] = {"good": 20.0, "poor": 5.0}

    def __init__(self, settings: LiveSettings) -> None:
        self.settings = settings
        self.events: list[tuple[object, ...]] = []
        self.serving_now: str | None = None

    def check(self, policy: str) -> None:
        if policy not in self.capacity:
            raise ValueError(f"unknown policy {policy!r}")
        self.events.append(("check", policy))

    @contextlib.contextmanager
    def serving(self, policy: str) -> Iterator[None]:
        self.events.append(("start", policy))
        self.serving_now = policy
        yield
        self.serving_now = None
        self.events.append(("stop", policy))

    def probe(self, workload: WorkloadConfig, rate: float, seed: int) -> RunMetrics:
        self.events.append(("probe", self.serving_now, workload, rate, seed))
        return metrics(0.0)  # TPOT 10 ms: the strict preset's 50 ms TBT at 3 × 10 ms

    def run(self, policy: str, rate: float, seed: int, scale: float) -> RunMetrics:
        assert self.serving_now == policy
        self.events.append(("run", policy, rate, seed, scale))
        noise = 0.05 if seed == 11 else 0.0
        return metrics(1.0 if rate > self.capacity[policy] else noise, goodput=rate)


def run(
    policies: list[str], rates: list[float], search: bool = False, **changes: Any
) -> tuple[FakeTrials, list[str], LiveComparison]:
    made: list[FakeTrials] = []
    said: list[str] = []

    def trials(settings: LiveSettings) -> FakeTrials:
        made.append(FakeTrials(settings))
        return made[0]

    settings = dataclasses.replace(SETTINGS, **changes)
    result = compare(settings, policies, rates, search, said.append, trials)
    return made[0], said, result


def test_the_scale_is_calibrated_once_in_the_first_server_and_every_rate_repeated() -> None:
    fake, said, result = run(["good", "poor"], [4.0, 8.0])
    runs = [event for event in fake.events if event[0] == "run"]
    light = WorkloadConfig("sharegpt", 12, slo_scale=100.0)  # SLOs nobody misses
    assert fake.events[:4] == [("check", "good"), ("check", "poor"), ("start", "good"),
                               ("probe", "good", light, 0.5, 10)]  # fmt: skip
    assert [event[0] for event in fake.events].count("probe") == 1
    assert [event[3] for event in runs] == [10, 11, 12] * 4  # seeds seed, seed + 1, ...
    # The strict preset's 50 ms TBT becomes 3 × the light run's 10 ms TPOT: scale 0.6.
    assert result.slo_scale == pytest.approx(0.6)
    assert {event[4] for event in runs} == {result.slo_scale}
    assert fake.events[-1] == ("stop", "poor")
    assert said == ["SLO scale for the fake: 0.600"]


def test_rows_are_the_median_runs() -> None:
    _, _, result = run(["good", "poor"], [4.0, 8.0])
    rows = {(row.policy, row.rate): row for row in result.rows}
    assert rows["good", 4.0].violation_rate == 0.0  # the noisy seed is not the median
    assert rows["good", 4.0].violation_runs == (0.0, 0.0, 0.05)
    assert rows["poor", 8.0].violation_rate == 1.0
    assert rows["poor", 8.0].per_gap_violation_rate == 1.0
    assert rows["good", 8.0].itl_p99_ms == pytest.approx(30.0)
    assert rows["good", 8.0].goodput == 8.0


def test_a_given_scale_is_used_without_calibration() -> None:
    fake, said, result = run(["poor"], [1.0], slo_scale=0.5)
    assert "probe" not in [event[0] for event in fake.events] and said == []
    assert {event[4] for event in fake.events if event[0] == "run"} == {0.5}
    assert result.slo_scale == 0.5


def test_the_search_finds_each_capacity_by_the_median_of_the_repeats() -> None:
    _, said, result = run(["good", "poor"], [2.0], search=True)
    goodput = result.goodput
    assert goodput["good"].goodput == pytest.approx(20.0, rel=0.06)
    assert goodput["poor"].goodput == pytest.approx(5.0, rel=0.06)
    assert goodput["good"].goodput <= 20.0 and goodput["poor"].goodput <= 5.0
    assert said[1:] == [f"good: fake goodput {goodput['good'].goodput:.2f} req/s",
                        f"poor: fake goodput {goodput['poor'].goodput:.2f} req/s"]  # fmt: skip


def test_a_bad_policy_fails_before_any_server_starts() -> None:
    made: list[FakeTrials] = []

    def trials(settings: LiveSettings) -> FakeTrials:
        made.append(FakeTrials(settings))
        return made[0]

    with pytest.raises(ValueError, match="unknown policy 'fifo'"):
        compare(SETTINGS, ["good", "fifo"], [1.0], trials=trials)
    assert made[0].events == [("check", "good")]
    with pytest.raises(ValueError, match="no policy to compare"):
        compare(SETTINGS, [], [1.0], trials=trials)


def test_every_live_run_salts_the_prefix_cache_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trials re-send the same seeds' prompts at every rate; without a salt of its own a
    run would start from the cache the run before it left."""
    import slidingserve.live.compare as live_compare

    sent: list[BenchConfig] = []

    class Ran:
        class summary:  # noqa: N801 - the shape run_bench returns
            metrics = metrics(0.0)

    def fake_bench(config: BenchConfig) -> Ran:
        sent.append(config)
        return Ran()

    monkeypatch.setattr(live_compare, "run_bench", fake_bench)
    trials = live_compare.LiveTrials(SETTINGS)
    trials.check("slidingserve")
    trials.urls["slidingserve"] = "http://127.0.0.1:1"
    workload = SETTINGS.workload_config(1.0)
    trials.probe(workload, 1.0, 0)
    trials.run("slidingserve", 1.0, 0, 1.0)
    trials.run("slidingserve", 2.0, 0, 1.0)
    salts = [config.cache_salt for config in sent]
    assert len(set(salts)) == 3 and all(salts)


def test_live_trials_send_each_policy_s_runs_to_its_own_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Servers of several policies may be up at once (`validate` interleaves them): a trial
    goes to its policy's, a probe (a warm-up) to the one started last."""
    import slidingserve.live.compare as live_compare

    sent: list[str] = []

    class Ran:
        class summary:  # noqa: N801 - the shape run_bench returns
            metrics = metrics(0.0)

    def fake_bench(config: BenchConfig) -> Ran:
        sent.append(config.url)
        return Ran()

    monkeypatch.setattr(live_compare, "run_bench", fake_bench)
    trials = live_compare.LiveTrials(SETTINGS)
    for policy in ("slidingserve", "vllm:fcfs", "qoserve"):
        trials.check(policy)
    trials.urls |= {"vllm:fcfs": "http://fcfs", "slidingserve": "http://ours"}
    trials.run("slidingserve", 1.0, 0, 1.0)
    trials.run("vllm:fcfs", 1.0, 0, 1.0)
    trials.probe(SETTINGS.workload_config(1.0), 1.0, 0)
    assert sent == ["http://ours", "http://fcfs", "http://ours"]
    with pytest.raises(RuntimeError, match="qoserve's trials run inside its `serving`"):
        trials.run("qoserve", 1.0, 0, 1.0)
    trials.urls.clear()
    with pytest.raises(RuntimeError, match="probes run inside `serving`"):
        trials.probe(SETTINGS.workload_config(1.0), 1.0, 0)


def test_a_policy_served_again_writes_a_log_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A validation serves vLLM's `fcfs` again at the end: the first server's log (its
    capacity, calibration and trials) must survive the second."""
    import slidingserve.live.compare as live_compare

    logs: list[str] = []

    @contextlib.contextmanager
    def fake_server(spec: object, log: Any) -> Iterator[str]:
        logs.append(log.name)
        yield "http://127.0.0.1:1"

    monkeypatch.setattr(live_compare, "running_server", fake_server)
    trials = live_compare.LiveTrials(SETTINGS)
    for policy in ("vllm:fcfs", "slidingserve", "vllm:fcfs", "vllm:fcfs"):
        trials.check(policy)
        with trials.serving(policy):
            pass
    assert logs == [
        "server-vllm-fcfs.log",
        "server-slidingserve.log",
        "server-vllm-fcfs-2.log",
        "server-vllm-fcfs-3.log",
    ]
