"""What a router reads of each replica, and the contract every router keeps."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from slidingserve.core.batch import BatchShape
from slidingserve.predictor import PrefillQueueProfile, batch_features, time_to_budget

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.core.queue_fit import QueuedPrefill
    from slidingserve.core.request import Request
    from slidingserve.predictor import LatencyModel


@dataclass(frozen=True, slots=True)
class ReplicaModel:
    """What a router knows of a replica before any request: how fast its GPU is."""

    predictor: LatencyModel | None  # batch time, fitted on the replica's own GPU (as the
    # policies'); None where the router predicts nothing (`Router.needs_models` False)
    max_tokens: int  # tokens of its largest batch (the engine's max_num_batched_tokens)

    def _model(self) -> LatencyModel:
        if self.predictor is None:
            raise ValueError("this replica model has no predictor")
        return self.predictor

    def prefill_rate(self, decode_contexts: Sequence[int]) -> float:
        """Prefill tokens a second in full batches beside `decode_contexts` (one KV length
        per decode): what the replica can give a queue at best; 0 when the decodes fill
        every batch."""
        chunk = self.max_tokens - len(decode_contexts)
        if chunk <= 0:
            return 0.0
        shape = BatchShape(tuple(decode_contexts), ((chunk, 0),))
        seconds = self._model().predict_features(*batch_features(shape))
        return chunk / seconds if seconds > 0 else float("inf")

    def paced_prefill_rate(self, decode_contexts: Sequence[int], seconds: float) -> float:
        """Prefill tokens a second in iterations of at most `seconds` beside
        `decode_contexts`: what the replica gives a queue while its decodes keep a TBT of
        `seconds` (the most prefill tokens predicted to fit, ÷ `seconds`); 0 when the
        decodes alone take longer. Without decodes, `prefill_rate`."""
        if not decode_contexts:
            return self.prefill_rate(decode_contexts)
        cap = self.max_tokens - len(decode_contexts)
        if cap <= 0:
            return 0.0
        profile = PrefillQueueProfile(decode_contexts, [(cap, 0)])
        budget = time_to_budget(self._model(), profile, seconds, self.max_tokens)
        return budget.prefill_tokens / seconds if budget.fits else 0.0


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """One replica as a router sees it when a request arrives."""

    now: float  # seconds, the clock the deadlines are on
    outstanding: int  # requests it holds, queued or running
    prefills: tuple[QueuedPrefill, ...]  # queued prefill work (deadline of each request's
    # next token, prompt tokens left), in no particular order
    decode_contexts: tuple[int, ...]  # KV tokens of each decoding request
    decode_tbt: float | None  # the tightest TBT of those decodes, seconds; None without
    prefix_hit: int  # tokens of the arriving request's prompt its prefix cache holds (0
    # unless the router reads it, `Router.reads_prefixes`)

    @property
    def queued_tokens(self) -> int:
        """Prompt tokens still to prefill."""
        return sum(entry.tokens for entry in self.prefills)


class Router(ABC):
    """Chooses the replica of each arriving request, in arrival order."""

    name: ClassVar[str]
    needs_models: ClassVar[bool] = False  # predicts with each replica's predictor
    reads_prefixes: ClassVar[bool] = False  # reads `ReplicaLoad.prefix_hit`

    def __init__(self, replicas: tuple[ReplicaModel, ...]) -> None:
        if not replicas:
            raise ValueError("a cluster needs at least one replica")
        if self.needs_models and any(model.predictor is None for model in replicas):
            raise ValueError(f"the {self.name} router needs each replica's predictor")
        self.replicas = replicas

    @abstractmethod
    def route(self, request: Request, loads: Sequence[ReplicaLoad]) -> int | None:
        """Called once per request when it arrives, with one load per replica (in index
        order, read at that moment). Returns the index of the replica that serves it, or
        None to refuse it (it gets no token and counts as a violation)."""
