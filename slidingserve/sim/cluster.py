"""Many replicas behind a router (docs/cluster.md): each replica its own engine, policy,
KV cache and GPU; the router places each request when it arrives.

The cluster advances every replica to the next arrival (each runs the iterations that
start before it, and decode-only runs stop there), reads one `ReplicaLoad` per replica,
asks the router, and hands the request to the chosen replica or refuses it. A replica's
state at that moment includes the iteration it is running (as the engine's own counters
would after the step). With one replica and a router that never refuses, the run is the
single engine's, token for token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slidingserve.core.prefix_cache import PrefixCachingKV
from slidingserve.core.queue_fit import QueuedPrefill
from slidingserve.core.request import DECODING, PREFILLING, Phase
from slidingserve.routing import ReplicaLoad, router_class
from slidingserve.sim.engine import PrefixCacheStats, SimulationRun
from slidingserve.sim.hardware import HardwareConfig

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.request import Request
    from slidingserve.routing import Router
    from slidingserve.sim.engine import Replica, Simulator

REPLICA_SEED_STRIDE = 1_000_003
"""Apart from replica 0, each replica's GPU noise is drawn from the run's seed plus this
many times its index: independent of the others, the same on every run of that seed."""

DEFAULT_ROUTER = "least-requests"
"""The router a cluster gets when none is named: what load balancers commonly do."""

REFUSED_BY_ROUTER = -1
"""The replica index `ClusterRun.placements` gives a request the router refused."""


@dataclass(frozen=True, slots=True)
class ClusterRun:
    """What a cluster's run leaves behind: the whole cluster as one run, each replica's
    own, and where each request went."""

    merged: SimulationRun  # every request (router refusals included), counters summed
    replicas: list[SimulationRun]  # each replica's run, in index order
    placements: dict[str, int]  # request id -> replica index, REFUSED_BY_ROUTER if refused

    @property
    def requests_per_replica(self) -> list[int]:
        """Requests each replica was handed."""
        counts = [0] * len(self.replicas)
        for index in self.placements.values():
            if index != REFUSED_BY_ROUTER:
                counts[index] += 1
        return counts

    @property
    def refused_by_router(self) -> int:
        return sum(1 for index in self.placements.values() if index == REFUSED_BY_ROUTER)


@dataclass(frozen=True, slots=True)
class ClusterFigures:
    """What a cluster run adds to the metrics of its requests."""

    router: str
    requests_per_replica: tuple[int, ...]  # requests each replica was handed, by index
    refused_by_router: int  # requests no replica was predicted to serve in time

    @classmethod
    def of(cls, layout: ClusterLayout, run: ClusterRun) -> ClusterFigures:
        return cls(layout.router, tuple(run.requests_per_replica), run.refused_by_router)

    def row(self) -> dict[str, object]:
        """Flat fields for tables and CSV files."""
        return {
            "replicas": len(self.requests_per_replica),
            "router": self.router,
            "requests_per_replica": "/".join(map(str, self.requests_per_replica)),
            "refused_by_router": self.refused_by_router,
        }


def run_cluster(
    engines: Sequence[Simulator], router: Router, requests: Sequence[Request]
) -> ClusterRun:
    """Serve `requests` (mutated in place) on one replica per engine, placed by `router`.
    Every request must fit every replica's KV cache (ValueError naming the first that does
    not, before anything runs), as on a single engine."""
    if len(engines) != len(router.replicas):
        raise ValueError(f"{len(engines)} engines but the router knows {len(router.replicas)}")
    for engine in engines:
        engine.check_fits(requests)
    replicas = [engine.replica((), expected=requests) for engine in engines]
    placements: dict[str, int] = {}
    for request in sorted(requests, key=lambda r: r.arrival):
        for replica in replicas:
            replica.advance(request.arrival)
        loads = [replica_load(replica, request, router.reads_prefixes) for replica in replicas]
        chosen = router.route(request, loads)
        if chosen is None:
            _refuse(request)
            placements[request.request_id] = REFUSED_BY_ROUTER
            continue
        replicas[chosen].submit(request)
        placements[request.request_id] = chosen
    for replica in replicas:
        replica.advance(math.inf)
    runs = [replica.finished_run() for replica in replicas]
    return ClusterRun(_merged(requests, runs), runs, placements)


def replica_load(replica: Replica, request: Request, read_prefix: bool = False) -> ReplicaLoad:
    """What the router reads of `replica` as `request` arrives; `read_prefix`: also the
    tokens of its prompt the replica's prefix cache holds (asked without keeping anything
    in that cache)."""
    state = replica.state
    queued = [*state.pending, *state.waiting]
    queued += [r for r in state.running if r.phase is PREFILLING]
    decodes = [r for r in state.running if r.phase is DECODING]
    kv = state.kv
    hit = kv.resident_prefix(request) if read_prefix and isinstance(kv, PrefixCachingKV) else 0
    return ReplicaLoad(
        now=max(state.now, request.arrival),
        outstanding=len(state.pending) + len(state.waiting) + len(state.running),
        prefills=tuple(QueuedPrefill(r.next_deadline, r.remaining_prefill) for r in queued),
        decode_contexts=tuple(r.num_computed for r in decodes),
        decode_tbt=min((r.slo.tbt for r in decodes), default=None),
        prefix_hit=hit,
    )


def _refuse(request: Request) -> None:
    """Finish `request` at the router, without a token (a violation)."""
    request.phase = Phase.FINISHED
    request.refused = True


def _merged(requests: Sequence[Request], runs: list[SimulationRun]) -> SimulationRun:
    stats = [run.prefix_cache for run in runs if run.prefix_cache is not None]
    prefix = None
    if stats:
        prefix = PrefixCacheStats(
            sum(s.queried_tokens for s in stats), sum(s.hit_tokens for s in stats)
        )
    return SimulationRun(
        sorted(requests, key=lambda r: r.arrival),
        max((run.end_time for run in runs), default=0.0),
        sum(run.num_iterations for run in runs),
        sum(run.num_fast_forwarded for run in runs),
        sum(run.num_preemptions for run in runs),
        sorted((log for run in runs for log in run.iterations), key=lambda log: log.start),
        sum(run.blocks_in_use_at_end for run in runs),
        {key: trace for run in runs for key, trace in run.traces.items()},
        prefix,
    )


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """A cluster to simulate: the hardware of each replica and the router in front."""

    replicas: tuple[HardwareConfig, ...]  # one per replica, in index order
    router: str = DEFAULT_ROUTER  # a key of slidingserve.routing.ROUTERS

    def __post_init__(self) -> None:
        if not self.replicas:
            raise ValueError("a cluster needs at least one replica")
        router_class(self.router)  # unknown names fail here, before any run
        models = sorted({hardware.model for hardware in self.replicas})
        if len(models) > 1:
            raise ValueError(f"every replica must serve the same model, got {', '.join(models)}")

    @property
    def size(self) -> int:
        return len(self.replicas)


def replica_seed(seed: int, index: int) -> int:
    """The noise seed of replica `index` in a run with `seed` (replica 0 keeps `seed`, so a
    one-replica cluster is the single engine)."""
    return seed + REPLICA_SEED_STRIDE * index
