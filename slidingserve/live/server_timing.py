"""Time a live server's steps (`slidingserve profile --live`): the step periods a simulation
of it charges per iteration.

Two servers are timed, the adapter recording each busy step's whole period
(`engines/vllm/periods.py`), each writing its periods when it stops:

- **at rates from light load to overload**, scheduled by `random-chunk` (a random token
  budget per step, so batches of every shape);
- **saturated**: a burst of the same number of requests, all arriving at once, scheduled by
  the plug-in with vLLM's own order (`vllm`: full chunks, as vLLM runs a saturated engine),
  on requests of their own (`BURST_SEED_OFFSET`), which no trial or capacity run sends.
  Random budgets seldom fill a step, and the rated traffic seldom fills the seats, so
  without it the profile holds few of the large batches a saturated engine runs, and the
  fit reaches them by extrapolation: the twin of a `random-chunk` profile alone put this
  machine's capacity 7.5% below the live one, with the burst 1.6% (docs/results.md §9).

The periods of both are one steps file, which `compare --simulate` and `validate` run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from slidingserve.bench.runner import BenchConfig, run_bench
from slidingserve.live.compare import UNMISSABLE_SLO_SCALE, LiveSettings
from slidingserve.live.servers import ServerSpec, running_server
from slidingserve.live.validation_plan import BURST_RATE
from slidingserve.predictor.steps import EngineSteps, load_engine_steps, save_engine_steps

RATED_POLICY = "random-chunk"  # schedules the rated traffic: batches of every shape
SATURATED_POLICY = "vllm"  # schedules the burst: vLLM's order through the plug-in
BURST_SEED_OFFSET = 20_000  # the burst's requests: seed + this, apart from every trial's


def time_server(
    settings: LiveSettings,
    steps_out: Path,
    rates: Sequence[float],
    say: Callable[[str], None] = print,
) -> EngineSteps:
    """Serve `settings.requests` requests at each of `rates` (req/s), then as many all at
    once on a second server (module docstring); the periods land in `steps_out`."""
    if not rates or any(not rate > 0 for rate in rates):
        raise ValueError(f"profiling needs positive rates, got {list(rates)}")
    steps_out = steps_out.resolve()
    steps_out.unlink(missing_ok=True)  # what is read back must be this run's
    rated = _timed(settings, RATED_POLICY, steps_out, rates, settings.seed, say)
    burst_out = steps_out.with_name(f"{steps_out.stem}-burst{steps_out.suffix}")
    burst_out.unlink(missing_ok=True)
    seed = settings.seed + BURST_SEED_OFFSET
    saturated = _timed(settings, SATURATED_POLICY, burst_out, [BURST_RATE], seed, say)
    merged = dataclasses.replace(rated, batches=rated.batches + saturated.batches)
    save_engine_steps(steps_out, merged)
    burst_out.unlink()
    return merged


def _timed(
    settings: LiveSettings,
    policy: str,
    steps_out: Path,
    rates: Sequence[float],
    seed: int,
    say: Callable[[str], None],
) -> EngineSteps:
    """One server scheduled by `policy`, serving `settings.requests` requests of `seed` at
    each of `rates`; its periods, as written to `steps_out`."""
    spec = ServerSpec(
        settings.model,
        policy,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs,
        steps_out=steps_out,
    )
    with running_server(spec, settings.out_dir / f"server-profile-{policy}.log") as url:
        for rate in rates:
            config = BenchConfig(
                url,
                settings.workload_config(UNMISSABLE_SLO_SCALE),
                rate=rate,
                seed=seed,
                progress=False,
            )
            completed = run_bench(config).summary.metrics.completed
            label = "all at once" if rate == BURST_RATE else f"at {rate:g} req/s"
            say(f"profiled {label} ({policy}): {completed} requests completed")
    if not steps_out.is_file():
        raise RuntimeError(f"the server wrote no step periods to {steps_out}; see its log")
    return load_engine_steps(steps_out)
