"""Where simulations run: in this process, in local processes, or as Ray tasks on a local
Ray instance started here; the results are the same wherever they run."""

from __future__ import annotations

import dataclasses
import importlib
import json
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from slidingserve.eval import pool
from slidingserve.eval.experiment import (
    ExperimentResult,
    GoodputExperiment,
    run_experiment,
    run_searches,
)
from slidingserve.eval.goodput import SearchSettings

SMALL = GoodputExperiment(
    policies=("sarathi", "slidingserve"),
    workloads=("sharegpt",),
    seeds=(0, 1),
    num_requests=60,
    curve_points=2,
    search=SearchSettings(precision=0.2),
    jobs=1,
)


def square(value: int) -> int:
    return value * value


def fail_on_three(value: int) -> int:
    if value == 3:
        raise RuntimeError("three")
    return value


def figures(result: ExperimentResult) -> str:
    """Every row and curve point as JSON text (NaN fields compare equal as text)."""
    rows = [dataclasses.asdict(row) for row in result.rows]
    curve = [dataclasses.asdict(point) for point in result.curve]
    return json.dumps({"rows": rows, "curve": curve}, default=str)


def test_map_keeps_input_order_and_counts_progress() -> None:
    done: list[int] = []
    with pool.task_pool(1) as inline:
        assert pool.map_tasks(inline, square, [3, 1, 2], done.append) == [9, 1, 4]
    assert done == [1, 1, 1]


def test_a_failing_task_fails_the_map() -> None:
    with pool.task_pool(1) as inline, pytest.raises(RuntimeError, match="three"):
        pool.map_tasks(inline, fail_on_three, [1, 3, 2], None)


def test_more_than_one_worker_is_a_process_pool() -> None:
    executor = pool.task_pool(2)
    assert isinstance(executor, ProcessPoolExecutor)
    executor.shutdown()


def test_without_ray_the_flag_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def no_ray(name: str, *args: Any) -> Any:
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_ray)
    with pytest.raises(ValueError, match=r"slidingserve\[cluster\]"):
        pool.task_pool(1, "auto")


def test_auto_without_a_cluster_is_a_clear_error() -> None:
    pytest.importorskip("ray")
    with pytest.raises(ValueError, match=r"no Ray cluster answers there.*ray start --head"):
        pool.task_pool(1, "auto")


def test_ray_tasks_give_the_same_goodputs_and_curves_as_this_process() -> None:
    """One local Ray instance, started and stopped by the executor."""
    ray = pytest.importorskip("ray")
    here = run_experiment(SMALL)
    on_ray = run_experiment(SMALL, ray=pool.LOCAL_RAY)
    assert not ray.is_initialized()  # the executor that connected disconnected
    assert figures(on_ray) == figures(here)
    assert len(here.curve) == 2 * 2 * 2 and all(r.goodput_mean > 0 for r in here.rows)


def test_searches_of_several_experiments_share_one_ray_instance() -> None:
    ray = pytest.importorskip("ray")
    relaxed = dataclasses.replace(SMALL, slo_preset="relaxed", policies=("sarathi",))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = run_searches([SMALL, relaxed], workers=1, ray="auto")
        assert ray.is_initialized()  # an instance the caller started stays up
    finally:
        ray.shutdown()
    here = run_searches([SMALL, relaxed], workers=1)
    assert [figures(r) for r in on_ray] == [figures(r) for r in here]
