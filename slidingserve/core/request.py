"""A request with its latency SLO, per-token deadlines and progress.

Units: seconds for every time, tokens for every length.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from slidingserve.core.prefix import Run, check_runs

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy as np
    import numpy.typing as npt

MAX_SLO_SECONDS = 3600.0
"""An SLO beyond an hour is a mistake in units, not a latency target."""


class Phase(enum.Enum):
    """Which queue a request sits in."""

    WAITING = "waiting"
    """Arrived, nothing of it in the KV cache (also after a preemption by recompute)."""
    PREFILLING = "prefilling"
    """Part of its prefill is cached; chunked prefill continues over iterations."""
    DECODING = "decoding"
    """Prefill done, one token per iteration until the output is complete."""
    FINISHED = "finished"
    """Every output token emitted, or refused at admission (`Request.refused`)."""


# The phases under plain module names, for the loops that test the phase of every request
# at every iteration: reading a member off an Enum class costs ~0.1 µs in Python 3.11.
WAITING = Phase.WAITING
PREFILLING = Phase.PREFILLING
DECODING = Phase.DECODING
FINISHED = Phase.FINISHED


@dataclass(frozen=True, slots=True)
class SLO:
    """Latency targets of one request."""

    ttft: float  # time to first token, seconds
    tbt: float  # time between tokens (per-token deadline step), seconds
    protected: bool = False  # premium request: scheduled ahead of unprotected ones
    tier: str | None = None  # tier name for per-tier reports

    def __post_init__(self) -> None:
        for name, value in (("ttft", self.ttft), ("tbt", self.tbt)):
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"SLO {name} must be a number of seconds, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"SLO {name} must be positive and finite, got {value!r} s")
            if value > MAX_SLO_SECONDS:
                raise ValueError(
                    f"SLO {name} of {value} s is over {MAX_SLO_SECONDS:.0f} s; "
                    "was it given in milliseconds?"
                )

    def scaled(self, factor: float) -> SLO:
        """The same SLO with both targets multiplied by `factor`."""
        return SLO(self.ttft * factor, self.tbt * factor, self.protected, self.tier)

    @overload
    def deadline(self, arrival: float, k: int) -> float: ...
    @overload
    def deadline(self, arrival: float, k: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]: ...
    def deadline(self, arrival: float, k: Any) -> Any:
        """d_{k+1} = a + L_ttft + k·L_tbt, eq. (1): when output token k+1 (k = 0: the first)
        of a request due at `arrival` must have come out, seconds; elementwise for an array
        of `k`. The home of the formula: `Request.deadline` (what the scheduler plans for)
        and the metrics' verdicts (`slidingserve.metrics`) read it here; the hot paths
        (`Request.next_deadline`, `next_deadlines`) write it out with the same operations,
        so every reading gives the same float (tests/core check it)."""
        return arrival + self.ttft + k * self.tbt


@dataclass(slots=True, eq=False)
class Request:
    """One request and its progress through the engine.

    `num_computed` counts tokens whose KV is cached. After a preemption by recompute the
    request starts over: its prefill target becomes the prompt plus the tokens it had
    generated, and it emits its next token when that prefill completes.
    """

    request_id: str
    arrival: float  # seconds
    prompt_len: int  # tokens
    output_len: int  # tokens to generate (known in simulation; max_tokens when serving)
    slo: SLO
    phase: Phase = Phase.WAITING
    num_computed: int = 0  # tokens in the KV cache
    num_generated: int = 0  # output tokens emitted so far
    num_preemptions: int = 0
    token_times: list[float] = field(default_factory=list)  # emission time of each token
    refused: bool = False  # finished at once by admission control, no token emitted
    # Admitted before the engine (an API server's queue test on arrival): the engine's own
    # test of a request just arrived passes it; it may still be refused once hopeless
    admitted: bool = False
    # The tokens of the prompt then the output as content runs (`core/prefix.py`), for a
    # prefix cache; empty: unknown, nothing shared with any other request
    content: tuple[Run, ...] = ()

    def __post_init__(self) -> None:
        if self.prompt_len < 1:
            raise ValueError(f"request {self.request_id}: prompt must have a token")
        if self.output_len < 1:
            raise ValueError(f"request {self.request_id}: output must have a token")
        if not math.isfinite(self.arrival) or self.arrival < 0:
            raise ValueError(f"request {self.request_id}: bad arrival time {self.arrival!r}")
        if self.content:
            check_runs(self.content, self.prompt_len + self.output_len, self.request_id)

    @property
    def protected(self) -> bool:
        return self.slo.protected

    @property
    def prefill_target(self) -> int:
        """Tokens to prefill before the next token comes out."""
        return self.prompt_len + self.num_generated

    @property
    def remaining_prefill(self) -> int:
        """r_i: prefill tokens still to compute (0 while decoding)."""
        phase = self.phase
        if phase is DECODING or phase is FINISHED:
            return 0
        # prefill_target − num_computed, without the property call: schedulers read it
        # for every queued request at every iteration
        return self.prompt_len + self.num_generated - self.num_computed

    @property
    def remaining_output(self) -> int:
        return self.output_len - self.num_generated

    @property
    def ttft_deadline(self) -> float:
        return self.slo.deadline(self.arrival, 0)

    def deadline(self, k: int) -> float:
        """d_{i,k+1}: deadline of output token k+1 (k = 0 is the first token), eq. (1)."""
        return self.slo.deadline(self.arrival, k)

    @property
    def next_deadline(self) -> float:
        """Deadline of the next token this request will emit."""
        slo = self.slo
        # `SLO.deadline` written out (same operations, same order): read at every iteration
        return self.arrival + slo.ttft + self.num_generated * slo.tbt

    def slack(self, now: float) -> float:
        """s_i(t): time left before the next token's deadline, seconds (≤ 0: lost)."""
        return self.next_deadline - now

    def is_lost(self, now: float) -> bool:
        return self.next_deadline <= now


def remaining_prefills(requests: Iterable[Request]) -> list[int]:
    """`Request.remaining_prefill` of each of `requests`, in one pass (no call per request)."""
    return [
        0
        if (phase := r.phase) is DECODING or phase is FINISHED
        else r.prompt_len + r.num_generated - r.num_computed
        for r in requests
    ]


def next_deadlines(requests: Iterable[Request]) -> list[float]:
    """`Request.next_deadline` of each of `requests`, in one pass (no call per request):
    the schedulers read the deadline of every queued request at every iteration."""
    return [r.arrival + (slo := r.slo).ttft + r.num_generated * slo.tbt for r in requests]
