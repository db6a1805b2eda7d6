"""Scheduling policies, chosen by name from `POLICIES`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slidingserve.policies.base import IterationRecord, Policy, PolicyContext
from slidingserve.policies.qoserve import QoServePolicy
from slidingserve.policies.random_chunk import RandomChunkPolicy
from slidingserve.policies.sarathi import SarathiPolicy
from slidingserve.policies.sarathi_edf import SarathiEdfPolicy
from slidingserve.policies.scorpio import ScorpioPolicy
from slidingserve.policies.slidingserve import (
    SlidingChunkerEdfPolicy,
    SlidingChunkerMlpsPolicy,
    SlidingServePaperPolicy,
    SlidingServePolicy,
)
from slidingserve.policies.vllm_fcfs import VllmPolicy, VllmPriorityPolicy

if TYPE_CHECKING:
    from collections.abc import Mapping

POLICIES: dict[str, type[Policy]] = {
    VllmPolicy.name: VllmPolicy,
    VllmPriorityPolicy.name: VllmPriorityPolicy,
    SarathiPolicy.name: SarathiPolicy,
    SarathiEdfPolicy.name: SarathiEdfPolicy,
    QoServePolicy.name: QoServePolicy,
    ScorpioPolicy.name: ScorpioPolicy,
    SlidingServePolicy.name: SlidingServePolicy,
    SlidingServePaperPolicy.name: SlidingServePaperPolicy,
    SlidingChunkerEdfPolicy.name: SlidingChunkerEdfPolicy,
    SlidingChunkerMlpsPolicy.name: SlidingChunkerMlpsPolicy,
    RandomChunkPolicy.name: RandomChunkPolicy,
}


LABEL_SEPARATOR = "#"
"""`slidingserve#w2` is the policy `slidingserve` under the label `w2`: an experiment can
compare several configurations of one policy, each with its own options."""


def get_policy_class(name: str) -> type[Policy]:
    """The policy class registered as `name` (label ignored); a clear error if unknown."""
    base = name.split(LABEL_SEPARATOR, 1)[0]
    try:
        return POLICIES[base]
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {base!r}; known policies: {known}") from None


def make_policy(
    name: str, context: PolicyContext, options: Mapping[str, Any] | None = None
) -> Policy:
    """Build the policy `name` with its options (a mapping of its config fields)."""
    return get_policy_class(name).from_options(context, options)


def unrecorded(
    policy_class: type[Policy], options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """`options` for a policy that runs where nobody reads its decision records (a
    simulation, a server): a policy that records a decision per iteration (its path and
    time per component, which `benchmarks/sched_overhead.py` reads) does not, unless
    `options` ask for it. A server runs for days and a goodput search simulates hundreds of
    runs: the records would cost memory (about 360 bytes each, up to a million) and time."""
    chosen = dict(options or {})
    config = getattr(policy_class, "config_type", None)
    fields = getattr(config, "__dataclass_fields__", {})
    if "record_decisions" in fields and "record_decisions" not in chosen:
        chosen["record_decisions"] = False
    return chosen


__all__ = [
    "POLICIES",
    "IterationRecord",
    "Policy",
    "PolicyContext",
    "get_policy_class",
    "make_policy",
    "unrecorded",
]
