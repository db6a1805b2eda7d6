"""The SlidingServe policy (SPEC §2): sort, check for risk, then chunk or construct."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from slidingserve.core.batch import BatchShape
from slidingserve.core.plan import Plan, PlanBuilder
from slidingserve.core.request import Phase
from slidingserve.policies.base import Policy, PolicyContext, build_config
from slidingserve.policies.slidingserve.chunker import (
    ChunkChoice,
    QueueTimes,
    paper_chunk,
    window_chunk,
)
from slidingserve.policies.slidingserve.config import SlidingServeConfig
from slidingserve.policies.slidingserve.constructor import (
    BatchConstructor,
    ConstructorSettings,
    Selection,
    risky_prefills,
)
from slidingserve.policies.slidingserve.mlps import edf_order, mlps_order
from slidingserve.policies.slidingserve.overload import Triage, drop_largest, relegate_hopeless
from slidingserve.policies.slidingserve.stats import DecisionRecord, Stopwatch, TimedModel
from slidingserve.policies.slidingserve.windows import decode_horizons
from slidingserve.predictor import PrefillQueueProfile

MAX_DECISIONS = 1_000_000
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


DESIGN: Mapping[str, Any] = {
    "sorter": "edf",
    "lost_last": True,
    "overload": "drop-largest",
    "batch_constructor": False,
    "chunker": "window",
    "window": 1,
    "token_quantum": 128,
    "time_margin": 1.1,
    "features": "rich",
}
"""The switches of `slidingserve`, chosen by measurement (README, "The design"): deadline
order with lost requests last; Moore–Hodgson triage of the prefill queue; the greedy budget
of the tightest decode slack ÷ 1.1, its total rounded down to a 128-token tile; the rich
predictor. Every other switch is at the paper's setting."""


