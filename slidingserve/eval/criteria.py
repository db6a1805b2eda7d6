"""Goodput criteria: which requests must meet their SLO for a rate to pass.

"overall": all requests; "worst-tier": every tier, judged by the worst one (QoServe's
goodput); "tier:NAME": that tier's requests. Each reads the violating fraction under the
run's TBT reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slidingserve.sim.runner import SimulationResult

OVERALL = "overall"
WORST_TIER = "worst-tier"
TIER_PREFIX = "tier:"


def known_criteria(tier_names: Sequence[str]) -> list[str]:
    """The criteria a workload with these SLO tiers (none: no tiers) can be searched under."""
    known = [OVERALL, *([WORST_TIER] if tier_names else [])]
    return known + [TIER_PREFIX + name for name in tier_names]


def violation_for(result: SimulationResult, criterion: str) -> float:
    """The violating fraction of `result` that `criterion` looks at (ValueError for a
    criterion the run's workload has no tiers for)."""
    if criterion == OVERALL:
        return result.violations.overall
    if not result.tiers:
        raise ValueError(f"criterion {criterion!r} needs a workload with SLO tiers")
    if criterion == WORST_TIER:
        return max(result.tier_violations(tier).overall for tier in result.tiers)
    name = criterion.removeprefix(TIER_PREFIX)
    if not criterion.startswith(TIER_PREFIX) or name not in result.tiers:
        known = ", ".join(known_criteria(list(result.tiers)))
        raise ValueError(f"unknown goodput criterion {criterion!r}; known: {known}")
    return result.tier_violations(name).overall
