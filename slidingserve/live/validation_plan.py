"""How long a validation's live trials may take: the plan checked against the budget, and
the progress told as they run (`validation.py`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slidingserve.live.validation import ValidationSettings

SERVER_START_S = 45.0  # a small model's server on two cores
BURST_RATE = 1000.0  # req/s: a burst's requests all arrive within a fraction of a second


class Progress:
    """What is left of the planned trials, in expected seconds, told after each."""

    def __init__(self, planned_s: float, say: Callable[[str], None], clock: Callable[[], float]):
        self.planned_s = planned_s
        self.done_s = 0.0
        self.say = say
        self.clock = clock
        self.start = clock()

    def advance(self, expected_s: float, what: str) -> None:
        self.done_s += expected_s
        elapsed = self.clock() - self.start
        pace = elapsed / self.done_s if self.done_s > 0 else 1.0
        left = max(0.0, self.planned_s - self.done_s) * pace
        share = min(1.0, self.done_s / self.planned_s) if self.planned_s > 0 else 1.0
        bar = "#" * round(20 * share)
        self.say(f"[{bar:<20}] {what} · {elapsed / 60:.1f} min elapsed, ~{left / 60:.1f} min left")

    def skip(self, expected_s: float) -> None:
        """Planned work that was not needed (negative: work added to the plan)."""
        self.planned_s -= expected_s


def trial_seconds(requests: int, rate: float, capacity: float) -> float:
    """A trial's expected wall time: its arrivals, then the backlog the engine still holds."""
    arrivals = requests / rate
    drain = max(0.0, requests / capacity - arrivals) + 3.0
    return arrivals + drain


def startup_seconds(settings: ValidationSettings, capacity: float) -> float:
    """A server's start and its warm-up burst."""
    return SERVER_START_S + trial_seconds(settings.warmup_requests, BURST_RATE, capacity)


def closing_seconds(settings: ValidationSettings, capacity: float) -> float:
    """The reference server started again at the end, warmed up, and its capacity run."""
    requests = settings.capacity_requests or settings.live.requests
    return startup_seconds(settings, capacity) + trial_seconds(requests, BURST_RATE, capacity)


def planned_seconds(settings: ValidationSettings, policies: int, capacity: float) -> float:
    """What the live trials take at most on the grid: every rate, seed and policy, servers
    and warm-ups included (a curve that leaves the grid adds its extra rates), and the
    capacity measured again at the end."""
    live = settings.live
    rates = [load * capacity for load in settings.loads]
    per_policy = sum(trial_seconds(live.requests, rate, capacity) for rate in rates)
    per_policy *= len(settings.seeds)
    trials = policies * (per_policy + startup_seconds(settings, capacity))
    return trials + closing_seconds(settings, capacity)


def check_budget(
    settings: ValidationSettings, policies: int, capacity: float, source: str = "measured"
) -> float:
    """The planned seconds; ValueError saying what to cut when they exceed the budget."""
    planned = planned_seconds(settings, policies, capacity)
    if planned > settings.budget_s:
        raise ValueError(
            f"the live trials could take {planned / 60:.0f} min at a {source} capacity of "
            f"{capacity:.2f} req/s, over the budget of {settings.budget_s / 60:.0f} min: "
            "give fewer --requests, --seeds, --loads or policies, or a larger --budget"
        )
    return planned
