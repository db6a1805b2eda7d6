"""The cluster simulator: one replica is the single engine token for token, and many
replicas place, serve or refuse every request exactly once."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from factories import LinearTimer, TokenLinearModel, make_request

from slidingserve.core import EngineLimits, Request, TimedBatch
from slidingserve.policies import PolicyContext, make_policy
from slidingserve.predictor import random_batch_shapes
from slidingserve.routing import ReplicaModel, make_router
from slidingserve.sim.cluster import (
    REFUSED_BY_ROUTER,
    ClusterLayout,
    replica_load,
    replica_seed,
    run_cluster,
)
from slidingserve.sim.engine import Simulator, SimulatorOptions
from slidingserve.sim.hardware import HardwareConfig

LIMITS = EngineLimits()
PROFILE = tuple(
    TimedBatch(shape, LinearTimer().sample_time(shape))
    for shape in random_batch_shapes(200, np.random.default_rng(0))
)
MODEL = ReplicaModel(TokenLinearModel(0.01, 1e-4), LIMITS.max_num_batched_tokens)


def engine(policy: str, kv_blocks: int = 10_000) -> Simulator:
    context = PolicyContext(LIMITS, TokenLinearModel(0.01, 1e-4), PROFILE)
    scheduler = make_policy(policy, context)
    return Simulator(scheduler, LinearTimer(), kv_blocks, SimulatorOptions(limits=LIMITS))


def burst(count: int = 60, seed: int = 0) -> list[Request]:
    """`count` requests of 50–1,500 prompt and 5–80 output tokens, about 20 a second."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.05, count))
    return [
        make_request(
            f"r{i}",
            arrival=float(arrivals[i]),
            prompt=int(rng.integers(50, 1500)),
            output=int(rng.integers(5, 80)),
            ttft=float(rng.uniform(0.2, 2.0)),
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("policy", ["sarathi-edf", "slidingserve", "qoserve", "vllm"])
@pytest.mark.parametrize("router", ["round-robin", "least-requests", "least-work"])
@pytest.mark.parametrize("kv_blocks", [10_000, 120])  # 120 blocks: preemptions
def test_one_replica_is_the_single_engine_token_for_token(
    policy: str, router: str, kv_blocks: int
) -> None:
    alone, clustered = burst(), burst()
    single = engine(policy, kv_blocks).run(alone)
    run = run_cluster([engine(policy, kv_blocks)], make_router(router, (MODEL,)), clustered)
    assert [r.token_times for r in run.merged.requests] == [r.token_times for r in single.requests]
    assert run.merged.num_preemptions == single.num_preemptions
    assert run.merged.num_iterations == single.num_iterations
    assert run.merged.num_fast_forwarded == single.num_fast_forwarded
    if kv_blocks == 120:
        assert single.num_preemptions > 0


@pytest.mark.parametrize("router", ["round-robin", "least-requests", "least-work", "slo-aware"])
def test_every_request_is_placed_once_and_served_or_refused(router: str) -> None:
    requests = burst(120, seed=3)
    models = (MODEL,) * 3
    engines = [engine("slidingserve") for _ in models]
    run = run_cluster(engines, make_router(router, models), requests)
    assert sorted(run.placements) == sorted(r.request_id for r in requests)
    assert sum(run.requests_per_replica) + run.refused_by_router == len(requests)
    for request in run.merged.requests:
        if run.placements[request.request_id] == REFUSED_BY_ROUTER:
            assert request.refused and not request.token_times
        elif not request.refused:
            assert len(request.token_times) == request.output_len
    for index, replica in enumerate(run.replicas):
        assert {r.request_id for r in replica.requests} == {
            rid for rid, placed in run.placements.items() if placed == index
        }
        assert replica.blocks_in_use_at_end == 0


def test_round_robin_spreads_requests_evenly() -> None:
    engines = [engine("sarathi-edf") for _ in range(4)]
    run = run_cluster(engines, make_router("round-robin", (MODEL,) * 4), burst(61))
    assert run.requests_per_replica == [16, 15, 15, 15]


def late(requests: list[Request]) -> int:
    """Requests refused or with a late first token."""
    return sum(1 for r in requests if r.refused or r.token_times[0] > r.ttft_deadline)


def test_two_replicas_serve_twice_the_load_better_than_one() -> None:
    """At about twice what one replica serves well, two replicas are far less late."""
    one = run_cluster([engine("sarathi-edf")], make_router("least-requests", (MODEL,)), burst(200))
    two = run_cluster(
        [engine("sarathi-edf"), engine("sarathi-edf")],
        make_router("least-requests", (MODEL, MODEL)),
        burst(200),
    )
    assert late(two.merged.requests) < late(one.merged.requests) / 2


def test_the_router_sees_requests_handed_over_but_not_yet_admitted() -> None:
    replica = engine("sarathi").replica()
    replica.submit(make_request("a", arrival=0.0, prompt=400))
    replica.advance(0.0)  # nothing starts before 0.0: "a" is handed over, not admitted
    seen = replica_load(replica, make_request("b", arrival=0.0))
    assert seen.outstanding == 1 and seen.queued_tokens == 400
    replica.advance(0.001)  # the first iteration starts at 0.0 and prefills all of "a"
    seen = replica_load(replica, make_request("c", arrival=0.001))
    assert seen.outstanding == 1 and seen.queued_tokens == 0 and seen.decode_contexts == (400,)
    assert seen.now == pytest.approx(0.01 + 400e-4)  # the replica's clock, past the arrival


def test_a_replica_refuses_a_request_out_of_arrival_order() -> None:
    replica = engine("sarathi").replica()
    replica.submit(make_request("a", arrival=1.0))
    with pytest.raises(ValueError, match=r"arrives at 0\.5 s, before the last one"):
        replica.submit(make_request("b", arrival=0.5))


def test_a_request_too_large_for_any_replica_stops_the_run_before_it_starts() -> None:
    requests = [make_request("small", prompt=20), make_request("big", arrival=1.0, prompt=100)]
    engines = [engine("sarathi"), engine("sarathi", kv_blocks=4)]
    with pytest.raises(ValueError, match="request big needs 7 KV blocks"):
        run_cluster(engines, make_router("round-robin", (MODEL, MODEL)), requests)
    assert not requests[0].token_times


def test_the_layout_is_checked_before_any_run() -> None:
    with pytest.raises(ValueError, match="at least one replica"):
        ClusterLayout(())
    with pytest.raises(ValueError, match="unknown router"):
        ClusterLayout((HardwareConfig(),), "random")
    with pytest.raises(ValueError, match="same model"):
        ClusterLayout((HardwareConfig(), HardwareConfig(model="llama-2-7b")))


def test_replica_zero_keeps_the_run_seed_and_the_others_differ() -> None:
    assert replica_seed(5, 0) == 5
    assert len({replica_seed(5, i) for i in range(8)} | {replica_seed(6, 0)}) == 9


def test_the_cluster_mutates_the_requests_it_is_given() -> None:
    requests = burst(10)
    before = copy.deepcopy(requests)
    run_cluster([engine("sarathi")], make_router("round-robin", (MODEL,)), requests)
    assert all(r.token_times for r in requests) and not any(r.token_times for r in before)
