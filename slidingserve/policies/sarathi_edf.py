"""Sarathi-Serve with prefills in earliest-deadline-first order."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from slidingserve.policies.common import edf_sorted
from slidingserve.policies.sarathi import SarathiPolicy

if TYPE_CHECKING:
    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView


class SarathiEdfPolicy(SarathiPolicy):
    """Decodes first, then every prefill (ongoing or new) by the deadline of its next token
    (the TTFT deadline unless it was preempted), ties by arrival (docs/baselines.md)."""

    name = "sarathi-edf"
    path: ClassVar[str] = "edf"

    def prefill_order(self, view: SchedulerView) -> list[Request]:
        return edf_sorted(view.prefill_candidates())
