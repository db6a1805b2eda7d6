"""The engine's own refusals answered as the API server's are: 503 (or 429), `Retry-After`
and a JSON error, instead of a 200 without a token.

With admission control on, most refusals are made in the API server before a request
reaches the engine (`overload.py`). The rest are made by the engine: at the request's
first step (its view is fresher: the decodes that started, its own rate), or later, under
the queue-aware test, once a request admitted could no longer make its first token. It
finishes the request as aborted with the stop reason `REFUSED_REASON` (`refusals.py`).
vLLM 0.32 passes that reason on in a response that is not streamed, but a stream drops an
output that carries no token, so the client of a streamed request gets a 200 and
`[DONE]` with nothing before it (a chat: its role chunk and `[DONE]`). Neither is an
answer a client or a load balancer acts on.

`answer_refusals` reads the endpoint's response before its status goes out, by its
content type (a body with a `content-encoding`, or of another type, passes unread):
- an event stream (`text/event-stream`): the events are held until the first one that
  carries output (text, token ids, a chat delta other than the role, a finish reason) or
  an error; from there the stream goes on unchanged, held events first. A stream that
  ends without any is a refusal. A streamed request's status and first events therefore
  leave with its first token (a proxy in front must allow a TTFT before the headers);
- JSON: a response whose every choice has the stop reason `REFUSED_REASON` and no text is
  a refusal.

A refusal is answered with `status`, `Retry-After` and the error body of `overload.py`. The
engine refuses nothing without admission control, and the middleware calls this only when
the engine cores publish their load (admission control on), for requests that are not
protected (those are never refused).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol

from slidingserve.core.slo_args import REFUSED_REASON
from slidingserve.engines.vllm.overload import refusal_answer

if TYPE_CHECKING:
    from starlette.responses import Response


class EndpointResponse(Protocol):
    """What is read of the response `call_next` returns: its status and its body to come."""

    status_code: int
    body_iterator: AsyncIterator[bytes]

    @property
    def headers(self) -> Mapping[str, str]: ...


EVENT_STREAM = "text/event-stream"
JSON = "application/json"
EVENT_END = b"\n\n"  # server-sent events end with a blank line
DATA = b"data:"
DONE = b"[DONE]"
ENGINE_REFUSAL = (
    f"{REFUSED_REASON}: the engine refused the request: its first token would miss its "
    "deadline behind the requests running and queued"
)


async def answer_refusals(
    response: EndpointResponse, status: int, retry_after_s: int
) -> EndpointResponse | Response:
    """`response` (an endpoint's, through `call_next`, its body not yet sent), or the answer
    to a refusal when the engine refused the request (module docstring)."""
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    encoded = "content-encoding" in response.headers
    if response.status_code != HTTPStatus.OK or encoded or kind not in (EVENT_STREAM, JSON):
        return response
    body = response.body_iterator
    if kind == JSON:
        content = b"".join([chunk async for chunk in body])
        if refused_completion(content):
            return refusal_response(status, retry_after_s)
        return _replayed(response, [content], _nothing())
    held: list[bytes] = []
    pending = b""
    async for chunk in body:
        held.append(chunk)
        pending += chunk
        *events, pending = pending.split(EVENT_END)
        if any(carries_output(event) for event in events):
            return _replayed(response, held, body)
    if carries_output(pending):
        return _replayed(response, held, _nothing())
    return refusal_response(status, retry_after_s)


def carries_output(event: bytes) -> bool:
    """Whether one server-sent event of a completion stream carries output, a finish reason
    or an error: anything but nothing, a chat's role, usage alone and `[DONE]`. An event
    that is not JSON counts as output (it is not the engine's silent refusal)."""
    data = b"".join(
        line[len(DATA) :].strip() for line in event.splitlines() if line.startswith(DATA)
    )
    if not data or data == DONE:
        return False
    try:
        payload = json.loads(data)
    except ValueError:
        return True
    if not isinstance(payload, dict) or "error" in payload:
        return True
    choices = payload.get("choices")
    return isinstance(choices, list) and any(map(_choice_has_output, choices))


def _choice_has_output(choice: object) -> bool:
    if not isinstance(choice, Mapping):
        return True
    if choice.get("finish_reason") is not None or choice.get("text") or choice.get("token_ids"):
        return True
    delta = choice.get("delta")
    if isinstance(delta, Mapping):
        return any(value for key, value in delta.items() if key != "role")
    return False


def refused_completion(content: bytes) -> bool:
    """Whether a response body that is not streamed is the engine's refusal: every choice
    has the stop reason `REFUSED_REASON` and nothing else to say."""
    try:
        payload: Any = json.loads(content)
    except ValueError:
        return False
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices:
        return False
    return all(
        isinstance(choice, Mapping)
        and choice.get("stop_reason") == REFUSED_REASON
        and not choice.get("text")
        and not _message_text(choice)
        for choice in choices
    )


def _message_text(choice: Mapping[str, Any]) -> object:
    message = choice.get("message")
    return message.get("content") if isinstance(message, Mapping) else None


def refusal_response(status: int, retry_after_s: int) -> Response:
    """The answer to a request the engine refused: the API server's own refusal
    (`overload.refusal_answer`) saying `ENGINE_REFUSAL`."""
    return refusal_answer(ENGINE_REFUSAL, status, retry_after_s)


def _replayed(
    response: EndpointResponse, held: list[bytes], rest: AsyncIterator[bytes]
) -> EndpointResponse:
    """`response` with its body: `held`, then what is left of it in `rest`."""

    async def body() -> AsyncIterator[bytes]:
        for chunk in held:
            yield chunk
        async for chunk in rest:
            yield chunk

    response.body_iterator = body()
    return response


async def _nothing() -> AsyncIterator[bytes]:
    """An async iterator over no chunk."""
    none: tuple[bytes, ...] = ()
    for chunk in none:
        yield chunk
