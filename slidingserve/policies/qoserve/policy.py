"""The QoServe baseline (ASPLOS 2026; also *Niyama*, arXiv 2503.22562), from docs/baselines.md.

Every iteration: relegate the requests that cannot meet their TTFT even at the full
prefill throughput; put the decodes first, by slack, up to the decode chunk size; choose
the batch total from a token grid by the smallest decode slack and QoServe's own predictor;
fill the rest with prefills in priority order.

Points of the published algorithm that had to be interpreted, and the choice made:

1. Deadlines. The priority and the relegation test use the deadline of the request's
   next token (`Request.next_deadline`) for a_i + L_ttft_i: the same for every request
   not yet preempted; for one preempted by recompute after emitting tokens, the deadline
   of the token it emits next.
2. Not started = nothing of it held in the KV cache (waiting): every waiting request,
   including one that lost its cache to a preemption or starts from a prefix-cache hit.
3. The heap is a sort at every iteration with the same key; ties by arrival, then by
   queue order (prefilling before waiting). Relegated requests keep that order among
   themselves, behind every other one. The protection flag g_i plays no part (QoServe
   has tiers, not protection).
4. Relegation follows the authors' fill loop: requests are taken from the heap in
   priority order, and each one the loop reaches (up to and including the first that
   finds the budget spent) is tested; a hopeless one is marked relegated and goes back
   into the heap behind every unrelegated request. Requests the loop does not reach are
   not tested in that iteration. A request is relegated at most once and stays
   relegated until it leaves; its id is dropped once the request is in no queue.
5. ρ_EMA follows the authors' rule: observed only after a step that had prefill tokens,
   as those tokens ÷ the time between the two `schedule` calls, which here is the
   step's duration (their engine calls the scheduler again as soon as a step ends, also
   when it then finds nothing to run); decode-only steps leave ρ unchanged, so a
   fast-forwarded decode run needs no hook.
6. Decodes are sorted by slack and the first min(decode chunk size, B_max) of them run;
   the others wait an iteration. The smallest slack is taken over the decodes that run.
   Slack is read as the authors' `_get_TBT_deadline` does (`reanchor_late_decodes`): a
   request whose first token came late has its TBT deadlines anchored at that token's
   actual time (see `chunking.decode_deadline`). Two readings help the baseline: token
   k+1 is due k × L_tbt after the anchor, the project's deadline (the authors' index,
   len(output_token_ids) + 1, would give one L_tbt more and plan batches that overrun
   it); and their sort key (0, −slack) puts the largest slack first, which matters only
   with more decodes than the decode chunk size (never with max_num_seqs ≤ 256): the
   most urgent go first here.
7. The grid totals count the decodes: the prefill budget is total − decodes (none when
   the decodes alone reach the total). Grid values above B_max (`max_batch_tokens`, at
   most the engine's limit) are lowered to it, so 2552 becomes 2048 by default.
8. Without decodes there is no TBT limit: the largest grid value, which is what the
   binary search gives with an infinite slack. With a decode already late (slack ≤ 0):
   the fallback of 128 tokens. When no grid value fits: the smallest grid value.
9. The low-memory test reads the free KV blocks at the start of the iteration.
10. Predictor: features of a timed batch are (total, prefill, decode tokens, Σ_D u_i,
    Σ_P u_i), u_i being the tokens cached before the step; a candidate batch is predicted
    at the grid total with the head of the priority order's cached tokens as its prefill
    context, even if the queue holds fewer tokens. The two models are fitted with the
    project's robust non-negative least squares (`fit_linear`) rather than plain least
    squares; a side of the 512-token split without samples uses the other side's model.
    The split can make predictions jump at 512 tokens; the binary search assumes a
    monotone prediction and simply stops where it finds one, like the original.
11. End-to-end tiers: every request here has a TTFT and a TBT SLO, so the e2e → TTFT
    conversion is only the helper `ttft_from_e2e`.
12. Engine limits (batch size, token budget, KV blocks, vLLM-style admission) are those
    of `PlanBuilder`; the policy never preempts, the engine's KV preemption applies.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from slidingserve.core.plan import PlanBuilder
from slidingserve.core.request import next_deadlines, remaining_prefills
from slidingserve.policies.base import Policy
from slidingserve.policies.common import PrefillRateEma, Relegation, is_low_memory
from slidingserve.policies.qoserve.chunking import (
    ChunkChoice,
    DecodeSelection,
    capped_grid,
    choose_total,
    select_decodes,
)
from slidingserve.policies.qoserve.config import QoServeConfig
from slidingserve.policies.qoserve.predictor import (
    batch_features,
    fit_from_samples,
    fit_qoserve_predictor,
)
from slidingserve.policies.qoserve.priority import priority_key

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from slidingserve.core.plan import Plan
    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView
    from slidingserve.policies.base import IterationRecord, PolicyContext
    from slidingserve.predictor import Sample


_Entry = tuple[tuple[bool, float, float], int, "Request"]
"""A heap entry: (priority key, queue index to break ties, request)."""


class QoServePolicy(Policy):
    """QoServe: priority by deadline and remaining work, eager relegation, and a batch
    total chosen from a grid by the smallest decode slack (docs/baselines.md)."""

    name = "qoserve"
    config_type = QoServeConfig
    needs_profile = True
    config: QoServeConfig

    def __init__(self, config: QoServeConfig, context: PolicyContext) -> None:
        super().__init__(config, context)
        if not context.profile:
            raise ValueError(
                f"policy {self.name!r} fits its own batch-time predictor and needs timed "
                "batches (PolicyContext.profile); none were given"
            )
        self.predictor = fit_qoserve_predictor(context.profile, config.predictor_split)
        limit = context.limits.max_num_batched_tokens
        self.max_tokens = min(config.max_batch_tokens or limit, limit)
        self.grid = capped_grid(config.token_grid, self.max_tokens)
        self.low_memory_grid = capped_grid(config.low_memory_grid, self.max_tokens)
        self.decode_limit = min(config.decode_chunk_size, self.max_tokens)
        self.fallback = min(config.fallback_chunk, self.max_tokens)
        self.relegation = Relegation()
        self.throughput = PrefillRateEma(config.initial_throughput, config.throughput_decay)

    def schedule(self, view: SchedulerView) -> Plan:
        """Decodes by slack, then prefills by priority up to the chosen total."""
        self.relegation.forget_departed((view.waiting, view.running))
        heap = self._prefill_heap(view)
        decodes = select_decodes(
            view.decoding, view.now, self.decode_limit, self.config.reanchor_late_decodes
        )
        choice = self._choose_total(view, decodes, heap[0][2] if heap else None)
        budget = max(len(decodes.requests), choice.total_tokens)
        builder = PlanBuilder(view, min(budget, self.max_tokens))
        builder.add_decodes(decodes.requests)
        self._fill(builder, heap, view.now)
        plan = builder.build(f"qoserve:{choice.reason}")
        if plan.chunks:
            plan.predicted_time = self.predictor.predict_shape(builder.shape())
        return plan

    def on_iteration_end(self, record: IterationRecord) -> None:
        """Observe the step's prefill throughput: its prefill tokens ÷ its duration (s);
        a step without prefill tokens is not observed (the authors' rule)."""
        self.throughput.observe(record.shape.num_prefill_tokens, record.duration)

    def refit(self, samples: Sequence[Sample]) -> None:
        """Refit both linear models to measured steps and swap them in."""
        self.predictor = fit_from_samples(samples, self.config.predictor_split)

    def relegated_ids(self) -> Collection[str]:
        """Ids of the requests relegated and still in a queue (`ReportsRelegations`)."""
        return self.relegation.ids

    def schedules_all_decodes(self, num_decoding: int) -> bool:
        """True only when every decode fits under the decode chunk size (and B_max)."""
        return num_decoding <= self.decode_limit

    def _prefill_heap(self, view: SchedulerView) -> list[_Entry]:
        """Waiting and prefilling requests as QoServe's heap (ties by queue order)."""
        weight = self.config.priority_weight
        ids = self.relegation.ids
        candidates = view.prefill_candidates()
        # priority_key, with each deadline and remaining prefill read in one pass
        heap = [
            ((r.request_id in ids, deadline + weight * remaining, r.arrival), index, r)
            for index, (r, deadline, remaining) in enumerate(
                zip(
                    candidates,
                    next_deadlines(candidates),
                    remaining_prefills(candidates),
                    strict=True,
                )
            )
        ]
        heapq.heapify(heap)
        return heap

    def _fill(self, builder: PlanBuilder, heap: list[_Entry], now: float) -> None:
        """The authors' fill loop: pop by priority; relegate a hopeless request the loop
        reaches and push it back; otherwise give it what the budget allows; stop once a
        reached request finds the budget spent."""
        rho = self.throughput.value
        weight = self.config.priority_weight
        while heap:
            _, index, request = heapq.heappop(heap)
            if self.config.eager_relegation and self.relegation.relegate_if_hopeless(
                request, now, rho
            ):
                key = priority_key(request, self.relegation.ids, weight)
                heapq.heappush(heap, (key, index, request))
                continue
            if builder.tokens_left == 0 or builder.seats_left == 0:
                return
            builder.add(request, request.remaining_prefill)

    def _choose_total(
        self, view: SchedulerView, decodes: DecodeSelection, head: Request | None
    ) -> ChunkChoice:
        """The batch total (decodes included) for this iteration; `head` is the top of the
        prefill heap, whose cached tokens stand for the batch's prefill context."""
        if head is None:
            return ChunkChoice(len(decodes.requests), "no-prefill")
        config = self.config
        low = is_low_memory(
            view.kv.num_free,
            view.kv.block_size,
            config.low_memory_divisor,
            config.low_memory_threshold,
        )
        num_decodes, head_context = len(decodes.requests), head.num_computed

        def predict(total: int) -> float:
            x = batch_features(total, num_decodes, decodes.context, head_context)
            return self.predictor.predict(x)

        grid = self.low_memory_grid if low else self.grid
        choice = choose_total(grid, decodes.min_slack, predict, config.safety_factor, self.fallback)
        return choice._replace(reason=f"{choice.reason}:low-kv") if low else choice
