"""Forecast admission (`kv_forecast.py`): the forecast peak against a step-by-step count,
which waiting requests may start, the option's checks, and that it spares preemptions
where the cache binds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from factories import make_decoding, make_request, make_slidingserve, make_view
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.core import EngineLimits, Request
from slidingserve.policies.output_lengths import OutputLengths
from slidingserve.policies.slidingserve.kv_forecast import (
    ROUNDING,
    Forecast,
    first_over,
    forecast_startable,
)
from slidingserve.sim.hardware import HardwareConfig
from slidingserve.sim.runner import SimulationSpec, simulate
from slidingserve.workloads import WorkloadConfig

BLOCK = 16  # EngineLimits' block size

jobs = st.lists(st.tuples(st.integers(1, 5_000), st.integers(1, 300)), min_size=0, max_size=12)


def _counted_peak(requests: list[tuple[int, int]], block_size: int) -> float:
    """The module docstring's forecast counted step by step: a request of context c and R
    steps holds (c + t)/s + ½ blocks at each step t < R."""
    last = max((steps for _, steps in requests), default=1)
    return max(
        sum((c + t) / block_size + ROUNDING for c, steps in requests if t < steps)
        for t in range(last)
    )


def _sequential_first_over(
    running: list[tuple[int, int]],
    candidates: list[tuple[int, int]],
    limit: float,
    first_free: bool,
) -> int | None:
    """The rule walked one candidate at a time, each peak counted step by step."""
    started = list(running)
    for index, candidate in enumerate(candidates):
        over = _counted_peak([*started, candidate], BLOCK) > limit
        if over and not (first_free and index == 0):
            return index
        started.append(candidate)
    return None


def _forecast(requests: list[tuple[int, int]]) -> Forecast:
    return Forecast(
        np.array([float(c) for c, _ in requests]), np.array([float(r) for _, r in requests]), BLOCK
    )


@settings(max_examples=300, deadline=None)
@given(
    running=jobs,
    candidates=jobs.filter(bool),
    limit=st.floats(0.0, 3_000.0),
    first_free=st.booleans(),
)
def test_the_first_refused_is_the_one_a_step_by_step_walk_finds(
    running: list[tuple[int, int]],
    candidates: list[tuple[int, int]],
    limit: float,
    first_free: bool,
) -> None:
    found = first_over(
        _forecast(running),
        np.array([float(c) for c, _ in candidates]),
        np.array([float(r) for _, r in candidates]),
        limit,
        first_free=first_free,
    )
    expected = _sequential_first_over(running, candidates, limit, first_free)
    if found != expected:  # only a peak within rounding of the limit may differ
        index = min(i for i in (found, expected) if i is not None)
        peak = _counted_peak([*running, *candidates[: index + 1]], BLOCK)
        assert math.isclose(peak, limit, rel_tol=1e-9)


def _ids(queue: list[Request]) -> list[str]:
    return [r.request_id for r in queue]


def _two_decodes() -> list[Request]:
    # 320 tokens cached each, 321 held after this step; with the prior below each runs 160
    # more steps and holds (321 + 159)/16 + ½ = 30.5 blocks at its last.
    return [make_decoding(f"d{i}", prompt=320, generated=1) for i in range(2)]


PRIOR = 160  # tokens every request is expected to emit while fewer than 20 have left


def test_a_request_that_fits_now_waits_when_the_forecast_outgrows_the_cache() -> None:
    waiting = make_request("w", prompt=10 * BLOCK)  # 10 blocks now, 20.4 at its last step
    view, kv = make_view(running=_two_decodes(), waiting=[waiting], kv_blocks=80)
    assert kv.num_free == 40  # its prompt fits today
    lengths = OutputLengths(PRIOR)
    # The peak: 2 × 30.5 + (160 + 159)/16 + ½ = 81.4 blocks.
    assert forecast_startable([waiting], view, lengths, 1.0) == []
    assert _ids(forecast_startable([waiting], view, lengths, 1.05)) == ["w"]


def test_the_first_miss_stops_the_starts_and_started_prefills_keep_their_places() -> None:
    started = make_request("started", prompt=4 * BLOCK, computed=2 * BLOCK)
    large = make_request("large", prompt=40 * BLOCK)
    small = make_request("small", prompt=BLOCK)
    running = [*_two_decodes(), started]
    view, _ = make_view(running=running, waiting=[large, small], kv_blocks=110)
    queue = [large, started, small]
    lengths = OutputLengths(PRIOR)
    assert _ids(forecast_startable(queue, view, lengths, 1.0)) == ["started"]
    assert _ids(forecast_startable([started, small, large], view, lengths, 1.0)) == [
        "started",
        "small",
    ]


def test_with_room_the_queue_is_returned_as_is() -> None:
    queue = [make_request(f"w{i}", prompt=1000) for i in range(5)]
    view, _ = make_view(running=_two_decodes(), waiting=queue, kv_blocks=100_000)
    assert forecast_startable(queue, view, OutputLengths(PRIOR), 1.0) is queue


def test_a_request_starts_whatever_the_forecast_when_nothing_else_runs() -> None:
    huge = make_request("huge", prompt=200 * BLOCK)
    view, _ = make_view(waiting=[huge], kv_blocks=50)
    assert _ids(forecast_startable([huge], view, OutputLengths(PRIOR), 1.0)) == ["huge"]


def test_requests_past_what_a_step_can_run_are_not_tested() -> None:
    limits = EngineLimits(max_num_batched_tokens=512)
    ahead = make_request("ahead", prompt=600)
    behind = make_request("behind", prompt=100 * BLOCK)  # would not fit
    queue = [ahead, behind]
    small_cache, _ = make_view(running=_two_decodes(), waiting=queue, limits=limits, kv_blocks=120)
    assert forecast_startable(queue, small_cache, OutputLengths(PRIOR), 1.0) is queue


def test_the_forecast_learns_the_output_lengths_of_the_requests_that_left() -> None:
    waiting = make_request("w", prompt=10 * BLOCK)
    view, _ = make_view(running=_two_decodes(), waiting=[waiting], kv_blocks=80)
    lengths = OutputLengths(PRIOR)
    short = [make_decoding(f"s{i}", generated=8) for i in range(30)]
    lengths.observe(short, [])
    lengths.observe([], [])  # all 30 left after 8 tokens: a decode has ~8 steps to run
    assert lengths.remaining(1) == 7
    assert _ids(forecast_startable([waiting], view, lengths, 1.0)) == ["w"]


@settings(max_examples=100, deadline=None)
@given(
    seen=st.lists(st.integers(1, 2_000), min_size=0, max_size=60),
    counts=st.lists(st.integers(0, 2_500), min_size=1, max_size=20),
)
def test_remaining_each_gives_the_figures_of_remaining(seen: list[int], counts: list[int]) -> None:
    lengths = OutputLengths(439)
    for index, length in enumerate(seen):
        request = make_decoding(f"r{index}", generated=length, output=length + 1)
        lengths.observe([request], [])
        lengths.observe([], [])
    assert list(lengths.remaining_each(counts)) == [lengths.remaining(c) for c in counts]
    assert all(lengths.remaining(c) <= lengths.most_remaining() for c in counts)


def test_the_policy_holds_back_what_the_forecast_refuses() -> None:
    waiting = make_request("w", prompt=10 * BLOCK, ttft=30.0)
    view, _ = make_view(running=_two_decodes(), waiting=[waiting], kv_blocks=80)
    # Before any request has left, each is expected to emit the policy's prior (439
    # tokens): the two decodes alone are forecast to outgrow the 80 blocks.
    plain = make_slidingserve(kv_forecast=0.0).schedule(view)
    forecast = make_slidingserve(kv_forecast=1.0).schedule(view)
    assert "w" in [c.request.request_id for c in plain.chunks]
    assert [c.request.request_id for c in forecast.chunks] == ["d0", "d1"]


def test_a_violated_decode_runs_when_the_forecast_lets_no_live_request_start() -> None:
    late = make_decoding("late", prompt=320, generated=1)  # first token due at 1 s
    waiting = make_request("w", arrival=3599.0, prompt=10 * BLOCK, ttft=30.0)
    policy = make_slidingserve(kv_forecast=1.0)
    # With room for the live request, the violated decode yields to it.
    roomy, _ = make_view(now=3600.0, running=[late], waiting=[waiting], kv_blocks=100_000)
    assert [c.request.request_id for c in policy.schedule(roomy).chunks] == ["w"]
    # Where the forecast holds the live request back, yielding would stall both: the
    # violated decode runs, and finishing it frees what the live request waits for.
    tight, _ = make_view(now=3600.0, running=[late], waiting=[waiting], kv_blocks=40)
    assert [c.request.request_id for c in policy.schedule(tight).chunks] == ["late"]


@pytest.mark.parametrize(("tbt", "late_runs"), [(0.005, False), (0.05, True)])
def test_a_violated_decode_runs_only_while_the_decodes_fit_the_tbt_of_those_on_time(
    tbt: float, late_runs: bool
) -> None:
    # The model predicts 10 ms for the three decodes. Of the two on time, "fine" has a TBT
    # of `tbt` and "loose" one of 50 ms: the tightest, 5 ms, is passed and the violated
    # decode stays out, so that finishing it makes no decode on time late; at 50 ms it runs.
    late = make_decoding("late", prompt=320, generated=1)  # first token due at 1 s
    fine = make_decoding("fine", prompt=16, arrival=3599.0, ttft=30.0, tbt=tbt)
    loose = make_decoding("loose", prompt=16, arrival=3599.0, ttft=30.0, tbt=0.05)
    waiting = make_request("w", arrival=3599.0, prompt=10 * BLOCK, ttft=30.0)
    view, _ = make_view(now=3600.0, running=[late, fine, loose], waiting=[waiting], kv_blocks=40)
    plan = make_slidingserve(kv_forecast=1.0).schedule(view)
    planned = {c.request.request_id for c in plan.chunks}
    assert planned == {"fine", "loose", *(["late"] if late_runs else [])}


def test_where_the_cache_binds_it_spares_preemptions() -> None:
    """The A100 with 40% of its memory, ShareGPT past its goodput: without the forecast the
    design preempts dozens of times; its 1.1× of the cache spares some, 1.0× most."""
    hardware = HardwareConfig(gpu="a100", model="llama-2-7b", gpu_memory_utilization=0.4)
    workload = WorkloadConfig("sharegpt", 300)
    runs = [
        simulate(SimulationSpec("slidingserve", workload, hardware, policy_options=o), 2.2, 0)
        for o in ({"kv_forecast": 1.0}, {}, {"kv_forecast": 0.0})
    ]
    strict, design, plain = runs
    assert all(run.metrics.completed == 300 for run in runs)
    assert plain.num_preemptions > 20
    assert strict.num_preemptions < plain.num_preemptions / 2
    assert design.num_preemptions < plain.num_preemptions


def test_the_option_is_a_share_of_the_cache() -> None:
    assert make_slidingserve().config.kv_forecast == 1.1  # the design's
    assert make_slidingserve(kv_forecast=1.0).config.kv_forecast == 1.0
    assert make_slidingserve(kv_forecast=0).config.kv_forecast == 0  # off
    for bad in (-0.5, "1.1", None, float("nan"), True):
        with pytest.raises(ValueError, match="kv_forecast"):
            make_slidingserve(kv_forecast=bad)
