"""Sarathi-Serve: a fixed token budget, decodes first, then ongoing prefills, then new ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from slidingserve.core.checks import require_int
from slidingserve.core.plan import PlanBuilder
from slidingserve.policies.base import Policy

if TYPE_CHECKING:
    from slidingserve.core.plan import Plan
    from slidingserve.core.view import SchedulerView


@dataclass(frozen=True, slots=True)
class SarathiConfig:
    """Options of `sarathi` and `sarathi-edf`."""

    chunk_size: int = 512  # token budget per iteration, decodes included

    def __post_init__(self) -> None:
        require_int("chunk_size", self.chunk_size)


class SarathiPolicy(Policy):
    """Stall-free batching with a fixed budget; prefills first-come first-served (SPEC §8)."""

    name = "sarathi"
    config_type = SarathiConfig
    config: SarathiConfig

    def schedule(self, view: SchedulerView) -> Plan:
        builder = PlanBuilder(view, self.config.chunk_size)
        builder.add_decodes(view.decoding)
        builder.add_prefills(view.prefilling)
        builder.add_prefills(view.waiting)
        return builder.build("fixed-chunk")
