"""BatchConstructor (docs/design.md §6): when a prefill is at risk, pick the prefills that can all
finish in time, by a 0/1 knapsack per risky anchor."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from slidingserve.core.checks import require_int
from slidingserve.policies.slidingserve.chunker import queue_head
from slidingserve.policies.slidingserve.knapsack import solve_knapsack
from slidingserve.predictor import PrefillQueueProfile, predicted_time_at, time_to_budget

if TYPE_CHECKING:
    from slidingserve.core.request import Request
    from slidingserve.predictor import LatencyModel


@dataclass(frozen=True, slots=True)
class ConstructorConfig:
    """The violation checker and the BatchConstructor (option `batch_constructor=true`)."""

    max_anchors: int = 8  # risky requests tried as knapsack anchors, by increasing slack
    max_knapsack_items: int = 64  # requests an anchor's knapsack chooses from (queue order)
    knapsack_quantum: int = 1  # tokens per knapsack capacity cell (1 = exact)
    verify_rounds: int = 3  # re-solves when the chosen batch is predicted over its limit
    leftover_fill: bool = False  # fill what the knapsack leaves with partial chunks [beyond]

    def __post_init__(self) -> None:
        for name in ("max_anchors", "max_knapsack_items", "knapsack_quantum", "verify_rounds"):
            require_int(name, getattr(self, name))
        if not isinstance(self.leftover_fill, bool):
            raise ValueError(f"leftover_fill must be true or false, got {self.leftover_fill!r}")


class Selection(NamedTuple):
    """The prefills chosen for one anchor; `requests` run to the end of their prefill."""

    anchor: Request
    requests: tuple[Request, ...]  # anchor first, then the knapsack's choice in queue order
    value: float  # Σ v_j of the knapsack's choice
    tokens: int  # Σ r_j of `requests`
    predicted_time: float  # seconds, decodes plus `requests`
    limit: float  # seconds, min(s_a, T_cur)

    @property
    def rank(self) -> tuple[int, float, int]:
        """Larger is better: (|Y_a|, Σ v, Σ r)."""
        return (len(self.requests), self.value, self.tokens)


def risky_prefills(
    candidate_prefills: Sequence[Request], now: float, predicted_time: float
) -> list[Request]:
    """Alive prefills of the candidate batch whose deadline comes before it would end,
    by increasing slack."""
    risky = [r for r in candidate_prefills if 0 < r.next_deadline - now < predicted_time]
    return sorted(risky, key=lambda r: r.next_deadline)


def knapsack_values(slacks: Sequence[float], remaining: Sequence[int]) -> list[float]:
    """v_j = 1 / (s_j / Σ s + r_j / Σ r): little slack and little work are worth more."""
    total_slack, total_work = sum(slacks), sum(remaining)
    return [
        1.0 / (s / total_slack + r / total_work) for s, r in zip(slacks, remaining, strict=True)
    ]


class BatchConstructor:
    """Chooses, among the candidate batch's prefills, a set that completes in time."""

    def __init__(self, model: LatencyModel, config: ConstructorConfig) -> None:
        self.model = model
        self.config = config

    def select(
        self,
        decode_contexts: Sequence[int],
        queue: Sequence[Request],
        anchors: Sequence[Request],
        now: float,
        t_cur: float,
        max_tokens: int,
    ) -> Selection | None:
        """The best selection over the anchors, or None if no anchor can make it, in a
        batch of at most `max_tokens` (B_max of the step, decodes included).

        `queue` is every waiting and prefilling request in priority order; an anchor's
        knapsack chooses among those with at least its slack ([decision] the whole queue,
        not only the candidate batch: docs/design.md §7's worked example needs it).
        """
        profile = self._budget_profile(decode_contexts, queue, max_tokens)
        best: Selection | None = None
        for anchor in anchors[: self.config.max_anchors]:
            chosen = self._for_anchor(
                decode_contexts, profile, queue, anchor, now, t_cur, max_tokens
            )
            if chosen is not None and (best is None or chosen.rank > best.rank):
                best = chosen
        return best

    def leftover(
        self,
        decode_contexts: Sequence[int],
        queue: Sequence[Request],
        selection: Selection,
        max_tokens: int,
    ) -> int:
        """Prefill tokens of the rest of the queue that still fit the selection's limit, in
        a batch of at most `max_tokens`."""
        chosen = set(map(id, selection.requests))
        ordered = [*selection.requests, *(r for r in queue if id(r) not in chosen)]
        budget = time_to_budget(
            self.model,
            self._budget_profile(decode_contexts, ordered, max_tokens),
            selection.limit,
            max_tokens,
        )
        return max(0, budget.prefill_tokens - selection.tokens) if budget.fits else 0

    def _budget_profile(
        self, decode_contexts: Sequence[int], queue: Sequence[Request], max_tokens: int
    ) -> PrefillQueueProfile:
        """The profile TimeToBudget reads along `queue`: its head up to B_max − |D| tokens."""
        head = queue_head(queue, len(queue), max_tokens - len(decode_contexts))
        return PrefillQueueProfile(decode_contexts, head)

    def _for_anchor(
        self,
        decode_contexts: Sequence[int],
        profile: PrefillQueueProfile,
        queue: Sequence[Request],
        anchor: Request,
        now: float,
        t_cur: float,
        max_tokens: int,
    ) -> Selection | None:
        anchor_slack = anchor.next_deadline - now
        limit = min(anchor_slack, t_cur)
        budget = time_to_budget(self.model, profile, limit, max_tokens)
        capacity = budget.prefill_tokens - anchor.remaining_prefill
        if not budget.fits or capacity < 0:
            return None
        others = [r for r in queue if r is not anchor and r.next_deadline - now >= anchor_slack][
            : self.config.max_knapsack_items
        ]
        for _ in range(self.config.verify_rounds):
            selection = self._solve(decode_contexts, anchor, others, capacity, now, limit)
            overshoot = selection.predicted_time - limit
            if overshoot <= 0:
                return selection
            capacity -= self._tokens_for(overshoot, selection)
            if capacity < 0:
                return None
        return None

    def _solve(
        self,
        decode_contexts: Sequence[int],
        anchor: Request,
        others: Sequence[Request],
        capacity: int,
        now: float,
        limit: float,
    ) -> Selection:
        work = [r.remaining_prefill for r in others]
        values = knapsack_values([r.next_deadline - now for r in others], work) if others else []
        solution = solve_knapsack(values, work, capacity, self.config.knapsack_quantum)
        requests = (anchor, *(others[i] for i in solution.chosen))
        tokens = sum(r.remaining_prefill for r in requests)
        time = predicted_time_at(self.model, _profile(decode_contexts, requests), tokens)
        return Selection(anchor, requests, solution.value, tokens, time, limit)

    def _tokens_for(self, overshoot: float, selection: Selection) -> int:
        """Tokens to drop for `overshoot` seconds, at the selection's own tokens per second."""
        rate = selection.tokens / selection.predicted_time if selection.predicted_time > 0 else 0
        return max(self.config.knapsack_quantum, math.ceil(overshoot * rate))


def _profile(decode_contexts: Sequence[int], queue: Sequence[Request]) -> PrefillQueueProfile:
    return PrefillQueueProfile(
        decode_contexts, [(r.remaining_prefill, r.num_computed) for r in queue]
    )
