"""The named compositions of SlidingServe: the paper's algorithm, the measured design, and
the paper's two ablations. Each names every part; a policy registered under a name runs
one of them (`policy.py`), and users change it with flat options (`options.py`)."""

from __future__ import annotations

from slidingserve.policies.slidingserve.budget import BudgetConfig, PaperSplit, WindowSplit
from slidingserve.policies.slidingserve.config import SlidingServeConfig
from slidingserve.policies.slidingserve.constructor import ConstructorConfig
from slidingserve.policies.slidingserve.ordering import EdfOrder, MlpsOrder
from slidingserve.policies.slidingserve.triage import TriageConfig

PAPER = SlidingServeConfig(
    ordering=MlpsOrder(alpha=1.0, epsilon=0.001),
    budget=BudgetConfig(PaperSplit()),
    features="paper",
    constructor=ConstructorConfig(),
)
"""`slidingserve-paper` (docs/design.md §2–§6): MLPS order, the violation checker and the
BatchConstructor when a prefill is at risk, else the SlidingChunker's ternary split of two
decode windows; the paper's seven predictor features."""

DESIGN = SlidingServeConfig(
    ordering=EdfOrder(lost_last=True),
    triage=TriageConfig("drop-largest", rate="ema"),
    budget=BudgetConfig(
        WindowSplit(k=1),
        time_margin=1.1,
        iteration_cap=2.0,
        token_quantum=128,
        tight_cache_cap=1.0,
    ),
    features="rich",
    preempt_lost_first=True,
    preempt_most_slack=True,
    yield_violated=True,
    kv_headroom=32,
    kv_forecast=1.1,
)
"""`slidingserve`, chosen by measurement (README, "The design"): deadline order with lost
requests last; Moore–Hodgson triage of the prefill queue at the observed rate; the greedy
budget of the tightest decode slack ÷ 1.1, no iteration past two TBTs (one TBT of slack
spent at most), nor past one TBT while the KV cache is tight and the decodes alone take at
most half a TBT, its total rounded down to a 128-token tile; no BatchConstructor; the rich
predictor; when the KV cache runs short, lost requests preempted first, then the one with
the most slack before its next deadline; the decodes of
requests already violated left out while a live request waits for prefill; the blocks
the decodes add over their next 32 tokens kept from prefills; a waiting request started
only while the blocks it and the running requests are forecast to hold stay within 1.1×
the cache."""

SC_EDF = SlidingServeConfig(
    ordering=EdfOrder(), budget=BudgetConfig(PaperSplit()), features="paper"
)
"""`slidingserve-sc`, the paper's ablation: Sarathi-EDF's order with the SlidingChunker."""

SC_MLPS = SlidingServeConfig(
    ordering=MlpsOrder(), budget=BudgetConfig(PaperSplit()), features="paper"
)
"""`slidingserve-sc-mlps`, the paper's ablation: MLPS and the SlidingChunker, no
BatchConstructor."""
