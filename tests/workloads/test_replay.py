"""Replayed traces: a window of a trace with its own arrival times, rescaled to a rate."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from slidingserve.core.request import Request
from slidingserve.eval.experiment import GoodputExperiment, run_experiment
from slidingserve.eval.goodput import SearchSettings
from slidingserve.workloads import (
    TRACE_WORKLOAD,
    ArrivalConfig,
    TraceSource,
    WorkloadConfig,
    generate_requests,
    recorded_rate,
    sample_workload,
)
from slidingserve.workloads.replay import spread_ties
from slidingserve.workloads.slo import CONVERSATIONAL, SUMMARIZATION

# Arrivals 0, 1, 1, 3, 6, 10 s: rows 1–4 span 5 s, 3 gaps: recorded 0.6 req/s.
TRACE = (
    "arrived_at,num_prefill_tokens,num_decode_tokens\n"
    "100,10,1\n101,20,2\n101,30,3\n103,40,4\n106,50,5\n110,9000,6\n"
)
REPLAY = ArrivalConfig("trace")


@pytest.fixture
def trace(tmp_path: Path) -> str:
    path = tmp_path / "hand.csv"
    path.write_text(TRACE, encoding="utf-8")
    return str(path)


def replayed(path: str, requests: int, start: int = 0) -> WorkloadConfig:
    return WorkloadConfig(
        TRACE_WORKLOAD, requests, REPLAY, traces=(TraceSource(path),), trace_start=start
    )


def test_recorded_arrivals_and_lengths(trace: str) -> None:
    config = replayed(trace, 4, start=1)
    assert recorded_rate(config) == pytest.approx(3 / 5)
    sample = sample_workload(config, recorded_rate(config), 0, 8192)
    assert sample.arrivals.tolist() == pytest.approx([0.0, 0.0, 2.0, 5.0])
    assert sample.prompt_lens.tolist() == [20, 30, 40, 50]
    assert sample.output_lens.tolist() == [2, 3, 4, 5]
    assert sample.trimmed == 0


def test_rate_rescales_time_exactly(trace: str) -> None:
    config = replayed(trace, 4, start=1)
    # Twice the recorded rate: every gap halves; 3 gaps over 2.5 s is 1.2 req/s.
    sample = sample_workload(config, 1.2, 0, 8192)
    assert sample.arrivals.tolist() == pytest.approx([0.0, 0.0, 1.0, 2.5])
    slow = sample_workload(config, 0.3, 0, 8192)
    assert slow.arrivals.tolist() == pytest.approx([0.0, 0.0, 4.0, 10.0])


def test_seeds_are_consecutive_windows(trace: str) -> None:
    config = replayed(trace, 2)
    assert sample_workload(config, 1.0, 0, 8192).prompt_lens.tolist() == [10, 20]
    assert sample_workload(config, 1.0, 1, 8192).prompt_lens.tolist() == [30, 40]
    assert sample_workload(config, 1.0, 2, 8192).prompt_lens.tolist() == [50, 8191]
    with pytest.raises(ValueError, match="2 requests from row 6 need 8 rows; the trace has 6"):
        sample_workload(config, 1.0, 3, 8192)


def test_long_prompts_are_trimmed_and_counted(trace: str) -> None:
    sample = sample_workload(replayed(trace, 2, start=4), 1.0, 0, 4096)
    assert sample.prompt_lens.tolist() == [50, 4095]
    assert sample.output_lens.tolist() == [5, 1]
    assert sample.trimmed == 1


def test_requests_carry_their_file_class(tmp_path: Path, trace: str) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text(
        '{"timestamp": 500, "input_length": 7, "output_length": 70}\n'
        '{"timestamp": 2500, "input_length": 8, "output_length": 80}\n',
        encoding="utf-8",
    )
    sources = (TraceSource(trace), TraceSource(str(other), SUMMARIZATION))
    config = WorkloadConfig(TRACE_WORKLOAD, 4, REPLAY, traces=sources)
    sample = sample_workload(config, 1.0, 0, 8192)
    # Merged by time (each file from its own first row): 0 (csv), 0 (json), 1, 1 (csv);
    # a tie keeps file order.
    assert sample.prompt_lens.tolist() == [10, 7, 20, 30]
    assert sample.source_index.tolist() == [0, 1, 0, 0]
    requests = generate_requests(config, 1.0, 0, 8192)
    assert requests[1].slo.ttft > requests[0].slo.ttft  # summarization's TTFT is longer


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"traces": ()}, "--arrival trace replays the arrival times of --trace files"),
        ({"name": "sharegpt"}, "made of --trace files"),
    ],
)
def test_replay_needs_trace_files(trace: str, kwargs: dict[str, object], message: str) -> None:
    settings: dict[str, object] = {
        "name": TRACE_WORKLOAD,
        "num_requests": 2,
        "arrival": REPLAY,
        "traces": (TraceSource(trace),),
    }
    settings.update(kwargs)
    if "traces" in kwargs and kwargs["traces"] == ():
        settings["name"] = "sharegpt"
    with pytest.raises(ValueError, match=message):
        WorkloadConfig(**settings)  # type: ignore[arg-type]


def test_weights_and_missing_times_are_refused(tmp_path: Path, trace: str) -> None:
    with pytest.raises(ValueError, match="weights apply to resampled traces"):
        WorkloadConfig(TRACE_WORKLOAD, 2, REPLAY, traces=(TraceSource(trace, CONVERSATIONAL, 3.0),))
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("num_prefill_tokens,num_decode_tokens\n1,1\n2,2\n", encoding="utf-8")
    config = WorkloadConfig(TRACE_WORKLOAD, 2, REPLAY, traces=(TraceSource(str(lengths)),))
    with pytest.raises(ValueError, match="no arrival times"):
        sample_workload(config, 1.0, 0, 8192)


def test_resampled_traces_keep_their_weights(tmp_path: Path, trace: str) -> None:
    config = WorkloadConfig(TRACE_WORKLOAD, 200, traces=(TraceSource(trace),))
    sample = sample_workload(config, 2.0, 0, 8192)
    assert set(sample.prompt_lens.tolist()) <= {10, 20, 30, 40, 50, 8191}
    assert sample.arrivals[0] == 0.0 and np.all(np.diff(sample.arrivals) >= 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a.csv", ("a.csv", CONVERSATIONAL, 1.0)),
        ("a.csv:summarization", ("a.csv", SUMMARIZATION, 1.0)),
        ("dir/a.csv:conversational:3", ("dir/a.csv", CONVERSATIONAL, 3.0)),
        ("c:/x.csv", ("c:/x.csv", CONVERSATIONAL, 1.0)),
    ],
)
def test_trace_flag(text: str, expected: tuple[str, str, float]) -> None:
    source = TraceSource.parse(text)
    assert (source.path, source.workload_class, source.weight) == expected


def test_trace_flag_errors() -> None:
    with pytest.raises(ValueError, match="weight 'x' is not a number"):
        TraceSource.parse("a.csv:summarization:x")
    with pytest.raises(ValueError, match="unknown class"):
        TraceSource("a.csv", "chat")


def test_goodput_sees_the_same_requests_at_every_rate(
    trace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A goodput search over a replayed trace probes many rates; at each, the requests are
    the same window with the same lengths, and arrival × rate is the same."""
    from slidingserve.sim import runner

    seen: dict[tuple[float, int], list[Request]] = {}
    original = generate_requests

    def recording(config: WorkloadConfig, rate: float, seed: int, length: int) -> list[Request]:
        requests = original(config, rate, seed, length)
        seen[rate, seed] = requests
        return requests

    monkeypatch.setattr(runner, "generate_requests", recording)
    experiment = GoodputExperiment(
        policies=("sarathi",),
        workloads=(TRACE_WORKLOAD,),
        seeds=(0, 1),
        num_requests=3,
        arrival=REPLAY,
        traces=(TraceSource(trace),),
        search=SearchSettings(precision=0.2),
        curve_points=0,
        jobs=1,
    )
    run_experiment(experiment)
    for seed in (0, 1):
        runs = {rate: requests for (rate, s), requests in seen.items() if s == seed}
        assert len(runs) >= 3  # the search probed several rates
        shapes = {tuple((r.prompt_len, r.output_len) for r in reqs) for reqs in runs.values()}
        assert len(shapes) == 1
        scaled = [np.array([r.arrival for r in reqs]) * rate for rate, reqs in runs.items()]
        for other in scaled[1:]:
            assert other == pytest.approx(scaled[0])
    first = {seed: next(r for (rt, s), r in seen.items() if s == seed) for seed in (0, 1)}
    assert [r.prompt_len for r in first[0]] == [10, 20, 30]
    assert [r.prompt_len for r in first[1]] == [40, 50, 8191]


