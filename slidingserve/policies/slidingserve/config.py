"""Configuration of the SlidingServe policy: every component can be switched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from slidingserve.core.checks import require_int, require_number, require_positive
from slidingserve.predictor import FEATURE_SETS

Sorter = Literal["mlps", "edf"]
Chunker = Literal["paper", "window", "fixed"]
Overload = Literal["none", "relegate", "drop-largest"]
RateSource = Literal["ema", "predicted"]

SORTERS: tuple[str, ...] = ("mlps", "edf")
CHUNKERS: tuple[str, ...] = ("paper", "window", "fixed")
OVERLOADS: tuple[str, ...] = ("none", "relegate", "drop-largest")
RATE_SOURCES: tuple[str, ...] = ("ema", "predicted")


@dataclass(frozen=True, slots=True)
class SlidingServeConfig:
    """Options of the `slidingserve` policy family (SPEC §2, §4–§6).

    The defaults are the paper's algorithm (`slidingserve-paper`); `slidingserve` and the
    ablation variants are presets of these switches (`policy.py`).
    """

    sorter: Sorter = "mlps"  # "mlps" (SPEC §4) or "edf" (earliest TTFT deadline first)
    chunker: Chunker = "paper"  # "paper": ternary split; "window": exact window-k; "fixed"
    window: int = 2  # k for chunker="window" (1 = greedy, 2 = exact two-window, 3, 4)
    batch_constructor: bool = True  # run the violation checker and the knapsack (SPEC §6)
    leftover_fill: bool = False  # fill what the knapsack leaves with partial chunks [beyond]
    max_batch_tokens: int | None = None  # B_max; None: the engine's max_num_batched_tokens
    alpha: float = 1.0  # urgency threshold α of MLPS
    epsilon: float = 0.001  # ε, seconds: floor of the slack in the urgency
    throughput_decay: float = 0.9  # EMA weight of the old prefill throughput ρ_t
    max_anchors: int = 8  # risky requests tried as knapsack anchors, by increasing slack
    max_knapsack_items: int = 64  # requests an anchor's knapsack chooses from (queue order)
    knapsack_quantum: int = 1  # tokens per knapsack capacity cell (1 = exact)
    verify_rounds: int = 3  # re-solves when the chosen batch is predicted over its limit
    record_decisions: bool = True  # keep a DecisionRecord per iteration
    lost_last: bool = False  # edf: requests whose next deadline passed go after live ones
    overload: Overload = "none"  # triage of the prefill queue (overload.py) [beyond]
    triage_rate: RateSource = "ema"  # prefill rate the triage assumes
    iteration_cap: float = 0.0  # > 0: no iteration planned past this × the tightest L_tbt
    time_margin: float = 1.0  # decode slack is divided by this before budgets are sized
    token_quantum: int = 0  # > 0: batch totals rounded down to a multiple of this (a tile)
    features: str = "paper"  # the predictor's feature set: "paper" (SPEC §3) or "rich"
    admission: bool = False  # refuse at once a request that would miss its TTFT if run next

    def __post_init__(self) -> None:
        if self.sorter not in SORTERS:
            raise ValueError(f"unknown sorter {self.sorter!r}; known: {', '.join(SORTERS)}")
        if self.chunker not in CHUNKERS:
            raise ValueError(f"unknown chunker {self.chunker!r}; known: {', '.join(CHUNKERS)}")
        if self.overload not in OVERLOADS:
            raise ValueError(f"unknown overload {self.overload!r}; known: {', '.join(OVERLOADS)}")
        if self.triage_rate not in RATE_SOURCES:
            known = ", ".join(RATE_SOURCES)
            raise ValueError(f"unknown triage_rate {self.triage_rate!r}; known: {known}")
        require_number("iteration_cap", self.iteration_cap, 0)
        require_number("time_margin", self.time_margin, 1)
        require_int("window", self.window)
        if self.window > 4:
            raise ValueError(f"window must be 1, 2, 3 or 4, got {self.window}")
        if self.max_batch_tokens is not None:
            require_int("max_batch_tokens", self.max_batch_tokens)
        _check_positive("alpha", self.alpha)
        _check_positive("epsilon", self.epsilon)
        if isinstance(self.throughput_decay, bool) or not 0 <= self.throughput_decay < 1:
            raise ValueError(f"throughput_decay must be in [0, 1), got {self.throughput_decay}")
        require_int("token_quantum", self.token_quantum, 0)
        if self.features not in FEATURE_SETS:
            known = ", ".join(FEATURE_SETS)
            raise ValueError(f"unknown features {self.features!r}; known: {known}")
        for name in ("max_anchors", "max_knapsack_items", "knapsack_quantum", "verify_rounds"):
            require_int(name, getattr(self, name))
        switches = ("batch_constructor", "leftover_fill", "record_decisions", "lost_last")
        for name in (*switches, "admission"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")


def _check_positive(name: str, value: float) -> None:
    require_positive(name, value)
