"""Time a live server's steps (`slidingserve profile --live`): the step periods a simulation
of it charges per iteration.

A server scheduled by `random-chunk` (a random token budget per step, so batches of every
shape) serves the comparison's workload at rates from light load to overload, with the
adapter recording each busy step's whole period (`engines/vllm/periods.py`); the server
writes them when it stops. `compare --simulate` then runs the comparison on that engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from slidingserve.bench.runner import BenchConfig, run_bench
from slidingserve.live.compare import UNMISSABLE_SLO_SCALE, LiveSettings
from slidingserve.live.servers import ServerSpec, running_server
from slidingserve.predictor.steps import EngineSteps, load_engine_steps


def time_server(
    settings: LiveSettings,
    steps_out: Path,
    rates: Sequence[float],
    say: Callable[[str], None] = print,
) -> EngineSteps:
    """Serve `settings.requests` requests at each of `rates` (req/s); the periods land in
    `steps_out`."""
    if not rates or any(not rate > 0 for rate in rates):
        raise ValueError(f"profiling needs positive rates, got {list(rates)}")
    steps_out = steps_out.resolve()
    steps_out.unlink(missing_ok=True)  # what is read back must be this run's
    spec = ServerSpec(
        settings.model,
        "random-chunk",
        max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs,
        steps_out=steps_out,
    )
    with running_server(spec, settings.out_dir / "server-profile.log") as url:
        for rate in rates:
            config = BenchConfig(
                url,
                settings.workload_config(UNMISSABLE_SLO_SCALE),
                rate=rate,
                seed=settings.seed,
                progress=False,
            )
            completed = run_bench(config).summary.metrics.completed
            say(f"profiled at {rate:g} req/s: {completed} requests completed")
    if not steps_out.is_file():
        raise RuntimeError(f"the server wrote no step periods to {steps_out}; see its log")
    return load_engine_steps(steps_out)
