"""The routers' choices on hand-built replica loads, worked out by hand."""

from __future__ import annotations

import pytest
from factories import TokenLinearModel, make_request

from slidingserve.core.queue_fit import QueuedPrefill
from slidingserve.routing import (
    LeastRequests,
    LeastWork,
    ReplicaLoad,
    ReplicaModel,
    RoundRobin,
    SloAware,
    make_router,
)

# 1 ms a step plus 0.1 ms a token: a full batch of 1,000 tokens takes 0.101 s
FAST = ReplicaModel(TokenLinearModel(0.001, 1e-4), max_tokens=1000)
SLOW = ReplicaModel(TokenLinearModel(0.001, 2e-4), max_tokens=1000)


def load(
    outstanding: int = 0,
    prefills: tuple[tuple[float, int], ...] = (),
    decodes: int = 0,
    hit: int = 0,
    now: float = 0.0,
    decode_tbt: float = 0.05,
) -> ReplicaLoad:
    return ReplicaLoad(
        now,
        outstanding,
        tuple(QueuedPrefill(d, t) for d, t in prefills),
        (500,) * decodes,
        decode_tbt if decodes else None,
        hit,
    )


def test_the_prefill_rate_is_a_full_batch_beside_the_decodes() -> None:
    assert FAST.prefill_rate(()) == pytest.approx(1000 / 0.101)
    # 200 decodes leave 800 tokens in a batch that still takes 0.101 s
    assert FAST.prefill_rate((10,) * 200) == pytest.approx(800 / 0.101)
    assert FAST.prefill_rate((10,) * 1000) == 0.0


def test_round_robin_takes_each_replica_in_turn_whatever_it_holds() -> None:
    router = RoundRobin((FAST, FAST, FAST))
    loads = [load(9), load(0), load(0)]
    assert [router.route(make_request(), loads) for _ in range(5)] == [0, 1, 2, 0, 1]


def test_least_requests_takes_the_fewest_outstanding_ties_to_the_lowest_index() -> None:
    router = LeastRequests((FAST, FAST, FAST))
    assert router.route(make_request(), [load(3), load(1), load(1)]) == 1
    assert router.route(make_request(), [load(0), load(0), load(0)]) == 0


def test_least_work_counts_tokens_not_requests() -> None:
    router = LeastWork((FAST, FAST))
    many_short = load(5, ((1.0, 100),) * 5)  # 500 tokens
    one_long = load(1, ((1.0, 4000),))
    assert router.route(make_request(), [one_long, many_short]) == 1


def test_least_work_sends_equal_work_to_the_fewest_requests() -> None:
    router = LeastWork((FAST, FAST, FAST))
    # nothing queued anywhere: the replica decoding the fewest requests
    assert router.route(make_request(), [load(5, decodes=5), load(2, decodes=2), load(3)]) == 1


def test_least_work_counts_a_slower_gpu_as_busier() -> None:
    router = LeastWork((SLOW, FAST))
    # 1,000 tokens at 1000/0.201 tok/s (0.201 s) against 1,500 at 1000/0.101 (0.1515 s)
    assert router.route(make_request(), [load(1, ((1.0, 1000),)), load(1, ((1.0, 1500),))]) == 1


def test_slo_aware_counts_only_the_prompts_due_first() -> None:
    router = SloAware((FAST, FAST))
    request = make_request(prompt=100, ttft=1.0)  # deadline 1.0 s
    # replica 0: 3,000 tokens due before it; replica 1: 5,000 due after it, none before
    due_first = load(1, ((0.5, 3000),))
    due_later = load(1, ((2.0, 5000),))
    assert router.route(request, [due_first, due_later]) == 1
    slack = router.slack(1, request, due_later)
    assert slack == pytest.approx(1.0 - 100 / (1000 / 0.101))


def test_slo_aware_prefers_the_replica_that_holds_the_prompt() -> None:
    router = SloAware((FAST, FAST))
    request = make_request(prompt=2000, ttft=1.0)
    assert router.route(request, [load(0), load(0, hit=1984)]) == 1


