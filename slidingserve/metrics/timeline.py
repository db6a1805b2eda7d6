"""One request as every figure reads it: when it was due, its SLO, when its output came.

Latencies follow vLLM's benchmark: TTFT is the first chunk minus the send time, e2e the last
chunk minus the send time, TPOT (e2e − TTFT) / (output tokens − 1), ITL every gap between
consecutive chunks. Deadlines (eq. 1, `SLO.deadline`) count from the time the request was
due instead, and are read either cumulatively or per gap (`TbtReading`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from slidingserve.core.request import SLO

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

    from slidingserve.core.request import Request


class Outcome(enum.Enum):
    """How a request ended."""

    COMPLETED = "completed"  # every asked-for token arrived
    FAILED = "failed"  # an error ended it: judged, its missing tokens count as late
    CANCELLED = "cancelled"  # still running when the run was stopped: not judged


class TbtReading(enum.Enum):
    """How the deadlines of the tokens after the first are read."""

    CUMULATIVE = "cumulative"  # token k+1 late if after a + L_ttft + k·L_tbt (eq. 1)
    PER_GAP = "per-gap"  # a later token late if its gap to the previous one exceeds L_tbt


class Verdict(NamedTuple):
    """Which deadlines one judged request missed."""

    ttft: bool  # the first token late, or none came
    tbt: bool  # a later token past its cumulative deadline (eq. 1), or tokens missing
    tbt_per_gap: bool  # a gap between tokens over L_tbt, or tokens missing

    def tbt_late(self, reading: TbtReading) -> bool:
        """Whether a later token missed its deadline under `reading`."""
        return self.tbt if reading is TbtReading.CUMULATIVE else self.tbt_per_gap

    @property
    def cumulative(self) -> bool:
        return self.ttft or self.tbt

    @property
    def per_gap(self) -> bool:
        return self.ttft or self.tbt_per_gap


def received_tokens(chunk_tokens: Sequence[int], counted: int | None) -> int:
    """Output tokens received: the server's count when it sent one, else the chunks'."""
    return sum(chunk_tokens) if counted is None else counted


@dataclass(frozen=True, slots=True)
class Timeline:
    """What happened to one request, seconds on the run's clock.

    Output arrives in chunks: a streaming server sends one or a few tokens per event, the
    simulator emits one token at a time (`of_request`).
    """

    arrival: float  # when the request was due (a bench run's scheduled send): deadlines start
    slo: SLO  # seconds; its tier names the request's tier
    chunk_times: tuple[float, ...]  # when each chunk of output arrived
    chunk_tokens: tuple[int, ...] | None = None  # tokens in each chunk; None: one each
    outcome: Outcome = Outcome.COMPLETED
    output_tokens: int | None = None  # tokens as the server counted them; None: the chunks'
    sent: float | None = None  # when it was sent, if not at `arrival`: latencies start there

    @classmethod
    def of_request(cls, request: Request) -> Timeline:
        """A simulated request that has finished: sent on arrival, one token per chunk."""
        times = tuple(request.token_times)
        if request.refused:
            return cls(request.arrival, request.slo, (), outcome=Outcome.FAILED)
        if not times:
            raise ValueError(
                f"request {request.request_id} emitted no token: the run did not finish"
            )
        return cls(request.arrival, request.slo, times)

    @property
    def start(self) -> float:
        """Seconds: when the request was sent, where vLLM's latencies start."""
        return self.arrival if self.sent is None else self.sent

    @property
    def num_tokens(self) -> int:
        """Output tokens received (`received_tokens`)."""
        if self.chunk_tokens is None and self.output_tokens is None:
            return len(self.chunk_times)  # a token per chunk and no count: the simulator's
        return received_tokens(self.chunk_tokens or (), self.output_tokens)  # () if counted

    @property
    def token_times(self) -> npt.NDArray[np.float64]:
        """Arrival of every output token, seconds (see `_token_times`)."""
        return self._token_times(np.asarray(self.chunk_times, dtype=np.float64))

    @property
    def ttft(self) -> float | None:
        """Seconds from sending to the first chunk; None without one."""
        return self.chunk_times[0] - self.start if self.chunk_times else None

    @property
    def e2e(self) -> float | None:
        """Seconds from sending to the last chunk; None without one."""
        return self.chunk_times[-1] - self.start if self.chunk_times else None

    @property
    def tpot(self) -> float | None:
        """(e2e − TTFT) / (output tokens − 1), seconds; None with fewer than 2 tokens."""
        ttft, e2e, count = self.ttft, self.e2e, self.num_tokens
        if ttft is None or e2e is None or count < 2:
            return None
        return (e2e - ttft) / (count - 1)

    @property
    def itl(self) -> npt.NDArray[np.float64]:
        """Every gap between consecutive chunks, seconds."""
        return self.read().itl

    def verdict(self) -> Verdict | None:
        """The deadlines this request missed; None when it was cancelled (not judged)."""
        return self.read().verdict

    def first_late_token(self, reading: TbtReading) -> int | None:
        """Index of the first output token that missed its deadline under `reading` (0: the
        first token; the count of received tokens: a failed request's first missing one);
        None if none did or the request was cancelled. Not None exactly when the verdict
        says it violated under `reading`."""
        if self.outcome is Outcome.CANCELLED:
            return None
        times = self.token_times
        late, gap_late = self._late_masks(times)
        if reading is TbtReading.PER_GAP and late.size:
            late = np.concatenate((late[:1], gap_late))
        if late.any():
            return int(np.argmax(late))
        return times.size if self.outcome is Outcome.FAILED or times.size == 0 else None

    def meets_vllm_goodput(self) -> bool:
        """vLLM's `--goodput ttft:L_ttft tpot:L_tbt` test with the request's own SLO (a
        one-token request has TPOT 0)."""
        ttft, tpot = self.ttft, self.tpot
        if self.outcome is not Outcome.COMPLETED or ttft is None:
            return False
        return ttft <= self.slo.ttft and (tpot or 0.0) <= self.slo.tbt

    def read(self) -> Reading:
        """Every figure of this request at once (its times converted to an array once)."""
        chunks = np.asarray(self.chunk_times, dtype=np.float64)
        return Reading(
            outcome=self.outcome,
            tokens=self.num_tokens,
            ttft=self.ttft,
            tpot=self.tpot,
            e2e=self.e2e,
            itl=np.diff(chunks),
            verdict=self._judge(self._token_times(chunks)),
            meets_vllm_goodput=self.meets_vllm_goodput(),
        )

    def _token_times(self, chunks: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Every token's arrival, from the chunks' arrivals. A chunk of k tokens gives k
        equal times. Tokens the server counts beyond the chunks arrived by the last chunk
        (they are given its time); if it counts fewer, the last ones are dropped but the
        last chunk's time is kept for the final token."""
        times = chunks if self.chunk_tokens is None else np.repeat(chunks, self.chunk_tokens)
        count = self.num_tokens
        if times.size == 0 or count == times.size:
            return times
        if count > times.size:
            return np.concatenate((times, np.full(count - times.size, times[-1])))
        return np.concatenate((times[: count - 1], times[-1:])) if count else times[:0]

    def _judge(self, times: npt.NDArray[np.float64]) -> Verdict | None:
        """The verdict on tokens that arrived at `times`. A failed request missed its first
        token's deadline if no token came, else those of the tokens that never came (TBT,
        in both readings); a cancelled one is not judged."""
        if self.outcome is Outcome.CANCELLED:
            return None
        if times.size == 0:
            return Verdict(ttft=True, tbt=False, tbt_per_gap=False)
        late, gap_late = self._late_masks(times)
        missing = self.outcome is Outcome.FAILED
        return Verdict(
            ttft=bool(late[0]),
            tbt=bool(late[1:].any()) or missing,
            tbt_per_gap=bool(gap_late.any()) or missing,
        )

    def _late_masks(
        self, times: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """For tokens that arrived at `times`: which are past their deadline (eq. 1), and
        which of the gaps between consecutive tokens exceed L_tbt (gap k: before token k+1)."""
        late = times > self.slo.deadline(self.arrival, np.arange(times.size))
        return late, np.diff(times) > self.slo.tbt


class Reading(NamedTuple):
    """The figures of one request (`Timeline.read`), seconds."""

    outcome: Outcome
    tokens: int  # output tokens received
    ttft: float | None  # None without a token
    tpot: float | None  # None with fewer than 2 tokens
    e2e: float | None  # None without a token
    itl: npt.NDArray[np.float64]  # every gap between consecutive chunks
    verdict: Verdict | None  # None: cancelled, not judged
    meets_vllm_goodput: bool
