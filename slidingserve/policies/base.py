"""The one contract between a scheduling policy and an engine (simulator or vLLM).

An engine runs iterations. At the start of each it builds a `SchedulerView` (the queues and
the time from its own clock) and calls `Policy.schedule`; it executes the returned `Plan`
exactly, then reports what happened through `on_iteration_end`. Policies never read the wall
clock, never mutate requests or queues, and know nothing of torch or of the simulator.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from slidingserve.core.batch import BatchShape, TimedBatch
    from slidingserve.core.plan import Plan
    from slidingserve.core.queue_fit import AdmissionQueue
    from slidingserve.core.request import Request
    from slidingserve.core.view import EngineLimits, SchedulerView
    from slidingserve.predictor import LatencyModel, Sample


class IterationRecord(NamedTuple):
    """What the engine reports after executing a plan."""

    start: float  # seconds, engine clock at the start of the iteration
    duration: float  # seconds the iteration took (measured or simulated)
    plan: Plan  # the plan that ran
    shape: BatchShape  # its token counts, as the predictor sees them


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What an engine hands a policy when it builds it."""

    limits: EngineLimits
    predictor: LatencyModel | None = None  # batch-time model, for policies that plan
    profile: Sequence[TimedBatch] = ()  # timed batches, for policies that fit their own model
    # The same batches fitted with each feature set, by set name ("paper", "rich"), for a
    # policy whose configuration names one; empty: only `predictor` is known.
    predictors: Mapping[str, LatencyModel] = dataclasses.field(default_factory=dict)


class Policy(ABC):
    """A scheduling policy. Subclasses set `name` and `config_type` and implement `schedule`.

    `config_type` is a frozen dataclass whose fields are the policy's options; `from_options`
    builds it from a plain mapping (CLI flags, a TOML table) and rejects unknown keys. A
    policy built from parts (SlidingServe) overrides `from_options` to map flat options
    onto them.
    """

    name: ClassVar[str]
    config_type: ClassVar[type[Any]]
    needs_predictor: ClassVar[bool] = False  # True: the context must carry a predictor
    needs_profile: ClassVar[bool] = False  # True: the context must carry timed batches

    def __init__(self, config: Any, context: PolicyContext) -> None:
        self.config = config
        self.context = context

    @classmethod
    def from_options(
        cls, context: PolicyContext, options: Mapping[str, Any] | None = None
    ) -> Policy:
        """Build the policy from plain options (its config's fields); unknown keys fail."""
        return cls(build_config(cls.config_type, options or {}, cls.name), context)

    @abstractmethod
    def schedule(self, view: SchedulerView) -> Plan:
        """Choose the next batch.

        Called once at the start of every iteration in which some request is waiting,
        prefilling or decoding. Returns an ordered plan of (request, tokens): decodes get
        exactly 1 token, prefills 1..remaining. The plan must respect `view.limits` and the
        free KV blocks (build it with `PlanBuilder`, which enforces both). An empty plan
        means the policy cannot run anything; the engine then preempts or reports a stall.
        """

    def on_iteration_end(self, record: IterationRecord) -> None:
        """Called after the engine executed the plan of the last `schedule` call. Default: no-op."""

    def refit(self, samples: Sequence[Sample]) -> None:
        """Refit whatever batch-time model the policy keeps of its own to measured steps.

        Called by an engine that learns online (the vLLM adapter), from its background
        refit thread, each time it refits the shared predictor and with the same samples,
        so that every policy learns from the same measurements equally often. Must swap
        the new model in with one assignment (the scheduling thread reads it) and may
        raise on samples it cannot fit (the engine counts and logs the failure and the
        old model stays). Default: no-op (the policy keeps no model or uses the shared one).
        """

    # -- simulator-only hooks: the simulator fast-forwards decode-only stretches; the vLLM
    # -- adapter never calls these (every real step goes through `schedule`).

    def schedules_all_decodes(self, num_decoding: int) -> bool:
        """Simulator only: whether, with nothing waiting or prefilling, `schedule` gives
        every decode 1 token.

        The simulator uses it to fast-forward stretches of decode-only iterations without
        calling `schedule` at each (it calls `on_decode_run` instead). Default: True.
        """
        return True

    def on_decode_run(self, durations: Sequence[float], num_decodes: int) -> None:
        """Simulator only: called instead of `on_iteration_end` for a fast-forwarded run of
        decode-only iterations, each with `num_decodes` decodes; `durations` in seconds.
        Default: no-op."""

    def preemption_victim(self, running: Sequence[Request], now: float) -> Request:
        """Simulator only: the request a preemption takes when the KV cache runs short;
        `running` in admission order, `now` the iteration's start. Default: the newest,
        as vLLM's FCFS scheduler and Sarathi-Serve take it.

        vLLM takes the tail of its running list, which the adapter orders as the plan
        (`imposer.py`): a policy that overrides this orders its plans to match.
        """
        return running[-1]


@runtime_checkable
class ReportsRelegations(Protocol):
    """Optional, for diagnosis: a policy that relegates requests it judges hopeless to the
    back of its order (QoServe's eager relegation) says which ones it holds relegated."""

    def relegated_ids(self) -> Collection[str]:
        """Ids of the requests relegated and still queued or running, read right after a
        `schedule` call (a relegation made in that call included)."""
        ...


@runtime_checkable
class ControlsAdmission(Protocol):
    """Optional: a policy whose admission control refuses a request that has emitted nothing
    when its whole remaining prefill, run from now at one rate, would end after its
    first-token deadline (`common.cannot_finish_prefill`). An engine may then refuse such a
    request before it enters its queues (the vLLM adapter publishes the rate to its API
    server)."""

    def admission_rate(self) -> float | None:
        """The prefill rate (tokens per second, positive) the admission test assumes now;
        None while the policy refuses nothing. Called from the scheduling thread."""
        ...

    def admission_queue(self) -> AdmissionQueue | None:
        """The queue a queue-aware admission test saw at the latest step (`core/queue_fit.py`),
        for an engine to test new requests against before they enter its queues; None
        without that test. Called from the scheduling thread."""
        ...


def build_config(config_type: type[Any], options: Mapping[str, Any], owner: str) -> Any:
    """Build a frozen config dataclass from a mapping, with a clear error for unknown keys."""
    fields = {f.name for f in dataclasses.fields(config_type)}
    unknown = sorted(set(options) - fields)
    if unknown:
        known = ", ".join(sorted(fields)) or "none"
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for {owner}; known: {known}")
    return config_type(**options)
