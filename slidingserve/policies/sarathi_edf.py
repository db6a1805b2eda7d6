"""Sarathi-Serve with prefills in earliest-deadline-first order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slidingserve.core.plan import PlanBuilder
from slidingserve.policies.base import Policy
from slidingserve.policies.sarathi import SarathiConfig

if TYPE_CHECKING:
    from slidingserve.core.plan import Plan
    from slidingserve.core.view import SchedulerView


class SarathiEdfPolicy(Policy):
    """Decodes first, then every prefill (ongoing or new) by the deadline of its next token
    (the TTFT deadline unless it was preempted), ties by arrival (SPEC §8)."""

    name = "sarathi-edf"
    config_type = SarathiConfig
    config: SarathiConfig

    def schedule(self, view: SchedulerView) -> Plan:
        builder = PlanBuilder(view, self.config.chunk_size)
        builder.add_decodes(view.decoding)
        by_deadline = sorted(view.prefill_candidates(), key=lambda r: (r.next_deadline, r.arrival))
        builder.add_prefills(by_deadline)
        return builder.build("edf")
