"""A request the server refuses (admission control) is a failure of its own kind: counted
apart from errors, with how fast the refusal came."""

from __future__ import annotations

import json

import pytest

from slidingserve.bench.client import (
    REFUSED,
    StreamError,
    StreamProgress,
    absorb_event,
    is_refusal,
)
from slidingserve.core.slo_args import REFUSED_REASON


def test_the_client_reads_the_reason_the_adapter_sends() -> None:
    pytest.importorskip("vllm")
    from slidingserve.engines.vllm import refusals

    assert refusals.REFUSED_REASON == REFUSED_REASON


def test_a_refusal_is_reported_as_refused_and_counts_no_token() -> None:
    progress = StreamProgress()
    event = {"choices": [{"text": "", "finish_reason": "abort", "stop_reason": REFUSED_REASON}]}
    with pytest.raises(StreamError) as raised:
        absorb_event(event, 1.0, progress)
    assert raised.value.kind == REFUSED
    assert progress.tokens == 0


def test_an_ordinary_abort_is_not_a_refusal() -> None:
    progress = StreamProgress()
    absorb_event({"choices": [{"text": "x", "finish_reason": "abort"}]}, 1.0, progress)
    assert progress.tokens == 1


def error_body(reason: str | None) -> bytes:
    error: dict[str, object] = {"message": "late", "type": "Service Unavailable", "code": 503}
    if reason is not None:
        error["reason"] = reason
    return json.dumps({"error": error}).encode()


@pytest.mark.parametrize(
    ("status", "raw", "refused"),
    [
        (503, error_body(REFUSED_REASON), True),
        (429, error_body(REFUSED_REASON), True),
        (503, error_body(None), False),  # vLLM's own queue caps
        (503, error_body("another"), False),
        (500, error_body(REFUSED_REASON), False),
        (503, b"not json", False),
        (503, b'{"error": "slo-refused"}', False),
    ],
)
def test_a_refusal_is_a_503_or_429_naming_the_reason(
    status: int, raw: bytes, refused: bool
) -> None:
    assert is_refusal(status, raw) is refused
