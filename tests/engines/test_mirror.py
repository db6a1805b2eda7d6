"""The request mirror with plain stand-ins for vLLM's requests: progress and first tokens."""

from __future__ import annotations

from dataclasses import dataclass

from slidingserve.core.request import SLO, Phase
from slidingserve.engines.vllm.mirror import RequestMirror


@dataclass
class StandIn:
    """What the mirror reads of a vLLM request."""

    request_id: str
    arrival_time: float = 10.0
    num_prompt_tokens: int = 20
    num_computed_tokens: int = 0
    max_tokens: int = 8
    num_output_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens


def test_the_first_token_s_time_is_kept_once() -> None:
    mirror, request = RequestMirror(), StandIn("a")
    core = mirror.add(request, SLO(1.0, 0.05))
    mirror.note_first_token(request, 10.2)  # prefill not done: no token yet
    assert core.token_times == []
    request.num_computed_tokens, request.num_output_tokens = 20, 1
    mirror.note_first_token(request, 10.7)
    for k in range(2, 9):  # later tokens leave it alone: the state stays one float
        request.num_computed_tokens, request.num_output_tokens = 19 + k, k
        mirror.note_first_token(request, 10.7 + 0.05 * k)
    assert core.token_times == [10.7]


def test_sync_copies_progress_and_leaves_the_first_token_time() -> None:
    mirror, request = RequestMirror(), StandIn("a", num_computed_tokens=20, num_output_tokens=1)
    mirror.add(request, SLO(1.0, 0.05))
    mirror.note_first_token(request, 11.0)
    request.num_computed_tokens, request.num_output_tokens = 21, 2
    core = mirror.sync(request, waiting=False)
    assert core is not None
    assert (core.num_computed, core.num_generated, core.phase) == (21, 2, Phase.DECODING)
    assert core.token_times == [11.0]


def test_unknown_or_forgotten_requests_are_ignored() -> None:
    mirror = RequestMirror()
    mirror.note_first_token(StandIn("nobody", num_output_tokens=1), 1.0)
    assert len(mirror) == 0
    request = StandIn("gone", num_output_tokens=1)
    mirror.add(request, SLO(1.0, 0.05))
    mirror.forget_all_but(set())
    mirror.note_first_token(request, 2.0)
    assert mirror.get("gone") is None
