"""The request mirror with plain stand-ins for vLLM's requests: progress, first tokens, the
policy's view and the step's batch."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from slidingserve.core.batch import BatchShape
from slidingserve.core.kv_blocks import KVBlockManager
from slidingserve.core.request import SLO, Phase
from slidingserve.core.view import EngineLimits
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
    num_output_placeholders: int = 0  # tokens in flight (async scheduling)

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


def mirrored(*requests: StandIn) -> RequestMirror:
    mirror = RequestMirror()
    for request in requests:
        mirror.add(request, SLO(1.0, 0.05))
    return mirror


def test_the_view_holds_the_engine_s_queues_in_their_order() -> None:
    decoding = StandIn("d", num_computed_tokens=21, num_output_tokens=2)
    prefilling = StandIn("p", num_prompt_tokens=100, num_computed_tokens=64)
    held, new = StandIn("h", num_computed_tokens=16), StandIn("w")
    mirror = mirrored(decoding, prefilling, held, new)
    running = [prefilling, StandIn("unknown"), decoding]
    view = mirror.view(5.0, [held, new], running, EngineLimits(), KVBlockManager(10, 16))
    assert [r.request_id for r in view.waiting] == ["h", "w"]
    assert [r.request_id for r in view.running] == ["p", "d"]  # no mirror, no place
    assert [r.request_id for r in view.prefilling] == ["p"]
    assert [r.request_id for r in view.decoding] == ["d"] and view.now == 5.0
    assert all(r.phase is Phase.WAITING for r in view.waiting)
    assert view.prefilling[0].num_computed == 64


def test_the_batch_is_what_vllm_scheduled_as_the_mirrors_saw_it_before_the_step() -> None:
    decoding = StandIn("d", num_computed_tokens=21, num_output_tokens=2)
    prefilling = StandIn("p", num_prompt_tokens=100, num_computed_tokens=64)
    new = StandIn("w")
    mirror = mirrored(decoding, prefilling, new)
    mirror.view(0.0, [new], [prefilling, decoding], EngineLimits(), KVBlockManager(10, 16))
    prefilling.num_computed_tokens = 100  # vLLM moves on; the mirror keeps the step's start
    shape = mirror.batch({"p": 36, "d": 1, "w": 20, "gone": 5})
    assert shape == BatchShape((21,), ((36, 64), (20, 0)))


def test_first_tokens_are_stamped_for_the_scheduled_requests_the_engine_holds() -> None:
    done, waiting = StandIn("a", num_output_tokens=1), StandIn("b")
    mirror = mirrored(done, waiting, StandIn("gone", num_output_tokens=1))
    mirror.note_first_tokens({"a": done, "b": waiting}, ["a", "b", "gone"], 3.5)
    assert [mirror.get(i).token_times for i in ("a", "b", "gone")] == [[3.5], [], []]  # type: ignore[union-attr]


# -- async scheduling: the view of step t+1 while step t runs --------------------------------


def test_a_first_token_in_flight_makes_a_decode_and_counts_as_generated() -> None:
    # Step t ran the last prompt chunk; vLLM counted it computed and its token in flight.
    request = StandIn("a", num_computed_tokens=20, num_output_placeholders=1)
    mirror = mirrored(request)
    view = mirror.view(0.0, [], [request], EngineLimits(), KVBlockManager(10, 16))
    (core,) = view.decoding
    assert (core.num_computed, core.num_generated) == (20, 1)
    assert core.next_deadline == pytest.approx(10.0 + 1.0 + 0.05)  # the second token's
    assert mirror.batch({"a": 1}) == BatchShape((20,), ())  # context: the prompt


def test_a_token_in_flight_is_counted_once_before_and_after_its_output() -> None:
    request = StandIn("a", num_computed_tokens=23, num_output_tokens=3, num_output_placeholders=1)
    mirror = mirrored(request)
    before = mirror.sync(request, waiting=False)
    assert before is not None
    seen = (before.num_computed, before.num_generated, before.phase)
    request.num_output_tokens, request.num_output_placeholders = 4, 0  # its output came
    after = mirror.sync(request, waiting=False)
    assert after is not None
    assert (
        seen
        == (after.num_computed, after.num_generated, after.phase)
        == (
            23,
            4,
            Phase.DECODING,
        )
    )


def test_a_request_whose_tokens_in_flight_are_its_last_is_finished_not_planned() -> None:
    last = StandIn("last", num_computed_tokens=27, num_output_tokens=7, num_output_placeholders=1)
    more = StandIn("more", num_computed_tokens=26, num_output_tokens=6, num_output_placeholders=1)
    mirror = mirrored(last, more)
    view = mirror.view(0.0, [], [last, more], EngineLimits(), KVBlockManager(10, 16))
    assert [r.request_id for r in view.running] == ["last", "more"]  # its seat is taken
    assert [r.request_id for r in view.decoding] == ["more"] and not view.prefilling
    assert view.running[0].phase is Phase.FINISHED
