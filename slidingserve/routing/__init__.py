"""Routers: which replica of a cluster serves an arriving request (docs/cluster.md).

A router sees one `ReplicaLoad` per replica, read when the request arrives, and answers
with a replica's index or None to refuse the request. It knows nothing of the simulator:
the cluster simulator (`sim/cluster.py`) builds the loads from its engines, and a serving
stack could build them from each replica's published state.
"""

from __future__ import annotations

from slidingserve.routing.base import ReplicaLoad, ReplicaModel, Router
from slidingserve.routing.routers import (
    LeastRequests,
    LeastWork,
    RoundRobin,
    SloAware,
)

ROUTERS: dict[str, type[Router]] = {
    RoundRobin.name: RoundRobin,
    LeastRequests.name: LeastRequests,
    LeastWork.name: LeastWork,
    SloAware.name: SloAware,
}


def router_class(name: str) -> type[Router]:
    """The router registered as `name`; a clear error naming the known ones otherwise."""
    try:
        return ROUTERS[name]
    except KeyError:
        known = ", ".join(ROUTERS)
        raise ValueError(f"unknown router {name!r}; known routers: {known}") from None


def make_router(name: str, replicas: tuple[ReplicaModel, ...]) -> Router:
    """The router `name` over `replicas` (one `ReplicaModel` per replica, in index order)."""
    return router_class(name)(replicas)


__all__ = [
    "ROUTERS",
    "LeastRequests",
    "LeastWork",
    "ReplicaLoad",
    "ReplicaModel",
    "RoundRobin",
    "Router",
    "SloAware",
    "make_router",
    "router_class",
]
