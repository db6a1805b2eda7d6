"""A request the server refuses (admission control) is a failure of its own kind."""

from __future__ import annotations

import pytest

from slidingserve.bench.client import (
    REFUSED_STOP_REASON,
    StreamError,
    StreamProgress,
    absorb_event,
)


def test_the_client_reads_the_reason_the_adapter_sends() -> None:
    pytest.importorskip("vllm")
    from slidingserve.engines.vllm.refusals import REFUSED_REASON

    assert REFUSED_STOP_REASON == REFUSED_REASON


def test_a_refusal_is_reported_as_refused_and_counts_no_token() -> None:
    progress = StreamProgress()
    event = {
        "choices": [{"text": "", "finish_reason": "abort", "stop_reason": REFUSED_STOP_REASON}]
    }
    with pytest.raises(StreamError) as raised:
        absorb_event(event, 1.0, progress)
    assert raised.value.kind == "refused"
    assert progress.tokens == 0


def test_an_ordinary_abort_is_not_a_refusal() -> None:
    progress = StreamProgress()
    absorb_event({"choices": [{"text": "x", "finish_reason": "abort"}]}, 1.0, progress)
    assert progress.tokens == 1
