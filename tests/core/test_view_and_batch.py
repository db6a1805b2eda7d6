"""The view of an engine's queues and the batch shape of a step: both engines build them here."""

from __future__ import annotations

from factories import make_decoding, make_request

from slidingserve.core import BatchShape, EngineLimits, KVBlockManager, Phase, Plan, SchedulerView
from slidingserve.core.plan import ScheduledChunk


def test_the_running_queue_splits_by_phase_in_admission_order() -> None:
    first, second = make_decoding("d1", prompt=40), make_decoding("d2", prompt=70)
    partial = make_request("p", prompt=300, computed=128)
    waiting = [make_request("w1"), make_request("w2")]
    view = SchedulerView.from_queues(
        2.5, waiting, [first, partial, second], EngineLimits(), KVBlockManager(100, 16)
    )
    assert [r.request_id for r in view.decoding] == ["d1", "d2"]
    assert [r.request_id for r in view.prefilling] == ["p"]
    assert [r.request_id for r in view.running] == ["d1", "p", "d2"]
    assert view.waiting == waiting and view.now == 2.5 and view.admit


def test_a_view_may_forbid_admission() -> None:
    view = SchedulerView.from_queues(0.0, [], [], EngineLimits(), KVBlockManager(1, 16), False)
    assert not view.admit


def test_a_batch_counts_each_request_by_its_phase_before_the_step() -> None:
    decode = make_decoding("d", prompt=40, generated=3)  # 42 tokens cached
    partial = make_request("p", prompt=300, computed=128)
    new = make_request("w", prompt=50)
    shape = BatchShape.from_chunks([(decode, 1), (partial, 100), (new, 50)])
    assert shape == BatchShape((42,), ((100, 128), (50, 0)))
    assert (shape.num_tokens, shape.num_prefill_tokens, shape.decode_kv) == (151, 150, 42)


def test_a_waiting_request_s_prefix_hit_is_the_context_of_its_first_chunk() -> None:
    # With a prefix cache, a waiting request counts its hit as computed: its chunk reads it.
    hit = make_request("h", prompt=64, computed=32, phase=Phase.WAITING)
    assert BatchShape.from_chunks([(hit, 32)]) == BatchShape((), ((32, 32),))
    fresh = make_request("f", prompt=64, phase=Phase.WAITING)
    assert BatchShape.from_chunks([(fresh, 64)]) == BatchShape((), ((64, 0),))


def test_a_plan_s_batch_is_the_batch_of_its_chunks() -> None:
    chunks = [ScheduledChunk(make_decoding("d"), 1), ScheduledChunk(make_request("w"), 30)]
    assert BatchShape.from_plan(Plan(chunks)) == BatchShape.from_chunks(chunks)
    assert BatchShape.from_plan(Plan()) == BatchShape((), ())
