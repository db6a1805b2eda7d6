"""The engine's own refusals, read from the endpoint's response, answered with a 503."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import pytest

from slidingserve.engines.vllm.refused_answers import (
    answer_refusals,
    carries_output,
    refused_completion,
)


def event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload).encode()


def completion_chunk(text: str = "", finish: str | None = None, **more: object) -> bytes:
    choice = {"index": 0, "text": text, "finish_reason": finish, "stop_reason": None, **more}
    return event({"id": "cmpl-1", "object": "text_completion", "choices": [choice]})


def chat_chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return event({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]})


ROLE = chat_chunk({"role": "assistant", "content": ""})
USAGE = event({"id": "cmpl-1", "choices": [], "usage": {"completion_tokens": 0}})


@pytest.mark.parametrize(
    ("chunk", "output"),
    [
        (completion_chunk("Hello"), True),
        (completion_chunk("", token_ids=[17]), True),  # a partial UTF-8 character
        (completion_chunk("", finish="abort"), True),
        (completion_chunk(""), False),
        (ROLE, False),
        (chat_chunk({"content": "Hi"}), True),
        (chat_chunk({"reasoning_content": "so"}), True),
        (chat_chunk({"content": None}), False),
        (USAGE, False),
        (b"data: [DONE]", False),
        (b"", False),
        (event({"error": {"message": "boom"}}), True),
        (b"data: not json", True),
    ],
)
def test_what_counts_as_output(chunk: bytes, output: bool) -> None:
    assert carries_output(chunk) is output


def test_a_body_refused_in_every_choice_is_a_refusal() -> None:
    refused = {"index": 0, "text": "", "finish_reason": "abort", "stop_reason": "slo-refused"}
    served = {**refused, "text": "Hello", "stop_reason": None}
    message = {"role": "assistant", "content": ""}
    chat = {"index": 0, "message": message, "stop_reason": "slo-refused"}
    assert refused_completion(json.dumps({"choices": [refused]}).encode())
    assert refused_completion(json.dumps({"choices": [chat]}).encode())
    assert not refused_completion(json.dumps({"choices": [refused, served]}).encode())
    assert not refused_completion(json.dumps({"choices": []}).encode())
    assert not refused_completion(b"not json")
    assert not refused_completion(b"[1, 2]")


SSE = {"content-type": "text/event-stream; charset=utf-8"}
JSON_BODY = {"content-type": "application/json"}


class Endpoint:
    """A stand-in of the response `call_next` returns: a status, headers and a body."""

    def __init__(
        self, chunks: list[bytes], headers: dict[str, str], status_code: int = 200
    ) -> None:
        self.status_code = status_code
        self.headers = headers
        self.read: list[bytes] = []  # what was taken from the body so far
        self.body_iterator = self._body(chunks)

    async def _body(self, chunks: list[bytes]) -> AsyncIterator[bytes]:
        for chunk in chunks:
            self.read.append(chunk)
            yield chunk


class Answer(NamedTuple):
    response: Any
    read_first: list[bytes]  # the body taken before the answer was returned
    body: bytes | None  # the whole body of a response that streams on; None for a refusal


def answered(endpoint: Endpoint) -> Answer:
    """The answer to `endpoint`'s response, and its body, read in one event loop (as the
    server does: an async generator does not outlive the loop it ran in)."""

    async def run() -> Answer:
        response = await answer_refusals(endpoint, 503, 3)
        read_first = list(endpoint.read)
        if not hasattr(response, "body_iterator"):
            return Answer(response, read_first, None)
        body = b"".join([chunk async for chunk in response.body_iterator])
        return Answer(response, read_first, body)

    return asyncio.run(run())


def sse(*events: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in events]


def test_a_stream_with_output_goes_on_unchanged_from_its_first_token() -> None:
    chunks = sse(ROLE, chat_chunk({"content": "Hi"}), chat_chunk({"content": "!"}), b"data: [DONE]")
    endpoint = Endpoint(chunks, SSE)
    answer = answered(endpoint)
    assert answer.response is endpoint
    assert answer.read_first == chunks[:2]  # held up to the first token, not further
    assert answer.body == b"".join(chunks)


def test_a_stream_that_ends_without_output_is_answered_as_a_refusal() -> None:
    pytest.importorskip("starlette")
    for chunks in (sse(b"data: [DONE]"), sse(ROLE, b"data: [DONE]"), sse(ROLE, USAGE), []):
        response = answered(Endpoint(chunks, SSE)).response
        assert response.status_code == 503
        assert response.headers["retry-after"] == "3"
        error = json.loads(response.body)["error"]
        assert (error["code"], error["reason"]) == (503, "slo-refused")
        assert "the engine refused" in error["message"]


def test_events_split_across_chunks_are_read_whole() -> None:
    first = completion_chunk("Hello") + b"\n\n"
    whole = first + b"data: [DONE]\n\n"
    chunks = [whole[:7], whole[7:30], whole[30 : len(first) + 1], whole[len(first) + 1 :]]
    answer = answered(Endpoint(chunks, SSE))
    assert answer.response.status_code == 200
    assert answer.read_first == chunks[:3]  # held until the first event was whole
    assert answer.body == whole
    unended = answered(Endpoint([completion_chunk("Hello")], SSE))  # no blank line
    assert unended.body == completion_chunk("Hello")


def test_a_body_not_streamed_is_answered_as_a_refusal_only_when_refused() -> None:
    pytest.importorskip("starlette")
    choice = {"index": 0, "text": "", "finish_reason": "abort", "stop_reason": "slo-refused"}
    refused = json.dumps({"choices": [choice]}).encode()
    refusal = answered(Endpoint([refused[:10], refused[10:]], JSON_BODY)).response
    assert refusal.status_code == 503
    served = json.dumps({"choices": [{**choice, "text": "Hi", "stop_reason": None}]}).encode()
    answer = answered(Endpoint([served[:10], served[10:]], JSON_BODY))
    assert answer.response.status_code == 200
    assert answer.body == served


def test_an_error_status_passes_unread() -> None:
    endpoint = Endpoint([b'{"error": {}}'], JSON_BODY, status_code=400)
    answer = answered(endpoint)
    assert answer.response is endpoint
    assert answer.read_first == []


@pytest.mark.parametrize(
    "headers",
    [
        {"content-type": "text/event-stream", "content-encoding": "gzip"},
        {"content-type": "text/plain"},
        {},
    ],
)
def test_an_encoded_body_or_another_type_passes_unread(headers: dict[str, str]) -> None:
    endpoint = Endpoint(sse(b"data: [DONE]"), headers)
    answer = answered(endpoint)
    assert answer.response is endpoint
    assert answer.read_first == []


def test_the_content_type_decides_not_the_request() -> None:
    """A stream asked for as `"stream": 1` is still read as a stream, from its first token."""
    chunks = sse(completion_chunk("Hi"), b"data: [DONE]")
    endpoint = Endpoint(chunks, {"content-type": "Text/Event-Stream"})
    answer = answered(endpoint)
    assert answer.read_first == chunks[:1]
    assert answer.body == b"".join(chunks)
