"""A SlidingServe composition: an ordering, an optional triage, a budget and an optional
BatchConstructor, each with its own small config, plus what the whole policy shares.

Nothing here has the paper's values as defaults: a composition names every part. The
paper's algorithm and the measured design are two of them (`compositions.py`); users
change one with flat options (`options.py`). A part that is absent cannot be tuned (the
knapsack's settings live in `ConstructorConfig`, the MLPS weights in `MlpsOrder`, ...);
the two settings that span parts are checked here: the decode windows' margin and cap
need the window budgets or the constructor, and the EMA's decay needs a part that reads ρ_t.
"""

from __future__ import annotations

from dataclasses import dataclass

from slidingserve.core.checks import require_int, require_number
from slidingserve.policies.slidingserve.budget import BudgetConfig, FixedSplit
from slidingserve.policies.slidingserve.constructor import ConstructorConfig
from slidingserve.policies.slidingserve.ordering import MlpsOrder, Ordering
from slidingserve.policies.slidingserve.triage import TriageConfig
from slidingserve.predictor import FEATURE_SETS

ADMISSION_TESTS: tuple[str, ...] = ("alone", "queue")
DEFAULT_DECAY = 0.9  # EMA weight of the old prefill rate ρ_t at each observed iteration


@dataclass(frozen=True, slots=True)
class SlidingServeConfig:
    """One composition of the SlidingServe policy (docs/design.md §2, §4–§6, §12)."""

    ordering: Ordering  # the prefill queue's order: MLPS or EDF
    budget: BudgetConfig  # the SlidingChunker's budget when the constructor does not plan
    features: str  # the predictor's feature set: "paper" (docs/design.md §3) or "rich"
    triage: TriageConfig | None = None  # None: every request stays in the ordering's place
    constructor: ConstructorConfig | None = None  # None: no violation checker, no knapsack
    throughput_decay: float = DEFAULT_DECAY  # EMA weight of the old ρ_t, in [0, 1)
    max_batch_tokens: int | None = None  # B_max; None: the engine's max_num_batched_tokens
    admission: bool = False  # refuse at once a request that would miss its TTFT if run next
    # With admission: "alone" refuses only that; "queue" also refuses a request just arrived
    # that does not fit behind the queue the policy means to serve (core/queue_fit.py)
    admission_test: str = "alone"
    preempt_lost_first: bool = False  # a preemption takes a lost request first (victims.py)
    # a preemption takes the request with the most slack, not the newest (victims.py)
    preempt_most_slack: bool = False
    # a violated request's decode waits while a live request waits for prefill (violated.py)
    yield_violated: bool = False
    kv_headroom: int = 0  # decode tokens of growth kept free from prefills (headroom.py)
    # a waiting request starts only when its whole prefill fits in the KV cache
    # (whole_prefills.py)
    whole_prefills: bool = False
    # > 0: a waiting request starts only while the blocks it and the running requests are
    # forecast to hold stay within this share of the cache (kv_forecast.py); 0: off
    kv_forecast: float = 0.0
    # > 0: while QoServe's low-memory test holds (fewer than 32,000 tokens of the KV cache
    # free, `policies.common.is_low_memory`), a step plans as if max_batch_tokens were this
    # (its batch, decodes included, at most this many tokens); 0: off
    low_memory_cap: int = 0
    record_decisions: bool = True  # keep a DecisionRecord per iteration

    def __post_init__(self) -> None:
        if self.features not in FEATURE_SETS:
            known = ", ".join(FEATURE_SETS)
            raise ValueError(f"unknown features {self.features!r}; known: {known}")
        decay = self.throughput_decay
        if isinstance(decay, bool) or not isinstance(decay, int | float) or not 0 <= decay < 1:
            raise ValueError(f"throughput_decay must be in [0, 1), got {decay!r}")
        if self.max_batch_tokens is not None:
            require_int("max_batch_tokens", self.max_batch_tokens)
        for name in (
            "admission",
            "preempt_lost_first",
            "preempt_most_slack",
            "yield_violated",
            "whole_prefills",
            "record_decisions",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        require_int("kv_headroom", self.kv_headroom, minimum=0)
        require_number("kv_forecast", self.kv_forecast, 0)
        require_int("low_memory_cap", self.low_memory_cap, minimum=0)
        if self.admission_test not in ADMISSION_TESTS:
            known = ", ".join(ADMISSION_TESTS)
            raise ValueError(f"unknown admission_test {self.admission_test!r}; known: {known}")
        self._check_spanning_settings()

    def _check_spanning_settings(self) -> None:
        if self.budget.shapes_windows and not uses_decode_windows(self.budget, self.constructor):
            raise ValueError(
                f"time_margin, iteration_cap, tight_cache_cap and release_decodes do nothing here: "
                f"{WINDOWS_UNUSED}"
            )
        if self.admission_test != "alone" and not self.admission:
            raise ValueError(f"admission_test does nothing here: {NO_ADMISSION}")
        if self.throughput_decay != DEFAULT_DECAY and not reads_rate_ema(
            self.ordering, self.triage
        ):
            raise ValueError(f"throughput_decay does nothing here: {EMA_UNUSED}")


def uses_decode_windows(budget: BudgetConfig, constructor: ConstructorConfig | None) -> bool:
    """Whether some part reads the decode windows: a budget other than the fixed one, or
    the BatchConstructor (its T_cur)."""
    return not isinstance(budget.rule, FixedSplit) or constructor is not None


def reads_rate_ema(ordering: Ordering, triage: TriageConfig | None) -> bool:
    """Whether some part reads the prefill-rate EMA ρ_t: MLPS, or a triage at its rate."""
    return isinstance(ordering, MlpsOrder) or (triage is not None and triage.rate == "ema")


NO_ADMISSION = "admission control is off (admission=false)"
WINDOWS_UNUSED = (
    "the fixed budget ignores the decode deadlines and there is no BatchConstructor "
    "(batch_constructor=false) to read the decode windows"
)
EMA_UNUSED = (
    "no part reads the prefill-rate EMA: it is read by MLPS (sorter=mlps) and by a "
    "triage at triage_rate=ema"
)
