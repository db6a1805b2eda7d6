"""The API server's admission check: refuse at once, with a 503 (or 429) a client can act
on, a request that would miss its first-token deadline even if it ran next.

The test is the policy's own (`SlidingServePolicy._hopeless`, `cannot_finish_prefill`): the
whole prompt, alone, at the prefill rate the engine core publishes (`load_record.py`),
takes longer than the request's TTFT. Made on arrival, before the request reached the
engine, it refuses only what the engine would refuse at its first step (the engine's clock
has moved on by then, the deadline has not), provided the prompt is not over-counted, so
the prompt's length is a low estimate:

- a completion's prompt of token ids: their number, exactly;
- text (a completion's prompt, the text parts of a chat's messages): counted with the
  served model's tokenizer, and only when the text could hold enough tokens to be refused
  (each token covers at least one byte of text, plus `TEXT_SLACK` tokens a text may add:
  `most_tokens`), so a request that fits costs no tokenizing. The chat template's own
  tokens are not counted: a chat is estimated low. Without a tokenizer (a server started
  with `skip_tokenizer_init`) text is not counted and such requests are let through;
- several prompts in one completion request (vLLM runs each as a request): refused only
  when the shortest is;
- anything else (embeddings, images, a body that is not understood): let through.

Protected requests are never refused (the engine keeps them too). With no fresh record
(admission control off, the engine core not started, stopped or hung) nothing is refused:
fail open. Between data-parallel engines the check believes the fastest one.

The answer (`overload_response`) is `REFUSAL_STATUS` (503, like vLLM's own queue caps;
`serve --refusal-status 429` makes it 429) with a `Retry-After` header (the seconds the
engine's queued prefill is predicted to take, at least 1: the same request with the same
SLO is only worth retrying once the engine has drained and if its rate has grown) and
vLLM's error body, whose `reason` names the refusal (`REFUSED_REASON`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from slidingserve.core.queue_fit import QueuedPrefill, fits_queue
from slidingserve.core.slo_args import REFUSED_REASON, SLODefaults, parse_slo_args
from slidingserve.engines.vllm.load_record import LoadRecord, QueueView

if TYPE_CHECKING:
    from collections.abc import Callable

    from starlette.responses import Response

REFUSAL_STATUS_ENV = "SLIDINGSERVE_REFUSAL_STATUS"
"""Environment variable with the HTTP status of a refusal, for the API server."""
REFUSAL_STATUSES = (503, 429)  # the first is the default
TEXT_SLACK = 4  # tokens a text may count beyond its bytes (BOS, EOS, a prefix space)

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


class Tokenizer(Protocol):
    """What the check needs of vLLM's tokenizer."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...


class Prompt(NamedTuple):
    """One prompt of a request, as far as its length can be told."""

    token_ids: int  # tokens given as ids, counted exactly
    texts: tuple[str, ...] = ()  # text whose tokens are still to count


class Overload(NamedTuple):
    """Why a request is refused, for its answer."""

    prompt_tokens: int  # the low estimate of its prompt's tokens
    prefill_rate: float  # the engine's prefill rate, tokens per second
    ttft_s: float  # its TTFT target, seconds
    retry_after_s: int  # the Retry-After header, seconds, >= 1
    queued_tokens: int | None = None  # refused behind the queue: its tokens due before it
    decodes_full: bool = False  # refused because the decodes would overrun the TBT

    @property
    def prefill_s(self) -> float:
        """Seconds the prompt takes alone at the rate."""
        return self.prompt_tokens / self.prefill_rate

    def message(self) -> str:
        if self.decodes_full:
            return (
                f"{REFUSED_REASON}: the requests running and queued already fill the time "
                f"between tokens: one more would make every decode late"
            )
        if self.queued_tokens is not None:
            return (
                f"{REFUSED_REASON}: the first token would miss its deadline behind the "
                f"requests queued, or make one queued before it late: about "
                f"{self.prompt_tokens} prompt tokens after {self.queued_tokens} queued ahead, "
                f"at {self.prefill_rate:.0f} tokens/s, against a TTFT of "
                f"{self.ttft_s * 1000:g} ms"
            )
        return (
            f"{REFUSED_REASON}: the first token would miss its deadline even if the request "
            f"ran next: about {self.prompt_tokens} prompt tokens at {self.prefill_rate:.0f} "
            f"tokens/s take {self.prefill_s * 1000:.0f} ms, over the TTFT of "
            f"{self.ttft_s * 1000:g} ms"
        )


def refusal_status(raw: str | None) -> int:
    """The refusal status encoded in `raw` (the value of `REFUSAL_STATUS_ENV`), by default
    the first of `REFUSAL_STATUSES`; ValueError for another status."""
    if not raw:
        return REFUSAL_STATUSES[0]
    if raw.strip() not in {str(status) for status in REFUSAL_STATUSES}:
        raise ValueError(f"{REFUSAL_STATUS_ENV}={raw!r}: the refusal status is 503 or 429")
    return int(raw)


def prompts(path: str, payload: Mapping[str, Any]) -> list[Prompt]:
    """The prompts of a completion (`path`) request's body; [] when they cannot be told."""
    if path == COMPLETIONS_PATH:
        return completion_prompts(payload.get("prompt"))
    if path == CHAT_PATH:
        chat = chat_prompt(payload.get("messages"))
        return [] if chat is None else [chat]
    return []


