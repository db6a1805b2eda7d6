"""The SCORPIO baseline (arXiv 2505.23022), as the authors' code runs it.

Source: github.com/MisterBrookT/Scorpio, `vllm/core/scheduler.py` (`Scheduler.schedule`,
`_reject_ttft_unattainable`, `_get_ldf_ordered_requests`, `_schedule_default`,
`_schedule_prefill`, `_tpot_admission_control`, `_pred_tpot`, `_pred_waiting_time`,
`_schedule_running`, `GlobalTPOTState`), `vllm/sequence.py` (`ttft_deadline`, the credit
of a `SequenceGroup`), `vllm/engine/llm_engine.py` (a request's TPOT leaves the state when it
finishes) and `vllm/engine/arg_utils.py` (chunked prefill stays off). Their runs used the
policy string `ldf_rej_gate1.3_credit` and max_num_batched_tokens = 1024.

Every iteration (`schedule`):

1. Rejection: waiting requests in deadline order, each charged the predicted time to
   prefill every prompt token ahead of it and its own; one whose TTFT deadline comes
   before now + that time + 50 ms is refused (`Plan.refused`: a violation, like our
   admission control's). A refused request's tokens are not charged to the ones after it.
2. The waiting queue in least-deadline-first order (a_i + L_ttft_i).
3. Prefill step (vLLM V0 without chunked prefill): take waiting requests in that order,
   each whole, while the budget, the batch-size cap and the KV cache allow, each one first
   through the TPOT gate: with the candidate admitted, the virtual batch size
   VBS = Σ_j min TPOT / TPOT_j over admitted requests, and one decode step of VBS requests
   at the average context (Σ admitted lengths + candidates' prompts) / (admitted + 1) +
   output_len / 2 must take, × 1.3, less than 0.99 × the tightest TPOT. The first request
   that fails, or does not fit, ends admission for the step (head of line). If any prefill
   was scheduled, the step runs prefills only.
4. Otherwise a decode step: every decode at the tightest TPOT among admitted requests runs;
   a looser one earns min TPOT / its TPOT credit and runs when its credit reaches 1.

Predictors. The authors fit two models of their own: prefill time as a linear function of
the tokens waiting (`_pred_waiting_time`, one step's fit applied to the whole queue) and
decode step time as a*B*L + b*B + c*L + d over batch size B and average length L
(`_pred_tpot`). Here both questions go to the batch-latency predictor every planning policy
gets (`slidingserve`'s): the wait for n prompt tokens is the predicted time of ⌊n/B⌋ full
prefill-only batches of B tokens plus one of the remainder (B the token budget); a decode
step of a fractional VBS is the linear interpolation between ⌊VBS⌋ and ⌈VBS⌉ decodes of
that context (exact for a linear model, as theirs is). Their output-length predictor (a
fine-tuned OPT-125M, per request) has no counterpart: no policy here is told output
lengths, so every candidate is assumed to produce `output_len` tokens (an option).

Points where the code is ambiguous or would hurt SCORPIO, and the reading taken (the one
that helps it):

1. Rejection order: the authors walk `self.waiting` before re-sorting it, i.e. last
   step's deadline order with new arrivals at the back. Here it walks the deadline order
   of this step, the order requests will be served in.
2. Preempted requests: the authors' waiting queue holds requests preempted by recompute,
   and their `ttft_deadline` is long past, so the rejection would abort them mid-output.
   Here one that has emitted a token is never refused (its tokens still count as ahead of
   the others, and it still sorts first).
3. The TPOT state: the authors add a request's TPOT when it is admitted and remove it when
   it finishes, so a preempted and re-admitted request is counted twice for ever after.
   Here the state is rebuilt from the running requests at each step.
4. The gate's inter-iteration shortcut (refuse without computing when the last candidate
   failed, had a TPOT at least as loose and nothing left) is an approximation for speed;
   the gate is computed every time here.
5. With nothing running and nothing admitted in the step, the gate admits (VBS = 1: the
   candidate's own TPOT). The authors' engine would idle until the rejection removes the
   request; the simulator cannot idle with work queued, and holding back the only request
   helps nobody.
6. Prompts longer than the budget: vLLM V0 without chunking ignores them (they never run).
   Here one that heads the queue starts alone in a step, the budget's worth of it, and its
   prefill continues first in the following steps, without decodes, as the rest of a
   prefill step. A prompt is otherwise never split.
7. Credit: `credit ≥ 1` with a 1e-9 slack (floating point); a decode exactly at the lowest
   TPOT always runs. If no decode would run (only possible while a request is still
   prefilling and holds the lowest TPOT), all run.
8. Preemption is the engine's (vLLM's: the newest running request, by recompute), as in
   the authors' V0 engine; the policy never preempts.
9. Protection (g_i) plays no part: SCORPIO has none.

`chunked_prefill = True` runs the authors' other path (`_schedule_chunked_prefill`):
decodes first, with credits, then ongoing prefills, then new ones in deadline order through
the gate, each taking what the budget allows. The authors did not run it (their chunked path
drops the requests the credit check delays); credits apply to decodes only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from slidingserve.core.batch import BatchShape
from slidingserve.core.plan import PlanBuilder
from slidingserve.core.request import remaining_prefills
from slidingserve.policies.base import Policy
from slidingserve.policies.common import planning_predictor, token_budget
from slidingserve.policies.scorpio.config import ScorpioConfig
from slidingserve.policies.scorpio.guards import (
    CreditLedger,
    OutputLengthMean,
    TpotState,
    ldf_order,
)
from slidingserve.predictor import batch_features

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.plan import Plan
    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView
    from slidingserve.policies.base import PolicyContext


class ScorpioPolicy(Policy):
    """SCORPIO: TTFT guard (deadline order, rejection) and TPOT guard (VBS admission gate,
    credit-based batching) on vLLM V0's scheduler."""

    config: ScorpioConfig
    config_type = ScorpioConfig
    name = "scorpio"
    needs_predictor = True  # plans with the same batch-latency predictor as `slidingserve`

    def __init__(self, config: ScorpioConfig, context: PolicyContext) -> None:
        super().__init__(config, context)
        self.model = planning_predictor(context, config.features, self.name)
        self.max_tokens = token_budget(config.max_batch_tokens, context.limits)
        self.ledger = CreditLedger()
        self.output_len = OutputLengthMean(config.output_len)
        self.uniform_tpot = True  # every admitted request has one TPOT (after the last plan)
        self.num_refused = 0  # requests refused by the TTFT guard
        self.num_gated = 0  # steps whose admission the TPOT gate stopped
        # Predicted seconds of a prefill-only batch, by its tokens (at most B_max keys): the
        # rejection asks for one per waiting request at every step, and the model is fixed
        self._prefill_times: dict[int, float] = {}

    # -- the iteration ------------------------------------------------------------------

    def schedule(self, view: SchedulerView) -> Plan:
        config = self.config
        if config.learn_output_len:
            self.output_len.observe(view.running, view.waiting)
        if config.credit_batching:
            self.ledger.forget_departed((view.running, view.waiting))
        queue = ldf_order(view.waiting)
        refused = self.unattainable(view, queue) if config.reject_unattainable else []
        if refused:
            view = view.without(refused)
            self.num_refused += len(refused)
            gone = set(map(id, refused))
            queue = [r for r in queue if id(r) not in gone]  # still in deadline order
        state = TpotState(r.slo.tbt for r in view.running)
        if config.chunked_prefill:
            plan = self._chunked_step(view, queue, state)
        else:
            plan = self._default_step(view, queue, state)
        self.uniform_tpot = state.uniform
        plan.refused = refused
        if plan.chunks:
            plan.predicted_time = self._predict(BatchShape.from_plan(plan))
        return plan

    def schedules_all_decodes(self, num_decoding: int) -> bool:
        """With credits, only when every running request has the same TPOT."""
        return not self.config.credit_batching or self.uniform_tpot

    def _default_step(self, view: SchedulerView, queue: list[Request], state: TpotState) -> Plan:
        """vLLM V0 without chunked prefill: a prefill-only step if any prefill can be
        scheduled, else a decode-only step."""
        builder = PlanBuilder(view, self.max_tokens)
        for request in view.prefilling:  # a prompt longer than the budget, continuing
            builder.add(request, request.remaining_prefill)
        self._admit(builder, view, queue, state, whole=True)
        if builder.chunks:
            return builder.build("scorpio:prefill")
        builder.add_decodes(self._decodes(view, state))
        return builder.build("scorpio:decode")

    def _chunked_step(self, view: SchedulerView, queue: list[Request], state: TpotState) -> Plan:
        """vLLM V0 with chunked prefill: decodes, ongoing prefills, then new prefills."""
        builder = PlanBuilder(view, self.max_tokens)
        builder.add_decodes(self._decodes(view, state))
        builder.add_prefills(view.prefilling)
        self._admit(builder, view, queue, state, whole=False)
        return builder.build("scorpio:chunked")

    def _decodes(self, view: SchedulerView, state: TpotState) -> Sequence[Request]:
        """The decodes of this step: all, or those the credits allow."""
        decoding = view.decoding
        if not self.config.credit_batching or state.uniform:
            return decoding
        chosen = self.ledger.select(decoding, state.lowest)
        return chosen or decoding

    def _admit(
        self,
        builder: PlanBuilder,
        view: SchedulerView,
        queue: Sequence[Request],
        state: TpotState,
        whole: bool,
    ) -> None:
        """`_schedule_prefill`: candidates in deadline order through the TPOT gate until
        one fails or does not fit; `whole`: a prompt is never split (unless it alone is
        longer than the budget and the step is empty)."""
        num_running = view.num_running
        total_len = sum(r.prompt_len + r.num_generated for r in view.running)
        for request in queue:
            total_len += request.prompt_len + request.num_generated
            if self.config.tpot_admission and not self.meets_tpot(
                state, request, total_len, num_running
            ):
                self.num_gated += 1
                return
            want = request.remaining_prefill
            if builder.tokens_left == 0:
                return
            if whole and want > builder.tokens_left and builder.chunks:
                return
            if builder.add(request, want) == 0:
                return
            num_running += 1
            state.add(request.slo.tbt)

    # -- the guards -----------------------------------------------------------------------

    def unattainable(
        self, view: SchedulerView, order: Sequence[Request] | None = None
    ) -> list[Request]:
        """`_reject_ttft_unattainable`: waiting requests in deadline order whose TTFT
        deadline is before now + the predicted time to prefill the prompts ahead of them
        (ongoing prefills first) and their own + `ttft_margin`. A refused request's tokens
        are not charged to later ones; one preempted after its first token is never refused.
        `order`: the waiting requests in deadline order, when the caller has sorted them."""
        if not view.waiting:
            return []
        ahead = sum(r.remaining_prefill for r in view.prefilling)
        refused: list[Request] = []
        margin, now = self.config.ttft_margin, view.now
        full = self._prefill_time(self.max_tokens)
        queue = ldf_order(view.waiting) if order is None else order
        for request, remaining in zip(queue, remaining_prefills(queue), strict=True):
            tokens = ahead + remaining
            if not request.num_generated:
                wait = self.prefill_wait(tokens, full)
                # `Request.ttft_deadline`, the same float, without a call per request
                if now + wait + margin > request.arrival + request.slo.ttft:
                    refused.append(request)
                    continue
            ahead = tokens
        return refused

    def meets_tpot(
        self, state: TpotState, candidate: Request, total_len: int, num_running: int
    ) -> bool:
        """`_tpot_admission_control`: with `candidate` admitted, a decode step of the
        virtual batch size at the average length (`total_len` over the admitted requests
        and the candidate) plus half the assumed output, × the inefficiency factor, is
        below the tightest TPOT × the conservative factor. Always true with nothing
        admitted (reading 5)."""
        if num_running == 0:
            return True
        config = self.config
        tpot = candidate.slo.tbt
        vbs = state.virtual_batch_size(tpot)
        context = total_len / (num_running + 1) + self.output_len.value / 2
        step = self.decode_time(vbs, context)
        return step * config.inefficiency_factor < min(state.lowest, tpot) * (
            config.conservative_factor
        )

    # -- the predictor --------------------------------------------------------------------

    def prefill_wait(self, tokens: int, full: float | None = None) -> float:
        """Predicted time to prefill `tokens` prompt tokens in prefill-only batches of the
        budget, seconds: ⌊tokens / B⌋ full batches and one of the rest. `full`: the time
        of a full batch, when the caller has read it."""
        if tokens <= 0:
            return 0.0
        batches, rest = divmod(tokens, self.max_tokens)
        if full is None:
            full = self._prefill_time(self.max_tokens)
        return batches * full + (self._prefill_time(rest) if rest else 0.0)

    def decode_time(self, batch_size: float, context: float) -> float:
        """Predicted time of a decode-only step of `batch_size` (≥ 1, fractional allowed)
        requests with `context` cached tokens each, seconds."""
        low = max(1, math.floor(batch_size))
        high = max(low, math.ceil(batch_size))
        length = round(context)
        t_low = self._predict(BatchShape((length,) * low, ()))
        if high == low:
            return t_low
        t_high = self._predict(BatchShape((length,) * high, ()))
        return t_low + (batch_size - low) * (t_high - t_low)

    def _prefill_time(self, tokens: int) -> float:
        seconds = self._prefill_times.get(tokens)
        if seconds is None:
            seconds = self._predict(BatchShape((), ((tokens, 0),)))
            self._prefill_times[tokens] = seconds
        return seconds

    def _predict(self, shape: BatchShape) -> float:
        return self.model.predict_features(*batch_features(shape))
