"""The SlidingServe policy and its parts: the ordering (MLPS or EDF), the triage, the budget
(the SlidingChunker) and the BatchConstructor, composed as `PAPER`, `DESIGN` and the
paper's ablations."""

from __future__ import annotations

from slidingserve.policies.slidingserve.compositions import DESIGN, PAPER, SC_EDF, SC_MLPS
from slidingserve.policies.slidingserve.config import SlidingServeConfig
from slidingserve.policies.slidingserve.options import compose, flatten
from slidingserve.policies.slidingserve.policy import (
    SlidingChunkerEdfPolicy,
    SlidingChunkerMlpsPolicy,
    SlidingServePaperPolicy,
    SlidingServePolicy,
)
from slidingserve.policies.slidingserve.stats import DecisionRecord

__all__ = [
    "DESIGN",
    "PAPER",
    "SC_EDF",
    "SC_MLPS",
    "DecisionRecord",
    "SlidingChunkerEdfPolicy",
    "SlidingChunkerMlpsPolicy",
    "SlidingServeConfig",
    "SlidingServePaperPolicy",
    "SlidingServePolicy",
    "compose",
    "flatten",
]