def completion_prompts(prompt: object) -> list[Prompt]:
    """A completion's `prompt`: a text, token ids, or a list of either."""
    if isinstance(prompt, str):
        return [Prompt(0, (prompt,))]
    if not isinstance(prompt, list) or not prompt:
        return []
    if all(_is_token_id(token) for token in prompt):
        return [Prompt(len(prompt))]
    if all(isinstance(text, str) for text in prompt):
        return [Prompt(0, (text,)) for text in prompt]
    if all(isinstance(ids, list) and all(map(_is_token_id, ids)) for ids in prompt):
        return [Prompt(len(ids)) for ids in prompt]
    return []


def chat_prompt(messages: object) -> Prompt | None:
    """The text of a chat's messages (string contents and text parts), or None when they
    are not a list of message objects."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return None
    texts: list[str] = []
    for message in messages:
        texts += _content_texts(message.get("content"))
    return Prompt(0, tuple(texts))


def _content_texts(content: object) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    parts = [part for part in content if isinstance(part, dict) and part.get("type") == "text"]
    return [part["text"] for part in parts if isinstance(part.get("text"), str)]


def _is_token_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def most_tokens(prompt: Prompt) -> int:
    """An upper bound of the tokens of `prompt`: a token per byte of text, plus slack."""
    return prompt.token_ids + sum(len(text.encode()) + TEXT_SLACK for text in prompt.texts)


def count_tokens(prompt: Prompt, tokenizer: Tokenizer | None) -> int | None:
    """The tokens of `prompt`, its text counted by `tokenizer` (without special tokens); None
    when it has text and there is no tokenizer."""
    if not prompt.texts:
        return prompt.token_ids
    if tokenizer is None:
        return None
    counted = (len(tokenizer.encode(text, add_special_tokens=False)) for text in prompt.texts)
    return prompt.token_ids + sum(counted)


def best_record(records: Sequence[LoadRecord]) -> LoadRecord | None:
    """The record of the engine most likely to serve in time: the fastest, the least queued
    among equals; None without records."""
    return max(records, key=lambda r: (r.prefill_rate, -r.queued_prefill_s), default=None)


def retry_after(record: LoadRecord) -> int:
    """Whole seconds for the engine to prefill what is queued, at least 1."""
    return max(1, math.ceil(record.queued_prefill_s))


async def check_overload(
    path: str,
    payload: Mapping[str, Any],
    records: Sequence[LoadRecord],
    defaults: SLODefaults,
    tokenizer: Tokenizer | None,
    clock: Callable[[], float] = time.time,
) -> Overload | None:
    """Why the request (`path`, parsed JSON `payload` whose SLO is valid) must be refused
    given the engines' fresh `records`, or None to let it through (see the module
    docstring). Text is tokenized in a worker thread, off the event loop. `clock`: the wall
    clock the queues were published on."""
    record = best_record(records)
    if record is None:
        return None
    slo = parse_slo_args(payload.get("vllm_xargs"), defaults)
    if slo.protected:
        return None
    candidates = prompts(path, payload)
    if not candidates:
        return None
    queues = [r.queue for r in records if r.queue is not None]
    budget = slo.ttft * record.prefill_rate  # tokens the TTFT leaves time for
    if not queues and any(most_tokens(p) <= budget for p in candidates):
        return None  # too short to be refused: not tokenized
    counts = await asyncio.to_thread(lambda: [count_tokens(p, tokenizer) for p in candidates])
    if any(count is None for count in counts):
        return None
    fewest = min(count for count in counts if count is not None)
    if fewest > budget:
        return Overload(fewest, record.prefill_rate, slo.ttft, retry_after(record))
    now = clock()
    if not queues or any(fits_published(q, fewest, slo.ttft, now) for q in queues):
        return None
    queue = max(queues, key=lambda q: q.rate)
    ahead = tokens_ahead(queue, slo.ttft, now)
    full = all(q.decode_seats == 0 for q in queues)
    return Overload(
        fewest, queue.rate, slo.ttft, retry_after(record), queued_tokens=ahead, decodes_full=full
    )


def fits_published(queue: QueueView, tokens: int, ttft: float, now: float) -> bool:
    """Whether a request of `tokens` prompt tokens arriving at `now` (wall clock) with a
    TTFT of `ttft` seconds fits the queue an engine published (`core/queue_fit.py`), the
    engine taken to have prefilled in deadline order since it saw the queue."""
    if queue.decode_seats == 0:
        return False  # the decodes running and queued fill the TBT already
    entries = [QueuedPrefill(seconds, count) for seconds, count in queue.entries]
    arrival = max(0.0, now - queue.seen)
    return fits_queue(entries, QueuedPrefill(arrival + ttft, tokens), 0.0, queue.rate)


def tokens_ahead(queue: QueueView, ttft: float, now: float) -> int:
    """Prefill tokens of the published queue due before a request arriving at `now`."""
    due = max(0.0, now - queue.seen) + ttft
    return sum(count for seconds, count in queue.entries if seconds <= due)


def overload_response(overload: Overload, status: int) -> Response:
    """The answer to a refused request: `status`, `Retry-After` and vLLM's error body (the
    one it sends for its own queue caps), whose `reason` is `REFUSED_REASON`."""
    from starlette.responses import JSONResponse

    error = {
        "message": overload.message(),
        "type": HTTPStatus(status).phrase,
        "param": None,
        "code": status,
        "reason": REFUSED_REASON,
    }
    headers = {"Retry-After": str(overload.retry_after_s)}
    return JSONResponse(status_code=status, content={"error": error}, headers=headers)