class SlidingServePolicy(Policy):
    """The policy family: a prefill order, an optional triage of hopeless prefills, the
    violation checker and BatchConstructor when a prefill is at risk, else the
    SlidingChunker's budget. As `slidingserve` it runs `DESIGN`; `slidingserve-paper` and
    its ablations run the paper's switches."""

    name = "slidingserve"
    config_type = SlidingServeConfig
    needs_predictor = True
    preset: ClassVar[Mapping[str, Any]] = DESIGN  # the variant's switches, under user options
    config: SlidingServeConfig

    def __init__(self, config: SlidingServeConfig, context: PolicyContext) -> None:
        super().__init__(config, context)
        predictor = context.predictors.get(config.features, context.predictor)
        if predictor is None:
            raise ValueError(f"policy {self.name!r} needs a batch-latency predictor")
        limit = context.limits.max_num_batched_tokens
        self.max_tokens = min(config.max_batch_tokens or limit, limit)
        self.model = TimedModel(predictor)
        self.throughput = self._initial_throughput()
        # Bounded: a server runs for days; the last MAX_DECISIONS iterations are kept.
        self.decisions: deque[DecisionRecord] = deque(maxlen=MAX_DECISIONS)
        # Iterations whose knapsack selection PlanBuilder could not grant in full (KV blocks,
        # admissions, batch-size cap), so the chunker planned them instead.
        self.constructor_fallbacks = 0
        self.relegated: set[str] = set()  # ids relegated for good (overload="relegate")
        self.constructor = BatchConstructor(
            self.model,
            ConstructorSettings(
                self.max_tokens,
                config.knapsack_quantum,
                config.verify_rounds,
                config.max_anchors,
                config.max_knapsack_items,
                config.leftover_fill,
            ),
        )

    @classmethod
    def from_options(
        cls, context: PolicyContext, options: Mapping[str, Any] | None = None
    ) -> Policy:
        merged = {**cls.preset, **(options or {})}
        return cls(build_config(cls.config_type, merged, cls.name), context)

    def schedule(self, view: SchedulerView) -> Plan:
        watch = Stopwatch(self.model)
        refused = self._hopeless(view) if self.config.admission else []
        if refused:
            view = view.without(refused)
        plan = self._decide(view, watch)
        plan.refused = refused
        plan.predicted_time = self.model.predict_shape(BatchShape.from_plan(plan)) if plan else None
        if self.config.record_decisions:
            record = watch.record(
                view.now, plan.path, plan.predicted_time, plan.total_tokens, len(view.decoding)
            )
            self.decisions.append(record)
        return plan

    def _decide(self, view: SchedulerView, watch: Stopwatch) -> Plan:
        """Sort; the BatchConstructor's plan if a prefill is at risk and its selection can be
        granted in full; else the SlidingChunker's."""
        queue = watch.run("mlps", lambda: self._sorted_queue(view))
        horizons = self._horizons(view)
        construction = NO_CONSTRUCTION
        if self.config.batch_constructor and queue:
            construction = watch.run(
                "constructor", lambda: self._construct(view, queue, horizons[0])
            )
        if construction.plan is not None:
            return construction.plan
        plan = watch.run("chunker", lambda: self._chunk(view, queue, horizons))
        if construction.fallback:
            self.constructor_fallbacks += 1
            plan.path += FALLBACK_SUFFIX
        return plan

    def on_iteration_end(self, record: IterationRecord) -> None:
        """Fold the iteration's prefill throughput into the EMA ρ_t."""
        tokens = record.shape.num_prefill_tokens
        if tokens and record.duration > 0:
            decay = self.config.throughput_decay
            self.throughput = decay * self.throughput + (1 - decay) * tokens / record.duration

    def _initial_throughput(self) -> float:
        """ρ_0 from the predictor: tokens per second of a full prefill-only batch."""
        seconds = self.model.predict_shape(BatchShape((), ((self.max_tokens, 0),)))
        return self.max_tokens / seconds if seconds > 0 else 1.0

    def _hopeless(self, view: SchedulerView) -> list[Request]:
        """Admission control: waiting requests that have emitted nothing and would miss their
        first-token deadline even if their whole prompt ran next, alone, in full batches
        (the predictor's best prefill rate, decodes ignored: an optimistic test, so a
        request is refused only when nothing could save it). Protected ones are kept."""
        rate = self._initial_throughput()
        return [
            r
            for r in view.waiting
            if not r.protected
            and not r.num_generated
            and view.now + r.remaining_prefill / rate > r.next_deadline
        ]

    def _horizons(self, view: SchedulerView) -> list[float]:
        """The decode windows (SPEC §5), shrunk by `time_margin` and capped at
        `iteration_cap` × the tightest L_tbt per window when those switches are on."""
        config = self.config
        horizons = decode_horizons(view.decoding, view.now, max(2, config.window))
        if config.time_margin != 1:
            horizons = [h / config.time_margin for h in horizons]
        if config.iteration_cap and view.decoding:
            step = config.iteration_cap * min(r.slo.tbt for r in view.decoding)
            horizons = [min(h, (j + 1) * step) for j, h in enumerate(horizons)]
        return horizons

    def _sorted_queue(self, view: SchedulerView) -> list[Request]:
        candidates = view.prefill_candidates()
        config = self.config
        if config.sorter == "edf":
            queue = edf_order(candidates)
            if config.lost_last:
                queue = [r for r in queue if r.next_deadline > view.now] + [
                    r for r in queue if r.next_deadline <= view.now
                ]
        else:
            queue = mlps_order(candidates, view.now, self.throughput, config.alpha, config.epsilon)
        if config.overload == "none":
            return queue
        triage = self._triage(view, queue)
        return triage.keep + triage.give_up

    def _triage(self, view: SchedulerView, queue: list[Request]) -> Triage:
        rate = self._triage_rate(view)
        if self.config.overload == "relegate":
            self.relegated &= {r.request_id for r in queue}
            return relegate_hopeless(queue, view.now, rate, self.relegated)
        return drop_largest(queue, view.now, rate)

    def _triage_rate(self, view: SchedulerView) -> float:
        """Prefill tokens per second the triage assumes: the observed EMA ρ_t, or what the
        predictor gives for iterations of the tightest L_tbt beside today's decodes."""
        if self.config.triage_rate == "ema" or not view.decoding:
            return self.throughput
        tbt = min(r.slo.tbt for r in view.decoding)
        profile = PrefillQueueProfile(
            [r.num_computed for r in view.decoding], [(self.max_tokens, 0)]
        )
        times = QueueTimes(self.model, profile, self.max_tokens)
        tokens = times.tokens_within(tbt)
        return (tokens or 0) / tbt

    def _construct(self, view: SchedulerView, queue: list[Request], t_cur: float) -> Construction:
        """The BatchConstructor's plan if the candidate batch puts a live prefill at risk.

        The knapsack knows the token budget but not the KV blocks, the admissions or the
        batch-size cap: a selection `PlanBuilder` cannot grant in full (every request with
        its whole remaining prefill) would not emit the first tokens it was chosen for, so
        the iteration falls back to the chunker.
        """
        anchors = self._risky_anchors(view, queue)
        if not anchors:
            return NO_CONSTRUCTION
        contexts = [r.num_computed for r in view.decoding]
        selection = self.constructor.select(contexts, queue, anchors, view.now, t_cur)
        if selection is None:
            return NO_CONSTRUCTION
        plan = self._selection_plan(view, queue, selection)
        if not grants_in_full(plan, selection):
            return Construction(None, fallback=True)
        return Construction(plan, fallback=False)

    def _risky_anchors(self, view: SchedulerView, queue: list[Request]) -> list[Request]:
        """The violation checker: live prefills of the largest candidate batch at risk."""
        candidate = PlanBuilder(view, self.max_tokens)
        candidate.add_decodes(view.decoding)
        candidate.add_prefills(queue)
        prefills = [r for r, _ in candidate.chunks if r.phase is not Phase.DECODING]
        if not prefills:
            return []
        t_full = self.model.predict_shape(BatchShape.from_plan(candidate.build()))
        return risky_prefills(prefills, view.now, t_full)

    def _selection_plan(
        self, view: SchedulerView, queue: Sequence[Request], selection: Selection
    ) -> Plan:
        builder = PlanBuilder(view, self.max_tokens)
        builder.add_decodes(view.decoding)
        for request in selection.requests:
            builder.add(request, request.remaining_prefill)
        if self.config.leftover_fill:
            contexts = [r.num_computed for r in view.decoding]
            extra = self.constructor.leftover(contexts, queue, selection)
            builder.tokens_left = min(builder.tokens_left, extra)
            chosen = set(map(id, selection.requests))
            builder.add_prefills(r for r in queue if id(r) not in chosen)
        return builder.build("constructor")

    def _chunk(self, view: SchedulerView, queue: list[Request], horizons: list[float]) -> Plan:
        choice = self._chunk_choice(view, queue, horizons)
        total = len(view.decoding) + choice.prefill_tokens
        quantum = self.config.token_quantum
        if quantum and total >= quantum and choice.prefill_tokens:
            total = max(len(view.decoding), total - total % quantum)
        builder = PlanBuilder(view, total)
        builder.add_decodes(view.decoding)
        builder.add_prefills(queue)
        return builder.build(f"chunker:{choice.reason}")

    def _chunk_choice(
        self, view: SchedulerView, queue: list[Request], horizons: list[float]
    ) -> ChunkChoice:
        if not queue:
            return ChunkChoice(0, "no-prefill")
        profile = PrefillQueueProfile(
            [r.num_computed for r in view.decoding],
            [(r.remaining_prefill, r.num_computed) for r in queue],
            max_requests=max(0, view.limits.max_num_seqs - len(view.decoding)),
        )
        times = QueueTimes(self.model, profile, self.max_tokens)
        if self.config.chunker == "fixed":
            return ChunkChoice(times.max_prefill, "fixed")
        if self.config.chunker == "window":
            return window_chunk(times, horizons[: self.config.window])
        return paper_chunk(times, horizons[:2])


def grants_in_full(plan: Plan, selection: Selection) -> bool:
    """Whether every request of `selection` is in `plan` with its whole remaining prefill."""
    granted = {id(request): tokens for request, tokens in plan.chunks}
    return all(granted.get(id(r)) == r.remaining_prefill for r in selection.requests)


class SlidingServePaperPolicy(SlidingServePolicy):
    """The paper's algorithm (SPEC §2–§6): MLPS order, the violation checker and
    BatchConstructor, the SlidingChunker's ternary split, the paper's seven features."""

    name = "slidingserve-paper"
    preset: ClassVar[Mapping[str, Any]] = {}


class SlidingChunkerEdfPolicy(SlidingServePaperPolicy):
    """Ablation: Sarathi-EDF's order with the SlidingChunker for the budget."""

    name = "slidingserve-sc"
    preset: ClassVar[Mapping[str, Any]] = {"sorter": "edf", "batch_constructor": False}


class SlidingChunkerMlpsPolicy(SlidingServePaperPolicy):
    """Ablation: MLPS and the SlidingChunker, no BatchConstructor."""

    name = "slidingserve-sc-mlps"
    preset: ClassVar[Mapping[str, Any]] = {"batch_constructor": False}
