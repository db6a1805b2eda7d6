"""The SCORPIO baseline on hand-made queues, and through the simulator.

The predictor is `TokenLinearModel`: fixed + per_token × (decodes + prefill tokens), so
every predicted time below can be worked by hand.
"""

from __future__ import annotations

from typing import Any

import pytest
from factories import (
    CheckingPolicy,
    LinearTimer,
    TokenLinearModel,
    make_decoding,
    make_request,
    make_view,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.core import EngineLimits, Plan, Request, blocks_for_tokens
from slidingserve.policies import PolicyContext, make_policy
from slidingserve.policies.scorpio import CreditLedger, ScorpioPolicy, TpotState, ldf_order
from slidingserve.policies.scorpio.guards import OutputLengthMean
from slidingserve.sim.engine import Simulator, SimulatorOptions

PREFILL_MODEL = TokenLinearModel(0.01, 1e-4)
"""10 ms plus 0.1 ms per token."""

DECODE_MODEL = TokenLinearModel(0.01, 1e-3)
"""10 ms plus 1 ms per token: a decode step of n requests takes 10 + n ms."""


def policy_for(
    model: TokenLinearModel = PREFILL_MODEL,
    limits: EngineLimits = EngineLimits(),
    **options: Any,
) -> ScorpioPolicy:
    policy = make_policy("scorpio", PolicyContext(limits, model), options)
    assert isinstance(policy, ScorpioPolicy)
    return policy


def entries(plan: Plan) -> list[tuple[str, int]]:
    return [(chunk.request.request_id, chunk.tokens) for chunk in plan.chunks]


def ids(requests: list[Request]) -> list[str]:
    return [r.request_id for r in requests]


def decodes(count: int, tbt: float, prefix: str = "d") -> list[Request]:
    return [make_decoding(f"{prefix}{i}", tbt=tbt, ttft=10.0) for i in range(count)]


# -- configuration -----------------------------------------------------------------------


def test_a_predictor_is_required() -> None:
    with pytest.raises(ValueError, match=r"'scorpio' needs a batch-latency predictor"):
        make_policy("scorpio", PolicyContext(EngineLimits()))


def test_the_authors_values_are_the_defaults() -> None:
    config = policy_for().config
    assert (config.inefficiency_factor, config.conservative_factor, config.ttft_margin) == (
        1.3,
        0.99,
        0.05,
    )
    assert config.reject_unattainable and config.tpot_admission and config.credit_batching
    assert not config.chunked_prefill


@pytest.mark.parametrize(
    "options",
    [{"inefficiency_factor": 0}, {"output_len": -1}, {"credit_batching": 1}, {"features": "x"}],
)
def test_bad_options_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        policy_for(**options)


# -- TTFT guard: deadline order and rejection -----------------------------------------------


def test_prefills_go_least_deadline_first_whole_and_without_decodes() -> None:
    # Deadlines: a 0 + 3 = 3 s, b 0.5 + 1 = 1.5 s, c 1 + 1.2 = 2.2 s. The budget of 2048
    # holds b (900) and c (800); a (600) does not fit whole in the 348 left: not split.
    a = make_request("a", arrival=0.0, ttft=3.0, prompt=600)
    b = make_request("b", arrival=0.5, ttft=1.0, prompt=900)
    c = make_request("c", arrival=1.0, ttft=1.2, prompt=800)
    view, _ = make_view(now=1.0, waiting=[a, b, c], running=decodes(2, 0.05))
    plan = policy_for().schedule(view)
    assert entries(plan) == [("b", 900), ("c", 800)]
    assert plan.path == "scorpio:prefill"
    assert plan.refused == []


def test_chunked_prefill_runs_decodes_first_and_splits_the_last_prompt() -> None:
    a = make_request("a", arrival=0.0, ttft=3.0, prompt=600)
    b = make_request("b", arrival=0.5, ttft=1.0, prompt=900)
    c = make_request("c", arrival=1.0, ttft=1.2, prompt=800)
    view, _ = make_view(now=1.0, waiting=[a, b, c], running=decodes(2, 0.05))
    plan = policy_for(chunked_prefill=True).schedule(view)
    assert entries(plan) == [("d0", 1), ("d1", 1), ("b", 900), ("c", 800), ("a", 346)]


def test_a_preempted_request_sorts_first_by_its_past_ttft_deadline() -> None:
    fresh = make_request("fresh", arrival=5.0, ttft=0.5)
    preempted = make_request("preempted", arrival=0.0, ttft=1.0, generated=4)
    preempted.phase = fresh.phase  # back in the waiting queue, nothing cached
    assert ids(ldf_order([fresh, preempted])) == ["preempted", "fresh"]


@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.5]), st.sampled_from([0.5, 1.0, 2.0]))))
def test_ldf_order_sorts_by_ttft_deadline_then_arrival_keeping_ties_in_queue_order(
    rows: list[tuple[float, float]],
) -> None:
    """Arrivals and TTFTs from a few values, so that deadlines and arrivals tie."""
    queue = [make_request(f"r{i}", arrival=a, ttft=ttft) for i, (a, ttft) in enumerate(rows)]
    expected = sorted(queue, key=lambda r: (r.ttft_deadline, r.arrival))
    assert ids(ldf_order(queue)) == ids(expected)