def test_slo_aware_refuses_only_when_no_replica_could_serve_the_prompt_alone_in_time() -> None:
    router = SloAware((FAST, FAST))
    request = make_request(prompt=100, ttft=0.5)  # 100 tokens alone take 0.0101 s
    # a long queue ahead everywhere lowers the slack but refuses nothing
    assert router.route(request, [load(1, ((0.1, 9000),)), load(1, ((0.1, 6000),))]) == 1
    # both replicas busy until 0.495 s: the prompt alone would end at 0.505 s
    assert router.route(request, [load(now=0.495), load(now=0.495)]) is None
    assert router.route(request, [load(now=0.495), load(now=0.485)]) == 1


def test_slo_aware_does_not_count_prompts_already_late_as_ahead() -> None:
    router = SloAware((FAST, FAST))
    request = make_request(prompt=100, ttft=1.0)
    late_giant = load(1, ((-0.1, 30_000),), now=0.0)  # its deadline has passed: set aside
    due_first = load(1, ((0.5, 1000),))
    assert router.route(request, [due_first, late_giant]) == 1
    assert router.slack(1, request, late_giant) == pytest.approx(1.0 - 100 / (1000 / 0.101))


def test_slo_aware_reads_each_replica_clock() -> None:
    router = SloAware((FAST, FAST))
    request = make_request(prompt=100, ttft=0.5)
    # replica 0 is still in an iteration until 0.45 s: its first token comes too late
    assert router.route(request, [load(now=0.45), load(1, ((0.1, 1000),))]) == 1


def test_a_replica_whose_decodes_fill_every_batch_has_no_slack() -> None:
    router = SloAware((FAST,))
    assert router.route(make_request(), [load(1000, decodes=1000)]) is None


def test_routers_are_chosen_by_name() -> None:
    assert isinstance(make_router("slo-aware", (FAST,)), SloAware)
    with pytest.raises(ValueError, match=r"unknown router 'nearest'.*least-requests"):
        make_router("nearest", (FAST,))
    with pytest.raises(ValueError, match="at least one replica"):
        RoundRobin(())


def test_the_paced_rate_keeps_the_decodes_within_the_tbt() -> None:
    # 400 decodes: 0.001 + 1e-4 (400 + c) ≤ 0.05 s leaves c = 90 tokens, 1,800 tok/s
    assert FAST.paced_prefill_rate((10,) * 400, 0.05) == pytest.approx(90 / 0.05)
    assert FAST.paced_prefill_rate((), 0.05) == FAST.prefill_rate(())
    assert FAST.paced_prefill_rate((10,) * 600, 0.05) == 0.0  # decodes alone take 0.061 s


def test_slo_aware_avoids_a_replica_whose_decodes_leave_little_room() -> None:
    router = SloAware((FAST, FAST))
    request = make_request(prompt=100, ttft=1.0, tbt=0.05)
    busy_decoding = load(400, decodes=400)  # paced: 100 tokens at 1,800 tok/s, slack 0.944
    queued = load(3, ((0.5, 300),))  # 400 tokens at 9,901 tok/s, slack 0.960
    assert router.route(request, [busy_decoding, queued]) == 1
    assert router.slack(0, request, busy_decoding) == pytest.approx(1.0 - 100 / 1800)
    # in full batches it would look better: 100 tokens at 600/0.101 tok/s, slack 0.983


def test_slo_aware_paces_by_the_tightest_tbt_of_the_running_decodes() -> None:
    router = SloAware((FAST,))
    loose = make_request(prompt=100, ttft=1.0, tbt=0.5)
    # 400 decodes keeping a 50 ms TBT leave 90 tokens a step: 1,800 tok/s, not the ~4,900
    # tok/s a 0.5 s pace would allow
    assert router.slack(0, loose, load(400, decodes=400)) == pytest.approx(1.0 - 100 / 1800)


def test_slo_aware_places_a_request_no_replica_can_pace_if_one_could_in_full_batches() -> None:
    router = SloAware((FAST,))
    request = make_request(prompt=100, ttft=1.0, tbt=0.05)
    assert router.slack(0, request, load(600, decodes=600)) == -float("inf")
    assert router.route(request, [load(600, decodes=600)]) == 0


def test_a_router_that_predicts_needs_the_predictors() -> None:
    blind = ReplicaModel(None, 1000)
    assert LeastRequests((blind,)).route(make_request(), [load(0)]) == 0
    with pytest.raises(ValueError, match="needs each replica's predictor"):
        SloAware((blind,))
