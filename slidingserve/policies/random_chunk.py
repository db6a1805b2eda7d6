"""Sarathi's order with a random token budget each iteration: a profiling policy.

Profiling a real engine needs batches of every shape (few and many decodes, short and long
contexts, small and large chunks); a seeded random budget over ordinary traffic gives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from slidingserve.core.checks import require_int
from slidingserve.core.plan import PlanBuilder
from slidingserve.policies.base import Policy, PolicyContext

if TYPE_CHECKING:
    from slidingserve.core.plan import Plan
    from slidingserve.core.view import SchedulerView


@dataclass(frozen=True, slots=True)
class RandomChunkConfig:
    """Options of `random-chunk`."""

    seed: int = 0
    min_budget: int = 1  # tokens
    max_budget: int | None = None  # tokens; None: the engine's max_num_batched_tokens

    def __post_init__(self) -> None:
        require_int("seed", self.seed, minimum=0)
        require_int("min_budget", self.min_budget)
        if self.max_budget is not None:
            require_int("max_budget", self.max_budget, minimum=self.min_budget)


class RandomChunkPolicy(Policy):
    """Decodes first, then prefills FCFS, under a budget drawn uniformly each iteration."""

    name = "random-chunk"
    config_type = RandomChunkConfig
    config: RandomChunkConfig

    def __init__(self, config: RandomChunkConfig, context: PolicyContext) -> None:
        super().__init__(config, context)
        self._rng = np.random.default_rng(config.seed)
        self._top = min(
            config.max_budget or context.limits.max_num_batched_tokens,
            context.limits.max_num_batched_tokens,
        )

    def schedule(self, view: SchedulerView) -> Plan:
        low = min(self.config.min_budget, self._top)
        budget = int(self._rng.integers(low, self._top + 1))
        builder = PlanBuilder(view, max(budget, len(view.decoding)))
        builder.add_decodes(view.decoding)
        builder.add_prefills(view.prefilling)
        builder.add_prefills(view.waiting)
        return builder.build("random-chunk")