def test_a_hopeless_request_is_refused_and_a_feasible_one_kept() -> None:
    # hopeless: 1000 tokens wait 10 + 100 ms, + 50 ms margin = 0.16 s > 0.1 s of TTFT.
    # feasible: its own 500 tokens only (the refused request's are not charged to it):
    # 10 + 50 + 50 ms = 0.11 s ≤ 0.2 s. Had the 1000 tokens counted: 0.21 s > 0.2 s.
    hopeless = make_request("hopeless", ttft=0.1, prompt=1000)
    feasible = make_request("feasible", ttft=0.2, prompt=500)
    view, _ = make_view(waiting=[feasible, hopeless])
    policy = policy_for()
    plan = policy.schedule(view)
    assert ids(plan.refused) == ["hopeless"]
    assert entries(plan) == [("feasible", 500)]
    assert policy.num_refused == 1


def test_the_wait_counts_every_prompt_ahead_in_deadline_order() -> None:
    # first (due 1.05 s): 1500 tokens, 0.16 + 0.05 s: kept. second (due 1.1 s): 1500 + 1000
    # tokens = one full batch of 2048 (0.2148 s) and 452 (0.0552 s): 0.27 + 0.05 s: kept.
    # At now = 0.8 s: first ends at 1.01 s ≤ 1.05 s, kept; second at 1.12 s > 1.1 s, refused.
    first = make_request("first", ttft=1.05, prompt=1500)
    second = make_request("second", ttft=1.1, prompt=1000)
    policy = policy_for()
    assert policy.prefill_wait(2500) == pytest.approx(0.2148 + 0.0552)
    view, _ = make_view(now=0.0, waiting=[second, first])
    assert policy.unattainable(view) == []
    view, _ = make_view(now=0.8, waiting=[second, first])
    assert ids(policy.unattainable(view)) == ["second"]


def test_a_request_preempted_after_its_first_token_is_never_refused() -> None:
    preempted = make_request("preempted", ttft=0.1, prompt=1000, generated=3)
    preempted.phase = make_request().phase
    view, _ = make_view(now=5.0, waiting=[preempted])
    assert policy_for().unattainable(view) == []


def test_rejection_can_be_switched_off() -> None:
    hopeless = make_request("hopeless", ttft=0.1, prompt=1000)
    view, _ = make_view(waiting=[hopeless])
    plan = policy_for(reject_unattainable=False).schedule(view)
    assert plan.refused == []
    assert entries(plan) == [("hopeless", 1000)]


# -- TPOT guard: virtual batch size, admission gate, credits -------------------------------


