"""Engine-agnostic scheduling core: requests, deadlines, queues, views, plans, KV blocks.

Nothing here imports torch, the simulator or vLLM: both engines drive policies through it.
"""

from __future__ import annotations

from slidingserve.core.batch import BatchShape, TimedBatch
from slidingserve.core.kv_blocks import KVBlockManager, blocks_for_tokens
from slidingserve.core.plan import (
    InvalidPlanError,
    Plan,
    PlanBuilder,
    ScheduledChunk,
    validate_plan,
)
from slidingserve.core.request import SLO, Phase, Request
from slidingserve.core.view import EngineLimits, SchedulerView

__all__ = [
    "SLO",
    "BatchShape",
    "EngineLimits",
    "InvalidPlanError",
    "KVBlockManager",
    "Phase",
    "Plan",
    "PlanBuilder",
    "Request",
    "ScheduledChunk",
    "SchedulerView",
    "TimedBatch",
    "blocks_for_tokens",
    "validate_plan",
]
