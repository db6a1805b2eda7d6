"""Scheduler decision time per iteration, by component, against the number of requests.

    python benchmarks/sched_overhead.py [--sizes 16 64 256 1024] [--views 300]
                                        [--policies slidingserve sarathi]
                                        [--features rich|paper]
                                        [--set LABEL.OPTION=VALUE ...]
                                        [--prefix-cache]

For each size N it builds `--views` random engine states with N active requests: half
decoding (ShareGPT-like contexts, 50 ms TBT, next-token slack 50 ms + Exp(200 ms)), half
waiting or partly prefilled (realistic prompt lengths, TTFT slacks from −0.2 s to 2 s, so
some are lost, some at risk and most calm). Every policy schedules the same states in the
same run. Prints median and p99 wall time per `schedule` call of each policy as a server
and a simulation run it (no decision records, `policies.unrecorded`), and for SlidingServe
the median time per component, from a second pass over the same states with its records
kept, as timing them costs time of its own (ordering and triage of the queue, predictor
calls through the model, chunker incl. candidate batch, BatchConstructor; the predictions
made inline along the queue, `predictor.queue_time_function`, are in the chunker's and the
constructor's time and not counted as calls) with the share of iterations that took the
constructor path, and the median predicted iteration time for scale (the paper's budget:
scheduling < 5% of it).
`--features` picks the predictor the policies plan with (the calibration's, rich by default);
`--set` gives a policy or a label its options (`--policies slidingserve slidingserve#nocap
--set slidingserve#nocap.iteration_cap=0`: what one switch costs, measured in one run).
`--prefix-cache` builds the states on a prefix cache (`core/prefix_cache.py`): 80% of the
requests start with one 512-token system prompt, the running ones hold their blocks and
each waiting one sees its hit as computed, as the simulator shows them.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from slidingserve.cli.settings import with_assignments
from slidingserve.core import SLO, EngineLimits, KVBlockManager, Phase, Request, SchedulerView
from slidingserve.core.prefix_cache import PrefixCachingKV
from slidingserve.policies import PolicyContext, get_policy_class, make_policy, unrecorded
from slidingserve.policies.slidingserve import SlidingServePolicy
from slidingserve.predictor import DEFAULT_FEATURES, FEATURE_SETS
from slidingserve.sim.calibration import calibrate
from slidingserve.sim.hardware import HardwareConfig
from slidingserve.workloads import WorkloadConfig, sample_workload
from slidingserve.workloads.prefixes import SystemPrompt

SYSTEM_PROMPT = SystemPrompt(512, 0.8)  # what `--prefix-cache` states share


def random_view(
    size: int, limits: EngineLimits, rng: np.random.Generator, prefix_cache: bool = False
) -> SchedulerView:
    now = 100.0
    workload = WorkloadConfig(
        "sharegpt", size, system_prompt=SYSTEM_PROMPT if prefix_cache else None
    )
    sample = sample_workload(workload, 1.0, int(rng.integers(1 << 30)), 8192)
    kv = (
        PrefixCachingKV(10_000_000, limits.block_size)
        if prefix_cache
        else KVBlockManager(10_000_000, limits.block_size)
    )
    waiting: list[Request] = []
    running: list[Request] = []
    for i in range(size):
        prompt, output = int(sample.prompt_lens[i]), max(2, int(sample.output_lens[i]))
        if i % 2 == 0:
            generated = int(rng.integers(1, output))
            slack = 0.05 + float(rng.exponential(0.2))  # ≥ one TBT, as after an on-time step
            arrival = now - 1.0 - generated * 0.05
            ttft = now + slack - arrival - generated * 0.05
            request = _request(i, arrival, prompt, output, max(ttft, 0.01))
            request.phase, request.num_generated = Phase.DECODING, generated
            request.num_computed = prompt + generated - 1
        else:
            arrival = now - float(rng.uniform(0.0, 1.0))
            ttft = now + float(rng.uniform(-0.2, 2.0)) - arrival
            request = _request(i, arrival, prompt, output, max(ttft, 0.01))
            if rng.random() < 0.3:
                request.phase = Phase.PREFILLING
                request.num_computed = int(rng.integers(1, prompt)) if prompt > 1 else 0
        if sample.content is not None:
            request.content = sample.content[i]
        if request.phase is not Phase.WAITING:
            _allocate(kv, request)
        (running if request.phase is not Phase.WAITING else waiting).append(request)
    if isinstance(kv, PrefixCachingKV):
        for request in waiting:
            request.num_computed = kv.lookup(request)
    return SchedulerView.from_queues(now, waiting, running, limits, kv)


def _request(i: int, arrival: float, prompt: int, output: int, ttft: float) -> Request:
    return Request(f"r{i}", arrival, prompt, output, SLO(ttft, 0.05))


def _allocate(kv: KVBlockManager, request: Request) -> None:
    computed, request.num_computed = request.num_computed, 0
    if isinstance(kv, PrefixCachingKV):
        request.num_computed = min(kv.lookup(request), computed)  # a hit it started from
        request.num_computed -= request.num_computed % kv.block_size
    kv.grow(request, computed - request.num_computed)
    request.num_computed = computed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--views", type=int, default=300)
    parser.add_argument("--policies", nargs="+", default=["slidingserve", "sarathi"])
    parser.add_argument("--features", choices=list(FEATURE_SETS), default=DEFAULT_FEATURES)
    parser.add_argument(
        "--set", action="append", metavar="LABEL.OPTION=VALUE", help="a policy's option"
    )
    parser.add_argument(
        "--prefix-cache", action="store_true", help="states on a prefix cache, prompts shared"
    )
    args = parser.parse_args()
    options = with_assignments({"policies": {}}, args.set)["policies"]
    calibration = calibrate(HardwareConfig(), EngineLimits())
    predictor = calibration.predictor_for(args.features)
    rng = np.random.default_rng(0)
    print(f"{'requests':>8}  {'policy':<22} {'median ms':>9} {'p99 ms':>8}  components (median ms)")
    for size in args.sizes:
        limits = EngineLimits(max_num_batched_tokens=2048, max_num_seqs=max(256, size))
        views = [random_view(size, limits, rng, args.prefix_cache) for _ in range(args.views)]
        for name in args.policies:
            context = PolicyContext(limits, predictor, calibration.batches)
            chosen = options.get(name, {})
            served = make_policy(name, context, unrecorded(get_policy_class(name), chosen))
            wall = []
            for view in views:
                started = time.perf_counter()
                served.schedule(view)
                wall.append(time.perf_counter() - started)
            median, p99 = _ms(float(np.median(wall))), _ms(float(np.percentile(wall, 99)))
            recorded = make_policy(name, context, chosen)  # its components, timed apart
            for view in views:
                recorded.schedule(view)
            print(f"{size:>8}  {name:<22} {median:>9} {p99:>8}  {_components(recorded)}")


def _components(policy: object) -> str:
    if not isinstance(policy, SlidingServePolicy) or not policy.decisions:
        return ""
    records = policy.decisions
    parts = {
        "order": [r.order_s for r in records],
        "predictor": [r.predictor_s for r in records],
        "chunker": [r.chunker_s for r in records],
        "constructor": [r.constructor_s for r in records],
    }
    text = " ".join(f"{name} {_ms(statistics.median(v))}" for name, v in parts.items())
    constructed = sum(r.path == "constructor" for r in records) / len(records)
    calls = statistics.median(r.predictor_calls for r in records)
    predicted = statistics.median(r.predicted_time or 0.0 for r in records)
    return (
        f"{text} | predictor calls {calls:.0f}, constructor path {constructed:.0%}, "
        f"predicted iteration {predicted * 1000:.0f} ms"
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


if __name__ == "__main__":
    main()
