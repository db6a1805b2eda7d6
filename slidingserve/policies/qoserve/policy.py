"""The QoServe baseline (ASPLOS 2026; also *Niyama*, arXiv 2503.22562), from SPEC §8.

Every iteration: relegate the requests that cannot meet their TTFT even at the full
prefill throughput; put the decodes first, by slack, up to the decode chunk size; choose
the batch total from a token grid by the smallest decode slack and QoServe's own predictor;
fill the rest with prefills in priority order.

Points of the published algorithm that had to be interpreted, and the choice made:

1. Deadlines. The priority and the relegation test use the deadline of the request's
   next token (`Request.next_deadline`) for a_i + L_ttft_i: the same for every request
   not yet preempted; for one preempted by recompute after emitting tokens, the deadline
   of the token it emits next.
2. Not started = nothing in the KV cache (`num_computed == 0`): every waiting request,
   including one that lost its cache to a preemption.
3. The heap is a sort at every iteration with the same key; ties by arrival, then by
   queue order (prefilling before waiting). Relegated requests keep that order among
   themselves, behind every other one. The protection flag g_i plays no part (QoServe
   has tiers, not protection).
4. Relegation is tested at the start of every `schedule` on every candidate, before
   sorting; a request is relegated at most once and stays relegated until it leaves.
   Its id is kept in the policy and dropped once the request is in no queue.
5. ρ_EMA is observed at every executed step, decode-only steps too (0 prefill tokens),
   as prefill tokens ÷ the step's duration (steps run back to back; a wait for arrivals
   is no step); a fast-forwarded run of n decode-only steps multiplies ρ by decay^n. ρ
   therefore sinks during long decode-only stretches and relegates eagerly after them,
   as the published rule implies.
6. Decodes are sorted by slack (their next deadline; ties in admission order) and the
   first min(decode chunk size, B_max) of them run; the others wait an iteration. The
   smallest slack is taken over the decodes that run.
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

from typing import TYPE_CHECKING

from slidingserve.core.batch import BatchShape
from slidingserve.core.plan import PlanBuilder
from slidingserve.policies.base import Policy
from slidingserve.policies.qoserve.chunking import (
    ChunkChoice,
    DecodeSelection,
    capped_grid,
    choose_total,
    is_low_memory,
    select_decodes,
)
from slidingserve.policies.qoserve.config import QoServeConfig
from slidingserve.policies.qoserve.predictor import batch_features, fit_qoserve_predictor
from slidingserve.policies.qoserve.priority import Relegation, ThroughputEma, prefill_order

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.plan import Plan
    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView
    from slidingserve.policies.base import IterationRecord, PolicyContext


class QoServePolicy(Policy):
    """QoServe: priority by deadline and remaining work, eager relegation, and a batch
    total chosen from a grid by the smallest decode slack (SPEC §8)."""

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
        self.throughput = ThroughputEma(config.initial_throughput, config.throughput_decay)

    def schedule(self, view: SchedulerView) -> Plan:
        """Decodes by slack, then prefills by priority up to the chosen total."""
        queue = self._prefill_queue(view)
        decodes = select_decodes(view.decoding, view.now, self.decode_limit)
        choice = self._choose_total(view, decodes, queue)
        budget = max(len(decodes.requests), choice.total_tokens)
        builder = PlanBuilder(view, min(budget, self.max_tokens))
        builder.add_decodes(decodes.requests)
        builder.add_prefills(queue)
        plan = builder.build(f"qoserve:{choice.reason}")
        if plan.chunks:
            plan.predicted_time = self.predictor.predict_shape(BatchShape.from_plan(plan))
        return plan

    def on_iteration_end(self, record: IterationRecord) -> None:
        """Observe the step's prefill throughput: its prefill tokens ÷ its duration (s)."""
        self.throughput.observe(record.shape.num_prefill_tokens, record.duration)

    def schedules_all_decodes(self, num_decoding: int) -> bool:
        """True only when every decode fits under the decode chunk size (and B_max)."""
        return num_decoding <= self.decode_limit

    def on_decode_run(self, durations: Sequence[float], num_decodes: int) -> None:
        """Each decode-only step observes 0 prefill tokens: ρ decays once per step."""
        self.throughput.observe_idle_steps(sum(1 for seconds in durations if seconds > 0))

    def _prefill_queue(self, view: SchedulerView) -> list[Request]:
        """Waiting and prefilling requests in priority order, after eager relegation."""
        self.relegation.forget_departed((view.waiting, view.running))
        candidates = view.prefill_candidates()
        if self.config.eager_relegation:
            self.relegation.relegate_hopeless(candidates, view.now, self.throughput.value)
        return prefill_order(candidates, self.relegation.ids, self.config.priority_weight)

    def _choose_total(
        self, view: SchedulerView, decodes: DecodeSelection, queue: list[Request]
    ) -> ChunkChoice:
        """The batch total (decodes included) for this iteration."""
        if not queue:
            return ChunkChoice(len(decodes.requests), "no-prefill")
        config = self.config
        low = is_low_memory(
            view.kv.num_free,
            view.kv.block_size,
            config.low_memory_divisor,
            config.low_memory_threshold,
        )
        num_decodes, head_context = len(decodes.requests), queue[0].num_computed

        def predict(total: int) -> float:
            x = batch_features(total, num_decodes, decodes.context, head_context)
            return self.predictor.predict(x)

        grid = self.low_memory_grid if low else self.grid
        choice = choose_total(grid, decodes.min_slack, predict, config.safety_factor, self.fallback)
        return choice._replace(reason=f"{choice.reason}:low-kv") if low else choice
