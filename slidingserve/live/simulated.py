"""What the simulator predicts for a live comparison.

The same policies, workload, seeds, repeats, SLO rule and goodput search as `compare` (the
same `compare`), run on a simulated copy of the engine built from its profiled steps
(`ProfiledLatency`) by the simulator's own building blocks (`sim.runner`). The requests are
those a bench run sends (`scaled_requests`), and each run is measured as the bench measures
a live one (the same metrics, from the run's start), so both tables mean the same thing cell
by cell. vLLM's `fcfs` and `priority` are simulated by the `vllm` and `vllm-priority`
policies. Policies that need a predictor or a profile get them as the simulator's
`calibrate` gives them: random batches timed on the simulated engine, noise included
(`calibrate_profiled`), and the project's predictor fitted to those timings. Every such
policy gets the same batches, and none the simulated engine's own expected-time model, so
SlidingServe plans with an estimate just as QoServe does.

`noise_draw` runs every trial again with other noise on the engine's steps (the same
requests, the same fitted engine, the same calibration): the twin's figures from several
draws say how far noise alone moves them, which is how far a live run, one draw of the real
engine's noise, may stand from the twin without the twin being wrong (`validation.py`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Sequence
from functools import cached_property

from slidingserve.bench.requests import scaled_requests
from slidingserve.core.view import EngineLimits
from slidingserve.live.compare import LiveComparison, LiveSettings, compare
from slidingserve.metrics import RunMetrics, Timeline, measure, span
from slidingserve.policies import PolicyContext, get_policy_class, make_policy
from slidingserve.predictor.calibration import Calibration
from slidingserve.predictor.steps import EngineSteps
from slidingserve.sim.hardware.noise import noise_draw_seed
from slidingserve.sim.hardware.timed_engine import ProfiledLatency, calibrate_profiled
from slidingserve.sim.runner import context_for, run_policy
from slidingserve.workloads import WorkloadConfig

SIMULATED_BUILTINS = {"vllm:fcfs": "vllm", "vllm:priority": "vllm-priority"}
CALIBRATION_POLICY = "vllm:fcfs"  # schedules the simulated engine's calibration run


def simulated_policy(policy: str) -> str:
    """The simulator's policy for a `compare` policy name; ValueError if unknown."""
    name = SIMULATED_BUILTINS.get(policy, policy)
    get_policy_class(name)
    return name


class SimulatedTrials:
    """Trials on the profiled engine, simulated: `compare`'s `Trials`."""

    venue = "the simulated engine"
    goodput_label = "simulated goodput"

    def __init__(self, steps: EngineSteps, settings: LiveSettings, noise_draw: int = 0) -> None:
        """`noise_draw`: which noise each trial runs with (`noise_draw_seed`; 0: the trial's
        seed)."""
        self.steps = steps
        self.settings = settings
        self.limits = EngineLimits(
            settings.max_num_batched_tokens, settings.max_num_seqs, steps.block_size
        )
        noise_draw_seed(settings.seed, noise_draw)  # a bad draw fails here, not in a trial
        self.noise_draw = noise_draw
        self.latency = ProfiledLatency(steps)  # fitted once; each run reseeds its noise

    def with_noise_draw(self, draw: int) -> SimulatedTrials:
        """These trials with noise draw `draw`: the same fitted engine and, once made, the
        same calibration (its stream is apart from every draw's), neither made again."""
        noise_draw_seed(self.settings.seed, draw)
        other = copy.copy(self)
        other.noise_draw = draw
        return other

    @cached_property
    def calibration(self) -> Calibration:
        """What a profiler measures on this engine, once, for every policy to share: its
        stream is apart from every trial's (see `calibrate_profiled`)."""
        return calibrate_profiled(self.latency, self.limits, self.settings.seed)

    def policy_context(self, policy: str) -> PolicyContext:
        """What `policy` (a `compare` name) is built with: the calibration if it needs one."""
        return context_for(simulated_policy(policy), self.limits, lambda: self.calibration)

    def check(self, policy: str) -> None:
        simulated_policy(policy)

    def serving(self, policy: str) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def probe(self, workload: WorkloadConfig, rate: float, seed: int) -> RunMetrics:
        return self._trial(CALIBRATION_POLICY, rate, seed, workload)

    def run(self, policy: str, rate: float, seed: int, scale: float) -> RunMetrics:
        return self._trial(policy, rate, seed, self.settings.workload_config(scale))

    def _trial(self, policy: str, rate: float, seed: int, workload: WorkloadConfig) -> RunMetrics:
        """`workload` at `rate` with `seed`, measured from the run's start as bench does."""
        requests = scaled_requests(workload, rate, seed, self.steps.max_model_len)
        scheduler = make_policy(simulated_policy(policy), self.policy_context(policy))
        engine = self.latency.with_seed(noise_draw_seed(seed, self.noise_draw))
        run = run_policy(scheduler, engine, self.limits, requests)
        finished = [Timeline.of_request(request) for request in run.requests]
        return measure(finished, span(finished, start=0.0))


def simulate_comparison(
    steps: EngineSteps,
    settings: LiveSettings,
    policies: Sequence[str],
    rates: Sequence[float],
    search: bool = False,
    say: Callable[[str], None] = print,
) -> LiveComparison:
    """`compare`, predicted: every policy on the simulated copy of the profiled engine."""
    trials = functools.partial(SimulatedTrials, steps)
    return compare(settings, policies, rates, search, say, trials)
