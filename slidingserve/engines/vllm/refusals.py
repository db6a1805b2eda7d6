"""Admission control inside vLLM: requests a policy refuses finish before the step runs,
and their clients hear why.

A refused request is finished as aborted (`finish_requests`, which frees it and tells the
workers through the step's output), and the step's engine output carries, for its client,
an output with no token, finish reason `abort` and stop reason `REFUSED_REASON` instead of
a late answer. Behind `serve`'s API server its client gets a 503 (or 429) for it
(`refused_answers.py`); offline, `LLM.generate` returns the output with that stop reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason
from vllm.v1.request import RequestStatus

from slidingserve.core.slo_args import REFUSED_REASON

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["REFUSED_REASON", "Refusals"]


class FinishesRequests(Protocol):
    def finish_requests(self, request_ids: Iterable[str], finished_status: Any) -> Any: ...


class Refusals:
    """Refused requests between the step's schedule and its output."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, str]] = []  # (client index, request id)
        self.count = 0  # requests refused since the engine started

    def refuse(self, scheduler: FinishesRequests, request_ids: Iterable[str]) -> None:
        """Finish `request_ids` as aborted now; their outputs go with the step's."""
        finished = scheduler.finish_requests(list(request_ids), RequestStatus.FINISHED_ABORTED)
        self._pending += [(request.client_index, request.request_id) for request in finished]
        self.count += len(finished)

    def report(self, outputs: dict[int, EngineCoreOutputs]) -> dict[int, EngineCoreOutputs]:
        """`outputs` (the step's, by client index) with one output per refused request."""
        for client, request_id in self._pending:
            refused = EngineCoreOutput(
                request_id=request_id,
                new_token_ids=[],
                finish_reason=FinishReason.ABORT,
                stop_reason=REFUSED_REASON,
            )
            outputs.setdefault(client, EngineCoreOutputs()).outputs.append(refused)
        self._pending.clear()
        return outputs

    def __len__(self) -> int:
        """Refused requests whose clients are not told yet: 0 between steps."""
        return len(self._pending)
