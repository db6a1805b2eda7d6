"""Where the adapter departed from its policy, and how much state it holds: counted,
logged once a minute, exported.

A departure is a step the policy left empty and vLLM's own scheduler filled (the step "fell
back to vLLM"), a step in which vLLM ran other tokens than the plan (its KV ran short), a
request vLLM preempted, a step whose policy raised (vLLM's own scheduler then ran it), an
online refit of the shared predictor that raised, a policy's own refit (`Policy.refit`)
that raised, or a measured step time the online learner dropped as garbage.
`AdapterHealth` counts them and, at most once per `log_interval`, writes one line to the
server log, followed by the size of each of the adapter's own structures:

    slidingserve: 1234 steps, 3 fell back to vLLM (empty plan), 0 plan mismatches,
    0 failed refits, 0 failed policy refits, 2 preemptions, 0 policy errors,
    0 dropped samples; state: tracked_requests=12 imposer_caps=0 ...

(on one line). The line is an ERROR while the policy keeps raising (its count grew since
the previous line), an INFO otherwise; the first error's traceback is logged at once, later
ones are only counted. `PrometheusCounts` exports the counts as counters and the sizes as
gauges to vLLM's `/metrics`, which only works when the server runs with
`PROMETHEUS_MULTIPROC_DIR` (see its docstring).
No vLLM import: tested with a fake clock.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from prometheus_client import CollectorRegistry

logger = logging.getLogger(__name__)

LOG_INTERVAL = 60.0  # seconds between two health lines, at most one line per interval
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
ERROR_CHARS = 300  # of the latest policy error, in the health line


class HealthCounts(NamedTuple):
    """The adapter's departures from its policy since the engine started."""

    steps: int  # scheduler steps (calls of `schedule`)
    empty_plans: int  # steps the policy left empty (or raised) and vLLM's scheduler filled
    plan_mismatches: int  # steps in which vLLM ran other tokens than the plan
    failed_refits: int  # online refits of the shared predictor that raised
    failed_policy_refits: int  # refits of the policy's own model that raised
    preemptions: int  # requests vLLM preempted (its KV ran short), over all steps
    policy_errors: int  # calls of the policy (`schedule`, `on_iteration_end`) that raised
    dropped_samples: int  # measured step times the online learner dropped as garbage
    prefix_queried_tokens: int = 0  # prompt tokens of requests admitted for the first time
    prefix_hit_tokens: int = 0  # of those, the tokens found in the prefix cache

    def line(self) -> str:
        """The server-log line of these counts."""
        return (
            f"slidingserve: {self.steps} steps, {self.empty_plans} fell back to vLLM "
            f"(empty plan), {self.plan_mismatches} plan mismatches, {self.failed_refits} "
            f"failed refits, {self.failed_policy_refits} failed policy refits, "
            f"{self.preemptions} preemptions, {self.policy_errors} policy errors, "
            f"{self.dropped_samples} dropped samples, {self.prefix_hit_rate:.1%} prefix-cache "
            f"hits"
        )

    @property
    def prefix_hit_rate(self) -> float:
        """Share of the admitted prompt tokens found in the prefix cache (0 before any)."""
        if not self.prefix_queried_tokens:
            return 0.0
        return self.prefix_hit_tokens / self.prefix_queried_tokens


STATE_HELP = {
    "tracked_requests": "Requests the SlidingServe adapter mirrors (0 when the engine is idle).",
    "imposer_caps": "Per-request token caps of the plan being imposed (0 between steps).",
    "refusals_pending": "Refused requests whose clients are not told yet (0 between steps).",
    "remembered_hits": "Waiting requests whose prefix-cache hit the adapter remembers (0 when "
    "the engine is idle).",
    "timed_steps": "Timed model steps the adapter keeps (bounded).",
    "step_periods": "Engine step periods the adapter keeps for its steps file (bounded).",
    "step_timings": "Per-step scheduling times the adapter keeps (bounded).",
    "learner_samples": "Samples in the online learner's buffer (bounded).",
    "policy_decisions": "Decision records the policy keeps, if it keeps any (bounded).",
}
"""The adapter's own structures, each exported as the gauge `slidingserve:<name>`; the
scheduler's `state_sizes()` gives one size per name."""


