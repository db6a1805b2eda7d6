"""A streaming client for OpenAI-compatible `/v1/completions` and `/v1/models` endpoints.

`stream_completion` posts one request and writes every chunk's arrival time into a
`StreamProgress` as it comes (so a cancelled request keeps what it had received); whatever
goes wrong becomes a `StreamError` whose `kind` is one of `ERROR_KINDS` or `http_<status>`,
or `REFUSED` for a request the server turned down by its admission control: at once, with
a 503 or 429 whose error names `REFUSED_REASON` (SlidingServe's API server), or inside the
stream, with that stop reason (its engine's own refusal, the backstop).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from slidingserve.core.slo_args import REFUSED_REASON
from slidingserve.metrics import received_tokens

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

ERROR_KINDS = {
    "connection": "no response: refused, reset or unreachable before the headers came",
    "timeout": "the request ran past its time limit",
    "dropped": "the stream broke off or ended before all tokens came and without [DONE]",
    "truncated": "the stream ended with [DONE] but with fewer tokens than asked for",
    "stream_error": "the server sent an error event inside the stream",
    "bad_response": "a response that is not the expected JSON events",
}
"""Error kinds other than `http_<status>` (an HTTP error status; its message is kept)."""

MAX_ERROR_BODY = 65536  # bytes of an error response read for its message
MAX_MESSAGE = 500  # characters of an error message kept
MAX_LINE = 16 * 2**20  # bytes of one event-stream line
DONE = "[DONE]"


REFUSED = "refused"
"""The kind of a request the server refused by admission control: not an error, counted
apart (`BenchResult.refusals`)."""
REFUSAL_STATUSES = (503, 429)  # the statuses of an at-once refusal


class StreamError(Exception):
    """A request that failed; `kind` classifies it, the message says what happened."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message[:MAX_MESSAGE]


@dataclass(slots=True)
class StreamProgress:
    """What one request has received so far; filled in while it streams."""

    sent: float | None = None  # seconds on the run's clock when it was posted
    responded: bool = False  # the response headers came (errors after this are "dropped")
    chunk_times: list[float] = field(default_factory=list)  # seconds, per chunk with a token
    chunk_tokens: list[int] = field(default_factory=list)  # tokens in each of those chunks
    usage_tokens: int | None = None  # completion_tokens of the usage event
    done: bool = False  # "[DONE]" came

    @property
    def tokens(self) -> int:
        """Tokens received so far (`received_tokens`)."""
        return received_tokens(self.chunk_tokens, self.usage_tokens)


async def stream_completion(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    progress: StreamProgress,
    clock: Callable[[], float],
    timeout: float,
) -> None:
    """POST `body` to `url` and read its event stream into `progress` within `timeout` seconds.

    `clock()` gives the run's time in seconds. Returns when the stream ends with every token
    asked for (`body["max_tokens"]`); raises `StreamError` otherwise.
    """
    try:
        async with asyncio.timeout(timeout):
            progress.sent = clock()
            async with session.post(url, json=body) as response:
                progress.responded = True
                await _check_status(response)
                await _read_events(response, progress, clock)
    except TimeoutError:
        raise StreamError("timeout", f"no complete answer within {timeout:g} s") from None
    except aiohttp.ClientError as error:
        kind = "dropped" if progress.responded else "connection"
        raise StreamError(kind, f"{type(error).__name__}: {error}") from None
    _check_complete(progress, int(body["max_tokens"]))


async def _check_status(response: aiohttp.ClientResponse) -> None:
    """StreamError for an HTTP error status, with the body's message: `REFUSED` for an
    admission control's refusal (`is_refusal`), else `http_<status>`."""
    if response.status < 400:
        return
    raw = await response.content.read(MAX_ERROR_BODY)
    kind = REFUSED if is_refusal(response.status, raw) else f"http_{response.status}"
    raise StreamError(kind, error_message(raw, response.reason))


def is_refusal(status: int, raw: bytes) -> bool:
    """Whether an error answer (`status`, body `raw`) is an admission control's refusal: a
    503 or 429 whose OpenAI-style error has the `reason` `REFUSED_REASON`. vLLM's own
    queue caps answer 503 without one: an error."""
    error = _json(raw).get("error")
    return (
        status in REFUSAL_STATUSES
        and isinstance(error, dict)
        and error.get("reason") == REFUSED_REASON
    )


