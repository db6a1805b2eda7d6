"""The SlidingServe policy (docs/design.md §2): order (and triage) the prefill queue, check
for risk, then construct or chunk; the named compositions it runs are in
`compositions.py`."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from itertools import compress
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from slidingserve.core.batch import BatchShape
from slidingserve.core.plan import Plan, PlanBuilder
from slidingserve.core.queue_fit import AdmissionQueue, QueuedPrefill, admit_in_turn
from slidingserve.core.request import WAITING, Phase
from slidingserve.policies.base import Policy, PolicyContext
from slidingserve.policies.common import (
    PrefillRateEma,
    cannot_finish_prefill,
    is_low_memory,
    planning_predictor,
    token_budget,
)
from slidingserve.policies.output_lengths import SHAREGPT_MEAN_OUTPUT, OutputLengths
from slidingserve.policies.slidingserve.admission import DecodeRoom, StepOverhead
from slidingserve.policies.slidingserve.budget import budget_windows, rounded_total, split_budget
from slidingserve.policies.slidingserve.chunker import ChunkChoice, QueueTimes, queue_head
from slidingserve.policies.slidingserve.compositions import DESIGN, PAPER, SC_EDF, SC_MLPS
from slidingserve.policies.slidingserve.config import SlidingServeConfig
from slidingserve.policies.slidingserve.constructor import (
    BatchConstructor,
    Selection,
    risky_prefills,
)
from slidingserve.policies.slidingserve.headroom import (
    TIGHT_CACHE_TOKENS,
    TIGHT_DECODE_SHARE,
    cache_is_tight,
    with_headroom,
)
from slidingserve.policies.slidingserve.kv_forecast import forecast_startable
from slidingserve.policies.slidingserve.options import compose
from slidingserve.policies.slidingserve.ordering import EdfOrder, edf_queue, sort_queue
from slidingserve.policies.slidingserve.release import (
    DecodeCosts,
    PromptDemand,
    bounding_decodes,
)
from slidingserve.policies.slidingserve.stats import DecisionRecord, Stopwatch, TimedModel
from slidingserve.policies.slidingserve.triage import QueueTriage, RateSource, Triage
from slidingserve.policies.slidingserve.victims import (
    lost_first_victim,
    may_preempt,
    most_slack_victim,
    order_for_preemption,
    put_lost_last,
)
from slidingserve.policies.slidingserve.violated import ViolatedRequests
from slidingserve.policies.slidingserve.whole_prefills import startable_queue
from slidingserve.predictor import PrefillQueueProfile

MAX_DECISIONS = 1_000_000
COST_PROBE = 256  # prefill tokens the release's per-token cost is measured with
MIN_TYPICAL_CONTEXT = 128  # tokens a new request is taken to decode over, with none queued
COST_FLOOR = 1e-7  # seconds: the least a prefill token is taken to cost
FALLBACK_SUFFIX = ":constructor-fallback"  # on the chunker's path when it replaced a selection

if TYPE_CHECKING:
    from slidingserve.core.request import Request
    from slidingserve.core.view import SchedulerView
    from slidingserve.policies.base import IterationRecord


class Construction(NamedTuple):
    """What the BatchConstructor step hands `_decide`."""

    plan: Plan | None  # the constructor's plan; None: the SlidingChunker decides
    fallback: bool  # a selection was made but the engine's limits could not grant it in full


NO_CONSTRUCTION = Construction(None, False)


class Decision(NamedTuple):
    """What `_decide` planned, and the step's view it planned on, before the KV headroom
    (violated decodes set aside or not)."""

    plan: Plan
    view: SchedulerView


class SlidingServePolicy(Policy):
    """The policy family, one composition of parts (`config.py`): the ordering of the
    prefill queue, an optional triage of it, the violation checker and BatchConstructor
    (when the composition has one) if a prefill is at risk, else the SlidingChunker's
    budget. As `slidingserve` it runs `DESIGN`; each subclass names its own composition."""

    name = "slidingserve"
    config_type = SlidingServeConfig
    needs_predictor = True
    composition: ClassVar[SlidingServeConfig] = DESIGN  # what the name runs, before options
    config: SlidingServeConfig

    def __init__(self, config: SlidingServeConfig, context: PolicyContext) -> None:
        super().__init__(config, context)
        predictor = planning_predictor(context, config.features, self.name)
        self.max_tokens = token_budget(config.max_batch_tokens, context.limits)
        # B_max of the step being planned: `max_tokens`, or less under `low_memory_cap`
        self.step_tokens = self.max_tokens
        self.model = TimedModel(predictor)
        # ρ_t, prefill tokens per second, seeded from the predictor
        self.rate = PrefillRateEma(self._initial_throughput(), config.throughput_decay)
        # Bounded: a server runs for days; the last MAX_DECISIONS iterations are kept.
        self.decisions: deque[DecisionRecord] = deque(maxlen=MAX_DECISIONS)
        # Iterations whose knapsack selection PlanBuilder could not grant in full (KV blocks,
        # admissions, batch-size cap), so the chunker planned them instead.
        self.constructor_fallbacks = 0
        self.triage = QueueTriage(config.triage) if config.triage else None
        # Arrivals of prompt tokens, for the decode release's forecast
        self.demand = PromptDemand()
        # Output lengths of the requests that have left: the decode release's horizon and
        # the KV forecast's
        self.outputs = OutputLengths(SHAREGPT_MEAN_OUTPUT)
        self._last_step = -math.inf  # `now` of the latest step: later arrivals are new
        # what `_unfit` saw last; before the first step, an empty queue at the seed rate
        self._admission_queue = AdmissionQueue(0.0, self.rate.value / config.budget.time_margin, ())
        self.violated = ViolatedRequests()  # read with `yield_violated`
        self.overhead = StepOverhead()  # the engine's time between steps, for `_unfit`
        budget = config.budget
        self._reads_costs = bool(
            budget.iteration_cap or budget.release_decodes or budget.tight_cache_cap
        )
        self.constructor: BatchConstructor | None = None
        if config.constructor is not None:
            self.constructor = BatchConstructor(self.model, config.constructor)

    @classmethod
    def from_options(
        cls, context: PolicyContext, options: Mapping[str, Any] | None = None
    ) -> Policy:
        """`composition` changed by the flat `options` (`options.compose`)."""
        return cls(compose(cls.composition, options or {}, cls.name), context)

    def schedule(self, view: SchedulerView) -> Plan:
        if self.config.low_memory_cap:
            self._cap_step_tokens(view)
        if self.config.budget.release_decodes:
            self.demand.observe(view.now, view.waiting)
        if self.config.budget.release_decodes or self.config.kv_forecast:
            self.outputs.observe(view.running, view.waiting)
        watch = Stopwatch(self.model, timing=self.config.record_decisions)
        if self.config.admission_test == "queue":
            self.overhead.note_view(view)  # before any refusal: what the engine had
        refused = self._hopeless(view) if self.config.admission else []
        if refused:
            view = view.without(refused)
        triage = None  # the queue's triage, when the admission test already made it
        if self.config.admission_test == "queue":
            unfit, triage = self._unfit(view)
            if unfit:
                refused += unfit
                view = view.without(unfit)
        self._last_step = view.now
        unyielded = None  # the view before violated decodes yielded, when they did
        if self.config.yield_violated:
            yielded = self.violated.yielding(view)
            if yielded is not view:
                unyielded, view = view, yielded
        plan, view = self._decide(view, watch, triage, unyielded)
        self._order_victims_last(plan, view)
        plan.refused = refused
        if plan.predicted_time is None and plan:  # the parts predict what they build
            plan.predicted_time = self.model.predict_shape(BatchShape.from_plan(plan))
        if self.config.record_decisions:
            record = watch.record(
                view.now, plan.path, plan.predicted_time, plan.total_tokens, len(view.decoding)
            )
            self.decisions.append(record)
        return plan

    def _cap_step_tokens(self, view: SchedulerView) -> None:
        """`step_tokens` for the step of `view`: `low_memory_cap` while QoServe's low-memory
        test holds on its free KV blocks, else `max_tokens`; every batch the step plans or
        weighs (the chunker's, the BatchConstructor's, the candidate batch) stays within
        it. The prefill rates the admission tests and a predicted-rate triage
        assume (`_initial_throughput`, `_predicted_rate`) keep `max_tokens`: they measure
        what one TBT of iterations can prefill, and the cap's smaller iterations fit more
        of them into it."""
        kv = view.kv
        self.step_tokens = self.max_tokens
        if is_low_memory(kv.num_free, kv.block_size):
            self.step_tokens = min(self.max_tokens, self.config.low_memory_cap)

    def preemption_victim(self, running: Sequence[Request], now: float) -> Request:
        config = self.config
        if config.preempt_lost_first:
            return lost_first_victim(running, now, config.preempt_most_slack)
        if config.preempt_most_slack:
            return most_slack_victim(running)
        return super().preemption_victim(running, now)

    def _order_victims_last(self, plan: Plan, view: SchedulerView) -> None:
        """Order `plan` so that vLLM, which preempts from the tail of its running list (the
        plan's order), takes `preemption_victim`'s victims: the lost requests last with
        `preempt_lost_first`; with `preempt_most_slack`, at a step where the cache may run
        short, the others by slack as well (victims.py)."""
        config = self.config
        if config.preempt_most_slack and may_preempt(view):
            order_for_preemption(plan, view.now, config.preempt_lost_first)
        elif config.preempt_lost_first:
            put_lost_last(plan, view.now)

    def _with_headroom(self, view: SchedulerView) -> SchedulerView:
        if self.config.kv_headroom:
            return with_headroom(view, self.config.kv_headroom)
        return view

    def _decide(
        self,
        step_view: SchedulerView,
        watch: Stopwatch,
        triage: Triage | None,
        unyielded: SchedulerView | None = None,
    ) -> Decision:
        """Order (and triage) the queue, unless `triage` is that of `step_view` already; the
        BatchConstructor's plan if a prefill is at risk and its selection can be granted in
        full; else the SlidingChunker's; each on `step_view` with the KV headroom kept.
        `unyielded`: `step_view` before violated decodes yielded to live requests, planned
        instead when the start rules let none of those start and all its decodes fit in the
        tightest TBT of those on time, or none is on time (`_violated_may_run`)."""
        view = self._with_headroom(step_view)
        queue = watch.run("order", lambda: self._sorted_queue(view, triage))
        if self.config.whole_prefills or self.config.kv_forecast:
            queue = self._startable(queue, view)
            if (
                unyielded is not None
                and not self.violated.any_live(queue)
                and self._violated_may_run(unyielded)
            ):
                return self._decide(unyielded, watch, triage)
        budget = self.config.budget
        contexts = [r.num_computed for r in view.decoding]  # u_i of each decode
        costs = self._decode_costs(contexts) if contexts and self._reads_costs else None
        decode_time = costs.decode_time if costs else 0.0
        bounding = None
        if costs and budget.release_decodes and queue:
            bounding = bounding_decodes(
                view.decoding,
                queue,
                view.now,
                budget.time_margin,
                costs,
                self.demand,
                self.outputs,
                budget.release_decodes,
            )
        tight = self._tight_cap_applies(view, decode_time)
        horizons = budget_windows(budget, view.decoding, view.now, decode_time, bounding, tight)
        construction = NO_CONSTRUCTION
        constructor = self.constructor
        if constructor is not None and queue:
            construction = watch.run(
                "constructor",
                lambda: self._construct(constructor, view, queue, contexts, horizons[0]),
            )
        if construction.plan is not None:
            return Decision(construction.plan, step_view)
        known_time = costs.decode_time if costs else None
        plan = watch.run(
            "chunker", lambda: self._chunk(view, queue, contexts, horizons, known_time)
        )
        if construction.fallback:
            self.constructor_fallbacks += 1
            plan.path += FALLBACK_SUFFIX
        return Decision(plan, step_view)

    def _violated_may_run(self, unyielded: SchedulerView) -> bool:
        """Whether the violated decodes that yielded in `unyielded` run after all, where
        the start rules let no live request start: while no decode on time runs, or all
        its decodes together are predicted to fit in the tightest TBT of those on time, so
        that finishing the violated ones keeps the others at their TBT's pace
        (violated.py)."""
        decoding = unyielded.decoding
        violated = self.violated
        live_tbts = [r.slo.tbt for r in decoding if r.request_id not in violated]
        if not live_tbts:
            return True
        contexts = tuple(r.num_computed for r in decoding)
        return self.model.predict_shape(BatchShape(contexts, ())) <= min(live_tbts)

    def _startable(self, queue: list[Request], view: SchedulerView) -> list[Request]:
        """`queue` without the waiting requests the start rules keep from starting this
        step (`whole_prefills`, `kv_forecast`)."""
        if self.config.whole_prefills:
            queue = startable_queue(queue, view)
        if self.config.kv_forecast:
            queue = forecast_startable(queue, view, self.outputs, self.config.kv_forecast)
        return queue

    def _tight_cap_applies(self, view: SchedulerView, decode_time: float) -> bool:
        """Whether `tight_cache_cap` is the cap in force at this step: it is set, the KV
        cache is tight (`headroom.cache_is_tight`), and the decodes alone (`decode_time`,
        predicted) take at most `TIGHT_DECODE_SHARE` of the tightest TBT. The cache is
        tested first: it is seldom tight, and the TBTs take a pass over the decodes."""
        return (
            bool(self.config.budget.tight_cache_cap)
            and bool(view.decoding)
            and cache_is_tight(view, max(self.config.kv_headroom, TIGHT_CACHE_TOKENS))
            and decode_time <= TIGHT_DECODE_SHARE * min(r.slo.tbt for r in view.decoding)
        )

    def _decode_costs(self, contexts: list[int]) -> DecodeCosts:
        """The predicted time of the decodes alone (read by `iteration_cap`) and the cost of
        a prefill token beside them (read by the decode release); `contexts`: u_i of each
        decode."""
        decode_time = self.model.predict_shape(BatchShape(tuple(contexts), ()))
        per_token = COST_FLOOR
        if self.config.budget.release_decodes:
            probe = self.model.predict_shape(BatchShape(tuple(contexts), ((COST_PROBE, 0),)))
            per_token = max(COST_FLOOR, (probe - decode_time) / COST_PROBE)
        return DecodeCosts(decode_time, per_token, self.step_tokens)

    def on_iteration_end(self, record: IterationRecord) -> None:
        """Fold the iteration's prefill throughput into the EMA ρ_t (and, for the
        queue-aware admission test, its time outside the model into `overhead`)."""
        self.rate.observe(record.shape.num_prefill_tokens, record.duration)
        if self.config.admission_test == "queue":
            self.overhead.observe(record)

    def on_decode_run(self, durations: Sequence[float], num_decodes: int) -> None:
        """A fast-forwarded run of decode-only steps: back to back, no overhead between
        them, and the next record does not follow the last one."""
        self.overhead.skip()

    def _initial_throughput(self) -> float:
        """ρ_0 from the predictor: tokens per second of a full prefill-only batch."""
        seconds = self.model.predict_shape(BatchShape((), ((self.max_tokens, 0),)))
        return self.max_tokens / seconds if seconds > 0 else 1.0

    def admission_rate(self) -> float | None:
        """The prefill rate `_hopeless` assumes (`ControlsAdmission`), None with admission
        control off."""
        return self._initial_throughput() if self.config.admission else None

    def _hopeless(self, view: SchedulerView) -> list[Request]:
        """Admission control: waiting requests that have emitted nothing and would miss their
        first-token deadline even if their whole prompt ran next, alone, in full batches
        (the predictor's best prefill rate, decodes ignored: an optimistic test, so a
        request is refused only when nothing could save it). Protected ones are kept. Under
        `admission_test=queue` this catches the requests admitted that the engine turned
        out too slow for: refused once nothing could save them, not served late."""
        rate = self._initial_throughput()
        return [
            r
            for r in view.waiting
            if not r.protected and not r.num_generated and cannot_finish_prefill(r, view.now, rate)
        ]

    def admission_queue(self) -> AdmissionQueue | None:
        """The queue the queue-aware admission test sees (`ControlsAdmission`), as of the
        latest step; None unless `admission_test=queue`."""
        if self.config.admission_test != "queue":
            return None
        return self._admission_queue

    def _unfit(self, view: SchedulerView) -> tuple[list[Request], Triage | None]:
        """The queue-aware admission test: the requests arrived since the last step (not
        protected, nothing computed) that do not fit, in deadline order, behind the live
        requests the ordering and triage keep among the others, at the rate of
        `_admission_queue_rate` ÷ the budget's `time_margin`, the margin the budget keeps on
        the decode slack, × the share of the engine's time that is the model's
        (`core/queue_fit.py`); nor those that would take a decode-only step, with the
        engine's time between steps, past the tightest TBT ÷ that margin (`admission.py`).
        Also the triage of `view`, when nothing arrived (the step reuses it), else None. A
        request admitted before the engine (`Request.admitted`) is not tested again: it
        counts among the others from its first step."""
        fresh = [
            r
            for r in view.waiting
            if r.arrival > self._last_step
            and not r.protected
            and r.phase is WAITING
            and not r.admitted
        ]
        established = view.without(fresh) if fresh else view
        triage = self._triaged_queue(established)
        kept = triage.keep
        now = view.now
        queue = [
            QueuedPrefill(d, r.remaining_prefill) for r in kept if (d := r.next_deadline) > now
        ]
        margin = self.config.budget.time_margin
        # The decodes there will be once the requests kept have started, and their TBT
        contexts = [r.num_computed for r in view.decoding] + [r.prefill_target for r in kept]
        tbt = min((r.slo.tbt for r in (*view.decoding, *kept)), default=math.inf)
        rate = self._admission_queue_rate(established, contexts, tbt)
        rate *= self.overhead.model_share / margin
        new = [QueuedPrefill(r.next_deadline, r.remaining_prefill) for r in fresh]
        decodes = DecodeRoom(self.model, contexts, tbt, margin, self.overhead.seconds)
        answers = admit_in_turn(queue, new, now, rate, lambda i: decodes.take(fresh[i]))
        admitted = sorted([*queue, *compress(new, answers)], key=attrgetter("deadline"))
        seats = decodes.seats(self._typical_context(kept, fresh))
        self._admission_queue = AdmissionQueue(now, rate, tuple(admitted), seats)
        unfit = [r for r, fits in zip(fresh, answers, strict=True) if not fits]
        return unfit, None if fresh else triage

    def _typical_context(self, kept: Sequence[Request], fresh: Sequence[Request]) -> int:
        """The context a new request is taken to decode over, for the seats published: the
        median prompt of the requests queued or just arrived (the tokens of one TBT block
        without any)."""
        prompts = sorted(r.prompt_len for r in (*kept, *fresh))
        return prompts[len(prompts) // 2] if prompts else MIN_TYPICAL_CONTEXT

    def _admission_queue_rate(self, view: SchedulerView, contexts: list[int], tbt: float) -> float:
        """Prefill tokens per second the queue-aware test assumes: the triage's rate (the
        observed ρ_t without a triage), or less, what the predictor gives for iterations of
        `tbt` beside decodes of `contexts`: those running and the requests kept, once
        started. A request admitted waits for the requests ahead of it, which decode
        meanwhile and slow the prefill, as a rate observed before they started does not
        tell: at the start of a burst the test then admits what the engine gives up and
        refuses seconds later (docs/vllm.md, section 5.1). The requests that arrive
        together are tested at one rate: those admitted at this step count at the next."""
        observed = (
            self.rate.value
            if self.triage is None
            else self._triage_rate(view, self.triage.config.rate)
        )
        if not contexts:
            return observed
        return min(observed, self._predicted_rate(contexts, tbt))

    def _sorted_queue(self, view: SchedulerView, triage: Triage | None = None) -> list[Request]:
        """The prefill queue in the ordering's order, requests the triage gives up last
        (`triage`: that of `view`, when already made)."""
        if triage is None:
            triage = self._triaged_queue(view)
        return triage.keep + triage.give_up

    def _triaged_queue(self, view: SchedulerView) -> Triage:
        """The prefill queue in the ordering's order, split by the triage (everything kept
        without one)."""
        candidates = view.prefill_candidates()
        ordering = self.config.ordering
        deadlines = None
        if isinstance(ordering, EdfOrder):
            queue, deadlines = edf_queue(
                candidates,
                view.now,
                lost_last=ordering.lost_last,
                prefix_first=ordering.prefix_first,
            )
        else:
            queue = sort_queue(ordering, candidates, view.now, self.rate.value)
        if self.triage is None:
            return Triage(queue, [])
        rate = self._triage_rate(view, self.triage.config.rate)
        return self.triage.split(queue, view.now, rate, deadlines)

    def _triage_rate(self, view: SchedulerView, source: RateSource) -> float:
        """Prefill tokens per second the triage assumes: the observed EMA ρ_t, or what the
        predictor gives for iterations of the tightest L_tbt beside today's decodes (0 when
        the decodes alone fill that time)."""
        if source == "ema" or not view.decoding:
            return self.rate.value
        tbt = min(r.slo.tbt for r in view.decoding)
        return self._predicted_rate([r.num_computed for r in view.decoding], tbt)

    def _predicted_rate(self, contexts: list[int], tbt: float) -> float:
        """Prefill tokens per second of iterations of `tbt` s beside decodes of `contexts`
        cached tokens, as the predictor sees them (0 when the decodes alone fill that time)."""
        profile = PrefillQueueProfile(contexts, [(self.max_tokens, 0)])
        tokens = QueueTimes(self.model, profile, self.max_tokens).tokens_within(tbt)
        return (tokens or 0) / tbt

    def _construct(
        self,
        constructor: BatchConstructor,
        view: SchedulerView,
        queue: list[Request],
        contexts: list[int],
        t_cur: float,
    ) -> Construction:
        """The BatchConstructor's plan if the candidate batch puts a live prefill at risk.

        The knapsack knows the token budget but not the KV blocks, the admissions or the
        batch-size cap: a selection `PlanBuilder` cannot grant in full (every request with
        its whole remaining prefill) would not emit the first tokens it was chosen for, so
        the iteration falls back to the chunker.
        """
        anchors = self._risky_anchors(view, queue, contexts)
        if not anchors:
            return NO_CONSTRUCTION
        selection = constructor.select(contexts, queue, anchors, view.now, t_cur, self.step_tokens)
        if selection is None:
            return NO_CONSTRUCTION
        plan = self._selection_plan(constructor, view, queue, contexts, selection)
        if not grants_in_full(plan, selection):
            return Construction(None, fallback=True)
        return Construction(plan, fallback=False)

    def _risky_anchors(
        self, view: SchedulerView, queue: list[Request], contexts: list[int]
    ) -> list[Request]:
        """The violation checker: live prefills of the largest candidate batch at risk."""
        candidate = PlanBuilder(view, self.step_tokens)
        candidate.add_decodes(view.decoding, contexts)
        candidate.add_prefills(queue)
        prefills = [r for r, _ in candidate.chunks if r.phase is not Phase.DECODING]
        if not prefills:
            return []
        t_full = self.model.predict_shape(candidate.shape())
        return risky_prefills(prefills, view.now, t_full)

    def _selection_plan(
        self,
        constructor: BatchConstructor,
        view: SchedulerView,
        queue: Sequence[Request],
        contexts: list[int],
        selection: Selection,
    ) -> Plan:
        builder = PlanBuilder(view, self.step_tokens)
        builder.add_decodes(view.decoding, contexts)
        for request in selection.requests:
            builder.add(request, request.remaining_prefill)
        if constructor.config.leftover_fill:
            extra = constructor.leftover(contexts, queue, selection, self.step_tokens)
            builder.tokens_left = min(builder.tokens_left, extra)
            chosen = set(map(id, selection.requests))
            builder.add_prefills(r for r in queue if id(r) not in chosen)
        return self._built(builder, "constructor")

    def _chunk(
        self,
        view: SchedulerView,
        queue: list[Request],
        contexts: list[int],
        horizons: list[float],
        decode_time: float | None,
    ) -> Plan:
        """The SlidingChunker's plan: every decode, then the queue greedily up to the budget.
        `contexts`: u_i of each decode; `decode_time`: their predicted time alone, if known."""
        choice = self._chunk_choice(view, queue, contexts, horizons, decode_time)
        total = rounded_total(self.config.budget, len(view.decoding), choice.prefill_tokens)
        builder = PlanBuilder(view, total)
        builder.add_decodes(view.decoding, contexts)
        builder.add_prefills(queue)
        return self._built(builder, f"chunker:{choice.reason}")

    def _built(self, builder: PlanBuilder, path: str) -> Plan:
        """The plan of `builder` with its predicted time (None when it is empty)."""
        predicted = self.model.predict_shape(builder.shape()) if builder.chunks else None
        return builder.build(path, predicted)

    def _chunk_choice(
        self,
        view: SchedulerView,
        queue: list[Request],
        contexts: list[int],
        horizons: list[float],
        decode_time: float | None,
    ) -> ChunkChoice:
        if not queue:
            return ChunkChoice(0, "no-prefill")
        num_decodes = len(contexts)
        seats = max(0, view.limits.max_num_seqs - num_decodes)
        profile = PrefillQueueProfile(
            contexts, queue_head(queue, seats, self.step_tokens - num_decodes)
        )
        times = QueueTimes(self.model, profile, self.step_tokens, decode_time)
        return split_budget(self.config.budget.rule, times, horizons)


def grants_in_full(plan: Plan, selection: Selection) -> bool:
    """Whether every request of `selection` is in `plan` with its whole remaining prefill."""
    granted = {id(request): tokens for request, tokens in plan.chunks}
    return all(granted.get(id(r)) == r.remaining_prefill for r in selection.requests)


class SlidingServePaperPolicy(SlidingServePolicy):
    """The paper's algorithm (`PAPER`)."""

    name = "slidingserve-paper"
    composition: ClassVar[SlidingServeConfig] = PAPER


class SlidingChunkerEdfPolicy(SlidingServePolicy):
    """The paper's ablation `SC_EDF`: Sarathi-EDF's order with the SlidingChunker."""

    name = "slidingserve-sc"
    composition: ClassVar[SlidingServeConfig] = SC_EDF


class SlidingChunkerMlpsPolicy(SlidingServePolicy):
    """The paper's ablation `SC_MLPS`: MLPS and the SlidingChunker, no BatchConstructor."""

    name = "slidingserve-sc-mlps"
    composition: ClassVar[SlidingServeConfig] = SC_MLPS