def test_virtual_batch_size_weighs_each_request_by_lowest_over_its_tpot() -> None:
    state = TpotState([0.05, 0.1, 0.1])
    assert state.virtual_batch_size() == pytest.approx(1 + 0.5 + 0.5)
    # A tighter candidate lowers the minimum: 1 + 0.5 + 0.25 + 0.25.
    assert state.virtual_batch_size(0.025) == pytest.approx(2.0)
    assert TpotState().virtual_batch_size() == 0.0


def test_the_gate_admits_while_a_decode_step_fits_the_tightest_tpot() -> None:
    # 20 decodes at 50 ms + the candidate: a step of 21 takes 31 ms, × 1.3 = 40.3 ms
    # < 0.99 × 50 ms = 49.5 ms: admitted. With 28 decodes: 39 ms × 1.3 = 50.7 ms: refused
    # for this step (it waits; a decode step runs instead).
    policy = policy_for(DECODE_MODEL)
    candidate = make_request("new", prompt=100, ttft=10.0)
    view, _ = make_view(waiting=[candidate], running=decodes(20, 0.05))
    assert entries(policy.schedule(view)) == [("new", 100)]
    candidate = make_request("new", prompt=100, ttft=10.0)
    view, _ = make_view(waiting=[candidate], running=decodes(28, 0.05))
    plan = policy.schedule(view)
    assert plan.path == "scorpio:decode"
    assert len(plan.chunks) == 28 and plan.refused == []
    assert policy.num_gated == 1


def test_loose_tpot_decodes_count_for_less_in_the_gate() -> None:
    # 28 decodes at 100 ms beside a 50 ms candidate: VBS = 28 × 0.5 + 1 = 15, a step of
    # 25 ms × 1.3 = 32.5 ms < 49.5 ms: admitted (28 plain decodes would have refused it).
    policy = policy_for(DECODE_MODEL)
    candidate = make_request("new", prompt=100, ttft=10.0, tbt=0.05)
    view, _ = make_view(waiting=[candidate], running=decodes(28, 0.1))
    assert entries(policy.schedule(view)) == [("new", 100)]


def test_the_gate_reads_the_fractional_virtual_batch_size_between_two_sizes() -> None:
    policy = policy_for(DECODE_MODEL)
    assert policy.decode_time(2.5, 100) == pytest.approx(0.0125)
    assert policy.decode_time(3.0, 100) == pytest.approx(0.013)


def test_the_gate_admits_when_nothing_runs() -> None:
    # Alone, a 20 ms TPOT cannot be kept (11 ms × 1.3 > 19.8 ms), but nothing else runs.
    candidate = make_request("alone", prompt=100, ttft=10.0, tbt=0.02)
    view, _ = make_view(waiting=[candidate])
    assert entries(policy_for(DECODE_MODEL).schedule(view)) == [("alone", 100)]


def test_credits_run_each_decode_once_per_tpot_ratio() -> None:
    # Lowest TPOT 50 ms: the two at 50 ms run every step, the one at 100 ms every second
    # step, the one at 150 ms every third: over 6 steps 6, 6, 3 and 2 tokens.
    running = [
        *decodes(2, 0.05, "tight"),
        make_decoding("half", tbt=0.1, ttft=10.0),
        make_decoding("third", tbt=0.15, ttft=10.0),
    ]
    view, _ = make_view(running=running)
    policy = policy_for()
    counts = dict.fromkeys(ids(running), 0)
    steps = []
    for _ in range(6):
        plan = policy.schedule(view)
        assert plan.path == "scorpio:decode"
        steps.append(len(plan.chunks))
        for request, _tokens in plan.chunks:
            counts[request.request_id] += 1
    assert counts == {"tight0": 6, "tight1": 6, "half": 3, "third": 2}
    assert steps == [2, 3, 3, 3, 2, 4]
    assert not policy.schedules_all_decodes(4)


