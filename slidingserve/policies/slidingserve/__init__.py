"""The SlidingServe policy and its parts: MLPS, the SlidingChunker, the BatchConstructor."""

from __future__ import annotations

from slidingserve.policies.slidingserve.config import SlidingServeConfig
from slidingserve.policies.slidingserve.policy import (
    SlidingChunkerEdfPolicy,
    SlidingChunkerMlpsPolicy,
    SlidingServePaperPolicy,
    SlidingServePolicy,
)
from slidingserve.policies.slidingserve.stats import DecisionRecord

__all__ = [
    "DecisionRecord",
    "SlidingChunkerEdfPolicy",
    "SlidingChunkerMlpsPolicy",
    "SlidingServeConfig",
    "SlidingServePaperPolicy",
    "SlidingServePolicy",
]