def test_spread_ties_spaces_each_group_up_to_the_next_time() -> None:
    times = np.array([0.0, 0.0, 0.0, 3.0, 3.0, 6.0, 9.0, 9.0])
    spread = spread_ties(times)
    # Three at 0 over [0, 3), two at 3 over [3, 6), one at 6, two at 9 over the median gap 3.
    assert spread.tolist() == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.5, 6.0, 9.0, 10.5])
    distinct = np.array([0.0, 1.0, 5.0])
    assert spread_ties(distinct) is distinct


def test_spread_replay_keeps_the_count_and_the_mean_rate(tmp_path: Path) -> None:
    path = tmp_path / "ticks.jsonl"
    rows = [(0, 1), (0, 2), (3000, 3), (3000, 4), (6000, 5)]
    path.write_text(
        "".join(
            f'{{"timestamp": {t}, "input_length": {p}, "output_length": 1}}\n' for t, p in rows
        ),
        encoding="utf-8",
    )
    config = WorkloadConfig(
        TRACE_WORKLOAD, 5, REPLAY, traces=(TraceSource(str(path)),), trace_spread=True
    )
    sample = sample_workload(config, recorded_rate(config), 0, 8192)
    assert sample.arrivals.tolist() == pytest.approx([0.0, 1.5, 3.0, 4.5, 6.0])
    assert recorded_rate(config) == pytest.approx(4 / 6)
    plain = dataclasses.replace(config, trace_spread=False)
    assert sample_workload(plain, recorded_rate(plain), 0, 8192).arrivals.tolist() == (
        pytest.approx([0.0, 0.0, 3.0, 3.0, 6.0])
    )