def state_text(sizes: Mapping[str, int]) -> str:
    """The sizes as the health line shows them: `name=size`, space-separated."""
    return " ".join(f"{name}={size}" for name, size in sizes.items())


class LearnerHealth(Protocol):
    """What the health report reads of the online learner (`OnlineLearner`)."""

    @property
    def num_failures(self) -> int: ...

    @property
    def num_listener_failures(self) -> int: ...

    @property
    def num_dropped(self) -> int: ...


class AdapterHealth:
    """Counts the adapter's steps and departures; logs them at most once per interval.

    `step` is called once per scheduler step and `policy_failed` for each call of the
    policy that raised, both in the scheduling thread. Refit failures and dropped samples
    are read from the learner when the counts are taken (refits happen in its thread).
    `sizes`, if given, returns the sizes of the adapter's structures (names of
    `STATE_HELP`): they end every health line and are exported at every step and at each
    `state_changed`.
    """

    def __init__(
        self,
        learner: LearnerHealth,
        log_interval: float = LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        metrics: PrometheusCounts | None = None,
        sizes: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        if not log_interval > 0:
            raise ValueError(f"log_interval must be positive, got {log_interval}")
        self.steps = 0
        self.empty_plans = 0
        self.plan_mismatches = 0
        self.preemptions = 0
        self.policy_errors = 0
        self.prefix_queried_tokens = 0
        self.prefix_hit_tokens = 0
        self._learner = learner
        self._interval = log_interval  # seconds
        self._clock = clock
        self._next_log = clock() + log_interval  # first line one interval after the start
        self._metrics = metrics
        self._sizes = sizes
        self._errors_at_last_line = 0  # policy_errors when the previous line was written
        self._last_error = ""  # the latest policy error, as "where: Type: message"

    @property
    def counts(self) -> HealthCounts:
        """The counts now."""
        learner = self._learner
        return HealthCounts(
            self.steps,
            self.empty_plans,
            self.plan_mismatches,
            learner.num_failures,
            learner.num_listener_failures,
            self.preemptions,
            self.policy_errors,
            learner.num_dropped,
            self.prefix_queried_tokens,
            self.prefix_hit_tokens,
        )

    @property
    def sizes(self) -> dict[str, int]:
        """The sizes of the adapter's structures now (empty without a `sizes` source)."""
        return dict(self._sizes()) if self._sizes is not None else {}

    def step(
        self,
        *,
        fell_back: bool,
        mismatch: bool,
        preempted: int = 0,
        prefix_queried: int = 0,
        prefix_hit: int = 0,
    ) -> None:
        """Count one step (did vLLM fill an empty plan? depart from a plan? how many
        requests did it preempt? how many prompt tokens did it admit, and find cached?),
        export the counts and sizes, and log them if the interval has passed since the
        last line."""
        self.steps += 1
        self.empty_plans += fell_back
        self.plan_mismatches += mismatch
        self.preemptions += preempted
        self.prefix_queried_tokens += prefix_queried
        self.prefix_hit_tokens += prefix_hit
        if self._metrics is not None:
            self._metrics.publish(self.counts)
        self.state_changed()
        self.log_if_due()

    def policy_failed(self, error: BaseException, where: str) -> None:
        """Count a call of the policy (`where`, e.g. "schedule") that raised `error`.

        The first error is logged at once with its traceback; later ones are only counted
        (a policy failing every step would flood the log), and every health line while
        their count grows is an ERROR naming the latest one.
        """
        self.policy_errors += 1
        self._last_error = f"{where}: {type(error).__name__}: {error}"[:ERROR_CHARS]
        if self.policy_errors == 1:
            logger.error(
                "the policy raised in %s; the engine carries on (a step whose plan failed is "
                "scheduled by vLLM's own scheduler) and asks the policy again next step; later "
                "errors are only counted, in the health line",
                where,
                exc_info=error,
            )

    def state_changed(self) -> None:
        """Export the sizes of the adapter's structures (after requests left it)."""
        if self._metrics is not None and self._sizes is not None:
            self._metrics.publish_sizes(self._sizes())

    def log_if_due(self) -> bool:
        """Log the counts if a whole interval has passed since the last line; whether it did."""
        now = self._clock()
        if now < self._next_log:
            return False
        self._next_log = now + self._interval
        self.log_now()
        return True

    def log_now(self) -> None:
        """Log the counts and sizes (at shutdown: the last word); an ERROR if the policy
        raised since the previous line."""
        counts = self.counts
        line = counts.line()
        sizes = self.sizes
        if sizes:
            line += f"; state: {state_text(sizes)}"
        new_errors = counts.policy_errors - self._errors_at_last_line
        self._errors_at_last_line = counts.policy_errors
        if new_errors:
            logger.error(
                "%s; the policy raised %d times since the last line, latest in %s",
                line,
                new_errors,
                self._last_error,
            )
        else:
            logger.info("%s", line)

    def close(self) -> None:
        """The engine stops: its sizes leave `/metrics` (see `PrometheusCounts.close`)."""
        if self._metrics is not None:
            self._metrics.close()


class PrometheusCounts:
    """The health counts as Prometheus counters, `slidingserve:<count>_total`, and the
    sizes of the adapter's structures as gauges, `slidingserve:<name>` (`STATE_HELP`).

    vLLM's API server serves `/metrics` from its own process, while the scheduler runs in
    the engine core process. The metrics reach `/metrics` through prometheus_client's
    multiprocess mode: with `PROMETHEUS_MULTIPROC_DIR` set in the server's environment
    (`server_environment(metrics_dir=...)`), every process writes its metrics to files in
    that folder and the API server's registry (`get_prometheus_registry`) reads them all.
    The gauges are summed over the live engine processes (`livesum`: one scheduler per
    data-parallel engine); `close` drops this process's values at shutdown (an engine that
    crashed leaves its last ones). By default the metrics are registered in no registry of
    this process (nothing serves it); tests pass one to read them.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import Counter, Gauge

        self._counters = {
            name: Counter(f"slidingserve:{name}", _HELP[name], registry=registry)
            for name in HealthCounts._fields
        }
        self._gauges = {
            name: Gauge(
                f"slidingserve:{name}", text, multiprocess_mode="livesum", registry=registry
            )
            for name, text in STATE_HELP.items()
        }
        self._published = dict.fromkeys(HealthCounts._fields, 0)

    def publish(self, counts: HealthCounts) -> None:
        """Raise each counter to its count (counts never decrease)."""
        for name, value in counts._asdict().items():
            if value > self._published[name]:
                self._counters[name].inc(value - self._published[name])
                self._published[name] = value

    def publish_sizes(self, sizes: Mapping[str, int]) -> None:
        """Set each gauge to its size (`sizes` names are those of `STATE_HELP`)."""
        for name, size in sizes.items():
            self._gauges[name].set(size)

    def close(self) -> None:
        """Remove this process's gauge files from the multiprocess folder, if there is one
        (prometheus_client's `mark_process_dead`), so that a stopped engine's sizes no
        longer count in the sum."""
        folder = os.environ.get(MULTIPROC_ENV)
        if folder:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid(), folder)  # type: ignore[no-untyped-call]

    @classmethod
    def if_exported(cls) -> PrometheusCounts | None:
        """Metrics when this process's metrics reach a server's `/metrics`, else None."""
        return cls() if os.environ.get(MULTIPROC_ENV) else None


_HELP = {
    "steps": "Scheduler steps run by the SlidingServe adapter.",
    "empty_plans": "Steps the policy left empty (or raised) and vLLM's own scheduler filled.",
    "plan_mismatches": "Steps in which vLLM scheduled other tokens than the policy's plan.",
    "failed_refits": "Online refits of the shared batch-time predictor that raised.",
    "failed_policy_refits": "Refits of the policy's own batch-time model that raised.",
    "preemptions": "Requests vLLM preempted under the SlidingServe adapter.",
    "policy_errors": "Calls of the SlidingServe policy that raised (vLLM scheduled instead).",
    "dropped_samples": "Measured step times the online learner dropped as garbage.",
    "prefix_queried_tokens": "Prompt tokens of requests admitted for the first time.",
    "prefix_hit_tokens": "Prompt tokens of first admissions found in the prefix cache.",
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