def error_message(raw: bytes, reason: str | None = None) -> str:
    """The message of an error body (OpenAI's `{"error": {"message": ...}}`, FastAPI's
    `{"detail": ...}`, or the text itself)."""
    text = raw.decode(errors="replace").strip()
    data = _json(raw)
    if not data:
        return text[:MAX_MESSAGE] or (reason or "no message")
    error = data.get("error")
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])[:MAX_MESSAGE]
    for key in ("message", "detail", "error"):
        if data.get(key):
            return str(data[key])[:MAX_MESSAGE]
    return text[:MAX_MESSAGE]


def _json(raw: bytes) -> dict[str, Any]:
    """The JSON object of a body, or {} if it holds none."""
    try:
        data = json.loads(raw.decode(errors="replace"))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


async def _read_events(
    response: aiohttp.ClientResponse, progress: StreamProgress, clock: Callable[[], float]
) -> None:
    """Read server-sent events until "[DONE]" or the end of the body."""
    async for raw, now in _lines(response, clock):
        event = parse_event(raw)
        if event == DONE:
            progress.done = True
            return
        if isinstance(event, dict):
            absorb_event(event, now, progress)


async def _lines(
    response: aiohttp.ClientResponse, clock: Callable[[], float]
) -> AsyncIterator[tuple[bytes, float]]:
    """The body's lines, each with the arrival time of the bytes that completed it.

    Read by hand rather than with aiohttp's line reader, whose 128 KiB limit a first chunk
    echoing a long prompt's token ids can pass; a line over `MAX_LINE` bytes is an error.
    """
    buffer = b""
    async for data in response.content.iter_any():
        now = clock()
        *lines, buffer = (buffer + data).split(b"\n")
        for line in lines:
            yield line, now
        if len(buffer) > MAX_LINE:
            raise StreamError("bad_response", f"a line of over {MAX_LINE} bytes")
    if buffer:
        yield buffer, clock()


def parse_event(raw: bytes) -> dict[str, Any] | str | None:
    """One line of an event stream: its JSON object, `DONE`, or None for other lines."""
    line = raw.strip()
    if not line.startswith(b"data:"):
        return None  # blank separator, comment, or another field
    payload = line[len(b"data:") :].strip().decode(errors="replace")
    if payload == DONE:
        return DONE
    try:
        event = json.loads(payload)
    except ValueError:
        raise StreamError("bad_response", f"not JSON: {payload[:200]!r}") from None
    if not isinstance(event, dict):
        raise StreamError("bad_response", f"not a JSON object: {payload[:200]!r}")
    return event


def absorb_event(event: dict[str, Any], now: float, progress: StreamProgress) -> None:
    """Add one event that arrived at `now` (seconds) to `progress`."""
    if "error" in event:
        raise StreamError("stream_error", error_message(json.dumps(event).encode()))
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        if choices[0].get("stop_reason") == REFUSED_REASON:
            raise StreamError(REFUSED, "refused by the server: its first token would be late")
        tokens = chunk_tokens(choices[0])
        if tokens:
            progress.chunk_times.append(now)
            progress.chunk_tokens.append(tokens)
    usage = event.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        progress.usage_tokens = usage["completion_tokens"]


def chunk_tokens(choice: dict[str, Any]) -> int:
    """Tokens in one streamed choice: the length of its `token_ids` when the server sends
    them (vLLM with `return_token_ids`), else 1, as vLLM's benchmark counts a chunk (its text
    may be empty: vLLM holds back a partial UTF-8 character)."""
    ids = choice.get("token_ids")
    return len(ids) if isinstance(ids, list) else 1


def _check_complete(progress: StreamProgress, max_tokens: int) -> None:
    """StreamError unless every token asked for arrived."""
    if progress.tokens >= max_tokens:
        return
    got = f"{progress.tokens} of {max_tokens} tokens"
    if progress.done:
        raise StreamError("truncated", f"[DONE] after {got}")
    raise StreamError("dropped", f"the stream ended without [DONE] after {got}")


async def list_models(session: aiohttp.ClientSession, url: str, timeout: float) -> list[Any]:
    """The `data` list of GET `url` (an OpenAI `/v1/models`); StreamError if it fails."""
    try:
        async with asyncio.timeout(timeout), session.get(url) as response:
            await _check_status(response)
            payload = await response.json(content_type=None)
    except TimeoutError:
        raise StreamError("timeout", f"{url}: no answer within {timeout:g} s") from None
    except aiohttp.ClientError as error:
        raise StreamError("connection", f"{url}: {type(error).__name__}: {error}") from None
    except ValueError:
        raise StreamError("bad_response", f"{url}: the answer is not JSON") from None
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        raise StreamError("bad_response", f"{url}: no `data` list in {str(payload)[:200]}")
    return data
