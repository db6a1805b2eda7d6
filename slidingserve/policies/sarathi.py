"""Sarathi-Serve: a fixed token budget, decodes first, then ongoing prefills, then new ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from slidingserve.core.checks import require_int
from slidingserve.core.plan import PlanBuilder
from slidingserve.policies.base import Policy

if TYPE_CHECKING:
    from slidingserve.core.plan import Plan
    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView


@dataclass(frozen=True, slots=True)
class SarathiConfig:
    """Options of `sarathi` and `sarathi-edf`."""

    chunk_size: int = 512  # token budget per iteration, decodes included

    def __post_init__(self) -> None:
        require_int("chunk_size", self.chunk_size)


class SarathiPolicy(Policy):
    """Stall-free batching with a fixed budget; prefills first-come first-served
    (docs/baselines.md)."""

    name = "sarathi"
    config_type = SarathiConfig
    path: ClassVar[str] = "fixed-chunk"  # the plans' path label
    config: SarathiConfig

    def schedule(self, view: SchedulerView) -> Plan:
        builder = PlanBuilder(view, self.config.chunk_size)
        builder.add_decodes(view.decoding)
        builder.add_prefills(self.prefill_order(view))
        return builder.build(self.path)

    def prefill_order(self, view: SchedulerView) -> list[Request]:
        """The order prefills fill what the decodes leave: ongoing ones, then new ones,
        each in admission (arrival) order."""
        return view.prefill_candidates()
