"""SLO tiers: a workload may give each request a tier with its own targets and protection.

A tier's targets multiply the request's class SLO (so a "premium" tier stays proportionate
on a mix of chat and summarisation), unless it gives them in seconds. Tiers are assigned by
a fixed mix (an exact, evenly spread pattern that follows the weights) or at random with
the weights, from a random stream of its own so that lengths and arrivals stay the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from slidingserve.core.checks import require_positive
from slidingserve.core.request import SLO

Assignment = Literal["random", "fixed"]


@dataclass(frozen=True, slots=True)
class Tier:
    """One service tier."""

    name: str
    weight: float = 1.0  # share of the requests, relative to the other tiers
    ttft_factor: float = 1.0  # multiplies the class TTFT target
    tbt_factor: float = 1.0  # multiplies the class TBT target
    protected: bool = False  # premium: scheduled ahead of unprotected requests
    ttft: float | None = None  # seconds; overrides the factor
    tbt: float | None = None  # seconds; overrides the factor

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a tier needs a name")
        for field_name in ("weight", "ttft_factor", "tbt_factor"):
            require_positive(f"tier {self.name}: {field_name}", getattr(self, field_name))
        if not isinstance(self.protected, bool):
            raise ValueError(f"tier {self.name}: protected must be true or false")
        SLO(self.ttft or 1.0, self.tbt or 1.0)  # validates explicit targets

    def slo(self, class_slo: SLO) -> SLO:
        """This tier's SLO for a request whose class SLO is `class_slo`."""
        ttft = self.ttft if self.ttft is not None else class_slo.ttft * self.ttft_factor
        tbt = self.tbt if self.tbt is not None else class_slo.tbt * self.tbt_factor
        return SLO(ttft, tbt, self.protected, self.name)


@dataclass(frozen=True, slots=True)
class TierMix:
    """The tiers of a workload and how requests are dealt to them."""

    tiers: tuple[Tier, ...]
    assignment: Assignment = "random"

    def __post_init__(self) -> None:
        if not self.tiers:
            raise ValueError("a tier mix needs at least one tier")
        names = [tier.name for tier in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be distinct, got {names}")
        if self.assignment not in ("random", "fixed"):
            raise ValueError(
                f"tier assignment must be 'random' or 'fixed', got {self.assignment!r}"
            )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tier.name for tier in self.tiers)

    def assign(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """The tier index of each of `count` requests."""
        weights = np.array([tier.weight for tier in self.tiers], dtype=np.float64)
        shares = weights / weights.sum()
        if self.assignment == "random":
            return rng.choice(len(self.tiers), size=count, p=shares)
        return _even_pattern(shares, count)


def _even_pattern(shares: np.ndarray, count: int) -> np.ndarray:
    """Request i goes to the tier furthest behind its share after i requests (exact mix)."""
    dealt = np.zeros(shares.size)
    pattern = np.empty(count, dtype=np.int64)
    for i in range(count):
        tier = int(np.argmax(shares * (i + 1) - dealt))
        pattern[i] = tier
        dealt[tier] += 1
    return pattern


TIER_PRESETS: dict[str, TierMix] = {
    "premium-standard": TierMix(
        (
            Tier("premium", weight=1.0, ttft_factor=0.5, protected=True),
            Tier("standard", weight=4.0, ttft_factor=1.5, tbt_factor=2.0),
        )
    ),
    "interactive-batch": TierMix(
        (
            Tier("interactive", weight=1.0),
            Tier("batch", weight=1.0, ttft_factor=5.0, tbt_factor=4.0),
        ),
        assignment="fixed",
    ),
}
"""Named tier mixes: premium 20% (half the TTFT, protected) beside standard 80% (1.5× TTFT,
2× TBT); interactive and batch half and half, dealt in a fixed alternation."""


def get_tier_mix(name: str) -> TierMix:
    if name not in TIER_PRESETS:
        raise ValueError(f"unknown tier preset {name!r}; known: {', '.join(TIER_PRESETS)}")
    return TIER_PRESETS[name]