def test_without_credits_or_with_one_tpot_every_decode_runs() -> None:
    mixed = [make_decoding("a", tbt=0.05), make_decoding("b", tbt=0.2)]
    view, _ = make_view(running=mixed)
    assert len(policy_for(credit_batching=False).schedule(view).chunks) == 2
    same = decodes(3, 0.1)
    view, _ = make_view(running=same)
    policy = policy_for()
    assert len(policy.schedule(view).chunks) == 3
    assert policy.schedules_all_decodes(3)


def test_the_credit_ledger_forgets_finished_requests_only() -> None:
    ledger = CreditLedger()
    half = make_decoding("half", tbt=0.1)
    assert ledger.select([half], 0.05) == []
    assert ledger.credits == {"half": 0.5}
    ledger.forget_departed([[half]])
    assert ledger.credits == {"half": 0.5}
    ledger.forget_departed([[]])
    assert ledger.credits == {}


# -- engine limits -------------------------------------------------------------------------


def test_a_prompt_longer_than_the_budget_starts_alone_and_continues_first() -> None:
    long = make_request("long", prompt=5000, ttft=10.0)
    short = make_request("short", prompt=100, ttft=20.0)
    view, _ = make_view(waiting=[long, short], running=decodes(1, 0.05))
    assert entries(policy_for().schedule(view)) == [("long", 2048)]
    long_rest = make_request("long", prompt=5000, ttft=10.0, computed=4096)
    view, _ = make_view(waiting=[short], running=[*decodes(1, 0.05), long_rest])
    assert entries(policy_for().schedule(view)) == [("long", 904), ("short", 100)]


def test_the_budget_option_caps_the_engine_limit() -> None:
    a = make_request("a", prompt=900, ttft=10.0)
    b = make_request("b", prompt=200, ttft=11.0)
    view, _ = make_view(waiting=[a, b])
    assert entries(policy_for(max_batch_tokens=1024).schedule(view)) == [("a", 900)]
    assert entries(policy_for(max_batch_tokens=4096).schedule(view)) == [("a", 900), ("b", 200)]


def test_admissions_respect_the_batch_size_cap_and_the_kv_cache() -> None:
    limits = EngineLimits(max_num_seqs=4)
    waiting = [make_request(f"w{i}", prompt=100, ttft=10.0 + i) for i in range(3)]
    view, _ = make_view(waiting=waiting, running=decodes(3, 0.05), limits=limits)
    assert entries(policy_for(limits=limits).schedule(view)) == [("w0", 100)]
    # 3 decodes at 101 tokens hold 7 blocks each (21 of 28) and need none for the next
    # token; 7 are free: w0 (100 tokens, 7 blocks) fits, w1 does not.
    waiting = [make_request(f"w{i}", prompt=100, ttft=10.0 + i) for i in range(3)]
    view, kv = make_view(waiting=waiting, running=decodes(3, 0.05), kv_blocks=28)
    assert kv.num_free == 7
    assert entries(policy_for().schedule(view)) == [("w0", 100)]


def simulate(
    requests: list[Request], policy: ScorpioPolicy, limits: EngineLimits, spare_blocks: int = -1
) -> int:
    """Run `requests` through `policy`, every plan checked; the KV blocks left held at the
    end. The cache holds the largest request plus `spare_blocks` (-1: four times it)."""
    biggest = max(blocks_for_tokens(r.prompt_len + r.output_len, 16) for r in requests)
    blocks = 4 * biggest if spare_blocks < 0 else biggest + spare_blocks
    checked = CheckingPolicy(policy, limits.max_num_batched_tokens)
    options = SimulatorOptions(limits=limits, validate_plans=True)
    run = Simulator(checked, LinearTimer(0.01, 1e-4), blocks, options).run(requests)
    return run.blocks_in_use_at_end


