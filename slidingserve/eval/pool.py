"""Where an experiment's simulations run: in this process, in local worker processes, or
as tasks on a Ray cluster (docs/cluster.md §5). Every simulation is a pure function of its
spec, rate and seed, so the results are the same wherever it runs."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

import slidingserve

T = TypeVar("T")
R = TypeVar("R")

Progress = Callable[[int], None]  # called with the number of tasks just finished

LOCAL_RAY = "local"
"""`--ray local`: start a private Ray instance on this machine for the run (the test's way,
and a way to try Ray without a cluster)."""

RAY_MISSING = (
    "--ray needs Ray: pip install 'slidingserve[cluster]' (bash scripts/setup.sh --cluster)"
)


def task_pool(workers: int, ray_address: str | None = None) -> Executor:
    """Tasks on the Ray cluster at `ray_address` (`auto`, `HOST:PORT`, `ray://HOST:PORT`, or
    `local`) when given; else `workers` local processes, or this process for one worker."""
    if ray_address is not None:
        return RayExecutor(ray_address)
    return ProcessPoolExecutor(max_workers=workers) if workers > 1 else InlineExecutor()


def map_tasks(
    pool: Executor, function: Callable[[T], R], items: Iterable[T], progress: Progress | None
) -> list[R]:
    """`function` over `items` in the pool, results in input order, progress as they finish."""
    futures = {pool.submit(function, item): index for index, item in enumerate(items)}
    results: dict[int, R] = {}
    try:
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if progress is not None:
                progress(1)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # don't run the rest for nothing
        raise
    return [results[index] for index in range(len(futures))]


class InlineExecutor(Executor):
    """Runs tasks in this process (one worker): simpler to debug and profile."""

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Any:
        future: Future[R] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # the caller sees it from future.result()
            future.set_exception(error)
        return future


class RayExecutor(Executor):
    """Each task a Ray task on the cluster at `address` (one CPU each). It connects when
    built, ships this package to the workers (so a node needs only the dependencies:
    `pip install 'slidingserve[cluster]'`), and disconnects at shutdown if it connected.
    Ray schedules the tasks over every node's CPUs. When this process is connected to Ray
    already (the caller ran `ray.init`), that connection is used as it is and `address`
    is not read."""

    def __init__(self, address: str) -> None:
        self._ray = _import_ray()
        self._connected = False
        if not self._ray.is_initialized():
            self._connect(address)
            self._connected = True
        self._remote: dict[Callable[..., Any], Any] = {}
        self._refs: list[Any] = []

    def _connect(self, address: str) -> None:
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address == LOCAL_RAY:
            self._ray.init(address="local", **options)  # never a cluster already running
            return
        modules = {"py_modules": [slidingserve]}
        try:
            self._ray.init(address=address, runtime_env=modules, **options)
        except ConnectionError as error:
            raise ValueError(
                f"--ray {address}: no Ray cluster answers there ({error}); start one with "
                "`ray start --head`, or give --ray local"
            ) from None

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        remote = self._remote.get(fn)
        if remote is None:
            remote = self._ray.remote(num_cpus=1, max_retries=0)(fn)
            self._remote[fn] = remote
        ref = remote.remote(*args, **kwargs)
        self._refs.append(ref)
        future: Future[R] = ref.future()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            for ref in self._refs:
                self._ray.cancel(ref)
        self._refs = []
        if self._connected:
            self._ray.shutdown()
            self._connected = False


def _import_ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ValueError(RAY_MISSING) from None
