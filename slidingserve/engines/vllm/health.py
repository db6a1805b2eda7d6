"""Where the adapter departed from its policy: counted, logged once a minute, exported.

A departure is a step the policy left empty and vLLM's own scheduler filled (the step "fell
back to vLLM"), a step in which vLLM ran other tokens than the plan (its KV ran short), an
online refit of the shared predictor that raised, or a policy's own refit (`Policy.refit`)
that raised. `AdapterHealth` counts them and, at most once per `log_interval`, writes one
line to the server log:

    slidingserve: 1234 steps, 3 fell back to vLLM (empty plan), 0 plan mismatches,
    0 failed refits, 0 failed policy refits

(on one line). `PrometheusCounts` also exports them as counters to vLLM's `/metrics`, which
only works when the server runs with `PROMETHEUS_MULTIPROC_DIR` (see its docstring).
No vLLM import: tested with a fake clock.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from prometheus_client import CollectorRegistry

logger = logging.getLogger(__name__)

LOG_INTERVAL = 60.0  # seconds between two health lines, at most one line per interval
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class HealthCounts(NamedTuple):
    """The adapter's departures from its policy since the engine started."""

    steps: int  # scheduler steps (calls of `schedule`)
    empty_plans: int  # steps the policy left empty and vLLM's own scheduler filled
    plan_mismatches: int  # steps in which vLLM ran other tokens than the plan
    failed_refits: int  # online refits of the shared predictor that raised
    failed_policy_refits: int  # refits of the policy's own model that raised

    def line(self) -> str:
        """The server-log line of these counts."""
        return (
            f"slidingserve: {self.steps} steps, {self.empty_plans} fell back to vLLM "
            f"(empty plan), {self.plan_mismatches} plan mismatches, {self.failed_refits} "
            f"failed refits, {self.failed_policy_refits} failed policy refits"
        )


class RefitFailures(Protocol):
    """What the health report reads of the online learner (`OnlineLearner`)."""

    @property
    def num_failures(self) -> int: ...

    @property
    def num_listener_failures(self) -> int: ...


class AdapterHealth:
    """Counts the adapter's steps and departures; logs them at most once per interval.

    `step` is called once per scheduler step, in the scheduling thread. Refit failures are
    read from the learner when the counts are taken (they happen in its thread).
    """

    def __init__(
        self,
        refits: RefitFailures,
        log_interval: float = LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        metrics: PrometheusCounts | None = None,
    ) -> None:
        if not log_interval > 0:
            raise ValueError(f"log_interval must be positive, got {log_interval}")
        self.steps = 0
        self.empty_plans = 0
        self.plan_mismatches = 0
        self._refits = refits
        self._interval = log_interval  # seconds
        self._clock = clock
        self._next_log = clock() + log_interval  # first line one interval after the start
        self._metrics = metrics

    @property
    def counts(self) -> HealthCounts:
        """The counts now."""
        return HealthCounts(
            self.steps,
            self.empty_plans,
            self.plan_mismatches,
            self._refits.num_failures,
            self._refits.num_listener_failures,
        )

    def step(self, *, fell_back: bool, mismatch: bool) -> None:
        """Count one step (did vLLM fill an empty plan? depart from a plan?), export the
        counts and log them if the interval has passed since the last line."""
        self.steps += 1
        self.empty_plans += fell_back
        self.plan_mismatches += mismatch
        if self._metrics is not None:
            self._metrics.publish(self.counts)
        self.log_if_due()

    def log_if_due(self) -> bool:
        """Log the counts if a whole interval has passed since the last line; whether it did."""
        now = self._clock()
        if now < self._next_log:
            return False
        self._next_log = now + self._interval
        self.log_now()
        return True

    def log_now(self) -> None:
        """Log the counts (at shutdown: the last word)."""
        logger.info("%s", self.counts.line())


class PrometheusCounts:
    """The health counts as Prometheus counters, `slidingserve:<count>_total`.

    vLLM's API server serves `/metrics` from its own process, while the scheduler runs in
    the engine core process. The counters reach `/metrics` through prometheus_client's
    multiprocess mode: with `PROMETHEUS_MULTIPROC_DIR` set in the server's environment
    (`server_environment(metrics_dir=...)`), every process writes its metrics to files in
    that folder and the API server's registry (`get_prometheus_registry`) reads them all.
    By default the counters are registered in no registry of this process (nothing serves
    it); tests pass one to read them.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import Counter

        self._counters = {
            name: Counter(f"slidingserve:{name}", _HELP[name], registry=registry)
            for name in HealthCounts._fields
        }
        self._published = dict.fromkeys(HealthCounts._fields, 0)

    def publish(self, counts: HealthCounts) -> None:
        """Raise each counter to its count (counts never decrease)."""
        for name, value in counts._asdict().items():
            if value > self._published[name]:
                self._counters[name].inc(value - self._published[name])
                self._published[name] = value

    @classmethod
    def if_exported(cls) -> PrometheusCounts | None:
        """Counters when this process's metrics reach a server's `/metrics`, else None."""
        return cls() if os.environ.get(MULTIPROC_ENV) else None


_HELP = {
    "steps": "Scheduler steps run by the SlidingServe adapter.",
    "empty_plans": "Steps the policy left empty and vLLM's own scheduler filled.",
    "plan_mismatches": "Steps in which vLLM scheduled other tokens than the policy's plan.",
    "failed_refits": "Online refits of the shared batch-time predictor that raised.",
    "failed_policy_refits": "Refits of the policy's own batch-time model that raised.",
}


def share_vllm_log_handlers(name: str = "slidingserve") -> None:
    """Send the project's INFO lines to the server log, formatted as vLLM's own lines.

    In vLLM's processes only the `vllm` logger has a handler, so the project's INFO lines
    would be dropped (Python prints only warnings without a handler). When neither the
    project's logger nor the root logger has a handler (nobody configured logging), the
    project's logger gets vLLM's handlers and level; otherwise nothing changes (a test's
    log capture, an application's own configuration).
    """
    ours = logging.getLogger(name)
    if ours.handlers or logging.getLogger().handlers:
        return
    theirs = logging.getLogger("vllm")
    for handler in theirs.handlers:
        ours.addHandler(handler)
    ours.setLevel(theirs.level or logging.INFO)