@pytest.mark.parametrize("chunked", [False, True])
def test_a_mixed_run_respects_the_limits_and_finishes_or_refuses_everyone(chunked: bool) -> None:
    limits = EngineLimits(max_num_batched_tokens=512, max_num_seqs=6)
    requests = [
        make_request(
            f"r{i}",
            arrival=0.1 * i,
            prompt=50 + 97 * i % 700,
            output=5 + 7 * i % 30,
            ttft=0.05 if i % 7 == 0 else 2.0,
            tbt=(0.03, 0.06, 0.12)[i % 3],
        )
        for i in range(40)
    ]
    policy = policy_for(PREFILL_MODEL, limits, chunked_prefill=chunked)  # predicts the timer
    simulate(requests, policy, limits)
    refused = [r for r in requests if r.refused]
    # The 50 ms TTFTs cannot be met with the 50 ms margin: exactly those are refused.
    assert len(refused) == 6
    assert all(r.request_id in {f"r{i}" for i in range(0, 40, 7)} for r in refused)
    for request in requests:
        if not request.refused:
            assert len(request.token_times) == request.output_len


@settings(max_examples=60, deadline=None)
@given(
    specs=st.lists(
        st.tuples(
            st.floats(0, 1.0),  # arrival
            st.integers(1, 1500),  # prompt
            st.integers(1, 40),  # output
            st.floats(0.05, 3.0),  # TTFT
            st.sampled_from([0.02, 0.05, 0.1, 0.3]),  # TBT: credits at work
        ),
        min_size=1,
        max_size=20,
    ),
    budget=st.integers(16, 1024),
    max_seqs=st.integers(1, 12),
    spare_blocks=st.integers(0, 60),
    chunked=st.booleans(),
)
def test_every_request_finishes_or_is_refused_within_the_limits(
    specs: list[tuple[float, int, int, float, float]],
    budget: int,
    max_seqs: int,
    spare_blocks: int,
    chunked: bool,
) -> None:
    requests = [
        make_request(f"r{i}", arrival=a, prompt=p, output=o, ttft=t, tbt=b)
        for i, (a, p, o, t, b) in enumerate(specs)
    ]
    limits = EngineLimits(max_num_batched_tokens=budget, max_num_seqs=max_seqs)
    policy = policy_for(PREFILL_MODEL, limits, chunked_prefill=chunked)
    assert simulate(requests, policy, limits, spare_blocks) == 0
    for request in requests:
        expected = 0 if request.refused else request.output_len
        assert len(request.token_times) == expected
    assert policy.num_refused == sum(r.refused for r in requests)


# -- the output length the gate assumes ----------------------------------------------------


class TestOutputLengthMean:
    def test_the_prior_until_enough_requests_have_left(self) -> None:
        mean = OutputLengthMean(prior=439)
        running = [
            make_decoding(f"r{i}", generated=100) for i in range(OutputLengthMean.MIN_SAMPLES - 1)
        ]
        mean.observe(running, [])
        mean.observe([], [])  # all of them finished
        assert mean.value == 439
        mean.observe([make_decoding("last", generated=119)], [])
        mean.observe([], [])
        assert mean.count == OutputLengthMean.MIN_SAMPLES
        assert mean.value == pytest.approx((19 * 100 + 119) / 20)

    def test_a_preempted_request_is_not_counted_as_finished(self) -> None:
        mean = OutputLengthMean(prior=439)
        request = make_decoding("p", generated=50)
        mean.observe([request], [])
        mean.observe([], [request])  # preempted: back in the waiting queue
        assert (mean.count, mean.total) == (0, 0)

    def test_a_request_that_never_emitted_is_not_counted(self) -> None:
        mean = OutputLengthMean(prior=439)
        mean.observe([make_request("w")], [])  # prefilling, then refused or aborted
        mean.observe([], [])
        assert mean.count == 0

    def test_the_policy_learns_it_only_when_asked(self) -> None:
        finished = [make_decoding(f"r{i}", generated=40) for i in range(30)]
        learning, fixed = policy_for(), policy_for(learn_output_len=False)
        for policy in (learning, fixed):
            for running in (finished, []):
                view, _ = make_view(running=running)
                policy.schedule(view)
        assert learning.output_len.value == pytest.approx(40)
        assert fixed.output_len.value == 439
