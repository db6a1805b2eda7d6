"""The API server's admission check: refuse at once, with a 503 (or 429) a client can act
on, a request that would miss its first-token deadline even if it ran next.

The test is the policy's own (`SlidingServePolicy._hopeless`, `cannot_finish_prefill`): the
whole prompt, alone, at the prefill rate the engine core publishes (`load_record.py`),
takes longer than the request's TTFT. Made on arrival, before the request reached the
engine, it refuses only what the engine would refuse at its first step (the engine's clock
has moved on by then, the deadline has not), provided the prompt is not over-counted, so
the prompt's length is a low estimate (and unless the server has an admission guard,
below):

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

With the queue-aware test (`admission_test=queue`) the engine also publishes its queue,
and a request fits when it fits that queue (`core/queue_fit.py`) behind the requests this
API server let through since the queue was seen (`LetThrough`), with a decode seat left
for it. That answer stands (`Verdict.admitted`): the API server gives a request of one
prompt that passed the queue test a request id with `ADMITTED_MARK` in it (the
`X-Request-Id` header vLLM takes its ids from, when the client sent no id of its own), and
an engine that is the only one behind the API server admits such a request without
testing it again, so it is refused on arrival, in milliseconds, or served; it is refused
later only if it can no longer make its first token even if it ran next. Every other
request (untested, of several prompts, with the client's own id, or behind data-parallel
engines) is tested by the engine at its first step as well.

An admission guard (`serve --admission-guard-ms`, `ADMISSION_GUARD_ENV`) tests each request
as if its deadline came that much earlier, so that what the API server lets through still
fits once the engine's queue has moved on between two records. A request let through is
still counted in `LetThrough` with its own deadline.

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
from collections import deque
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from slidingserve.core.queue_fit import QueuedPrefill, fits_queue
from slidingserve.core.request import MAX_SLO_SECONDS
from slidingserve.core.slo_args import REFUSED_REASON, SLODefaults, parse_slo_args, planned_ttft
from slidingserve.engines.vllm.load_record import MAX_AGE, LoadRecord, QueueView

if TYPE_CHECKING:
    from collections.abc import Callable

    from starlette.responses import Response

REFUSAL_STATUS_ENV = "SLIDINGSERVE_REFUSAL_STATUS"
"""Environment variable with the HTTP status of a refusal, for the API server."""
ADMISSION_GUARD_ENV = "SLIDINGSERVE_ADMISSION_GUARD_MS"
"""Environment variable with the API server's admission guard, milliseconds."""
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
    guard_s: float = 0.0  # the API server's admission guard, seconds (`admission_guard`)

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
                f"{REFUSED_REASON}: the first token would {self._miss()} behind the "
                f"requests queued, or make one queued before it late: about "
                f"{self.prompt_tokens} prompt tokens after {self.queued_tokens} queued ahead, "
                f"at {self.prefill_rate:.0f} tokens/s, against a TTFT of {self._target()}"
            )
        return (
            f"{REFUSED_REASON}: the first token would {self._miss()} even if the request "
            f"ran next: about {self.prompt_tokens} prompt tokens at {self.prefill_rate:.0f} "
            f"tokens/s take {self.prefill_s * 1000:.0f} ms, over the TTFT of {self._target()}"
        )

    def _miss(self) -> str:
        """How the first token would fail its deadline, in words."""
        if not self.guard_s:
            return "miss its deadline"
        return "come within the server's admission guard of its deadline, or after it,"

    def _target(self) -> str:
        """The TTFT the request was tested against, in words."""
        ttft = f"{self.ttft_s * 1000:g} ms"
        if not self.guard_s:
            return ttft
        return f"{ttft} less the server's admission guard of {self.guard_s * 1000:g} ms"


def refusal_status(raw: str | None) -> int:
    """The refusal status encoded in `raw` (the value of `REFUSAL_STATUS_ENV`), by default
    the first of `REFUSAL_STATUSES`; ValueError for another status."""
    if not raw:
        return REFUSAL_STATUSES[0]
    if raw.strip() not in {str(status) for status in REFUSAL_STATUSES}:
        raise ValueError(f"{REFUSAL_STATUS_ENV}={raw!r}: the refusal status is 503 or 429")
    return int(raw)


def admission_guard(raw: str | None) -> float:
    """The admission guard encoded in `raw` (the value of `ADMISSION_GUARD_ENV`,
    milliseconds), in seconds: 0 without one; ValueError for one that is not a finite number
    of milliseconds >= 0 and at most an hour."""
    if raw is None or not raw.strip():
        return 0.0
    try:
        milliseconds = float(raw)
    except ValueError:
        milliseconds = math.nan
    if not is_guard(milliseconds):
        raise ValueError(
            f"{ADMISSION_GUARD_ENV}={raw[:40]!r}: the admission guard is a number of "
            "milliseconds from 0 to an hour"
        )
    return milliseconds / 1000.0


def is_guard(milliseconds: float) -> bool:
    """Whether `milliseconds` can be an admission guard: finite, from 0 to an hour."""
    return math.isfinite(milliseconds) and 0 <= milliseconds <= MAX_SLO_SECONDS * 1000


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


class LetThrough:
    """The requests this API server let through to a queue-aware engine, kept until every
    engine has published a queue seen after them: a queue published before a request
    reached the engine does not hold it, so each test counts those let through since
    (their deadlines and prompt tokens in the queue, one decode seat each). Without it,
    requests that arrive between two records are each tested against the same queue, and
    the engine refuses at its next step what the queue could not take together: a
    refusal a step late."""

    def __init__(self) -> None:
        self._entries: deque[tuple[float, QueuedPrefill]] = deque()  # (let through at, entry)

    def add(self, now: float, ttft: float, tokens: int) -> None:
        """A request of `tokens` prompt tokens and a TTFT of `ttft` s let through at `now`."""
        self._entries.append((now, QueuedPrefill(now + ttft, tokens)))

    def since(self, seen: float) -> list[QueuedPrefill]:
        """The requests let through after `seen` (wall clock), deadlines on that clock."""
        return [entry for at, entry in self._entries if at > seen]

    def forget_before(self, seen: float) -> None:
        """Forget the requests let through by `seen` (wall clock): `overload_verdict` passes
        the oldest queue's `seen`, which holds them all, or `MAX_AGE` ago if later (an idle
        engine, not scheduling, does not see its queue anew)."""
        while self._entries and self._entries[0][0] <= seen:
            self._entries.popleft()

    def __len__(self) -> int:
        return len(self._entries)


class Verdict(NamedTuple):
    """The API server's answer to one request."""

    overload: Overload | None  # why it is refused; None: let through
    # Let through after the queue test, its one prompt counted in `LetThrough`: the engine
    # need not test it again (`ADMITTED_MARK`)
    admitted: bool = False


LET_THROUGH_UNTESTED = Verdict(None)


async def overload_verdict(
    path: str,
    payload: Mapping[str, Any],
    records: Sequence[LoadRecord],
    defaults: SLODefaults,
    tokenizer: Tokenizer | None,
    clock: Callable[[], float] = time.time,
    let_through: LetThrough | None = None,
    guard: float = 0.0,
) -> Verdict:
    """The answer to the request (`path`, parsed JSON `payload` whose SLO is valid) given
    the engines' fresh `records` (see the module docstring). Text is tokenized in a worker
    thread, off the event loop. `clock`: the wall clock the queues were published on.
    `let_through`: the requests let through before, counted in the queues published before
    them, and added to when this one is. `guard`: seconds by which the request is tested
    early (`admission_guard`)."""
    record = best_record(records)
    if record is None:
        return LET_THROUGH_UNTESTED
    slo = parse_slo_args(payload.get("vllm_xargs"), defaults)
    if slo.protected:
        return LET_THROUGH_UNTESTED
    candidates = prompts(path, payload)
    if not candidates:
        return LET_THROUGH_UNTESTED
    queues = [r.queue for r in records if r.queue is not None]
    # Tokens the TTFT leaves time for, tested `guard` early
    budget = planned_ttft(slo.ttft, guard) * record.prefill_rate
    if not queues and any(most_tokens(p) <= budget for p in candidates):
        return LET_THROUGH_UNTESTED  # too short to be refused: not tokenized
    counts = await asyncio.to_thread(lambda: [count_tokens(p, tokenizer) for p in candidates])
    if any(count is None for count in counts):
        return LET_THROUGH_UNTESTED
    fewest = min(count for count in counts if count is not None)
    if fewest > budget:
        refused = Overload(
            fewest, record.prefill_rate, slo.ttft, retry_after(record), guard_s=guard
        )
        return Verdict(refused)
    if not queues:
        return LET_THROUGH_UNTESTED
    passed = LetThrough() if let_through is None else let_through
    overload = queue_overload(queues, fewest, slo.ttft, clock(), passed, guard)
    if overload is None:
        # Several prompts run as several requests, of which one was counted: not admitted
        return Verdict(None, admitted=len(candidates) == 1)
    return Verdict(overload._replace(retry_after_s=retry_after(record)))


def queue_overload(
    queues: Sequence[QueueView],
    tokens: int,
    ttft: float,
    now: float,
    passed: LetThrough,
    guard: float = 0.0,
) -> Overload | None:
    """Why a request of `tokens` prompt tokens and a TTFT of `ttft` s arriving at `now`,
    tested `guard` s early, fits none of the published `queues`, behind the requests
    `passed` since each was seen; None, and the request counted in `passed` with its own
    deadline, when it fits one."""
    passed.forget_before(max(min(q.seen for q in queues), now - MAX_AGE))
    behind = [passed.since(q.seen) for q in queues]
    pairs = list(zip(queues, behind, strict=True))
    tested = planned_ttft(ttft, guard)
    if any(fits_published(q, tokens, tested, now, b) for q, b in pairs):
        passed.add(now, ttft, tokens)
        return None
    queue, ahead_of_it = max(pairs, key=lambda pair: pair[0].rate)
    ahead = tokens_ahead(queue, tested, now, ahead_of_it)
    full = all(seats_left(q, b) == 0 for q, b in pairs)
    return Overload(
        tokens, queue.rate, ttft, 1, queued_tokens=ahead, decodes_full=full, guard_s=guard
    )


def fits_published(
    queue: QueueView,
    tokens: int,
    ttft: float,
    now: float,
    let_through: Sequence[QueuedPrefill] = (),
) -> bool:
    """Whether a request of `tokens` prompt tokens arriving at `now` (wall clock) with a
    TTFT of `ttft` seconds fits the queue an engine published (`core/queue_fit.py`), the
    engine taken to have prefilled in deadline order since it saw the queue, behind the
    requests `let_through` since then (deadlines on the wall clock), each of which also
    takes a decode seat."""
    if seats_left(queue, let_through) == 0:
        return False  # the decodes running and queued fill the TBT already
    entries = [QueuedPrefill(seconds, count) for seconds, count in queue.entries]
    entries += [QueuedPrefill(e.deadline - queue.seen, e.tokens) for e in let_through]
    entries.sort(key=attrgetter("deadline"))
    arrival = max(0.0, now - queue.seen)
    return fits_queue(entries, QueuedPrefill(arrival + ttft, tokens), 0.0, queue.rate)


def seats_left(queue: QueueView, let_through: Sequence[QueuedPrefill] = ()) -> int | None:
    """Decode seats of the published queue left after the requests `let_through` since it
    was seen; None where the engine does not count them."""
    if queue.decode_seats is None:
        return None
    return max(0, queue.decode_seats - len(let_through))


def tokens_ahead(
    queue: QueueView, ttft: float, now: float, let_through: Sequence[QueuedPrefill] = ()
) -> int:
    """Prefill tokens of the published queue, and of the requests `let_through` since, due
    before a request arriving at `now`."""
    due = max(0.0, now - queue.seen) + ttft
    published = sum(count for seconds, count in queue.entries if seconds <= due)
    return published + sum(e.tokens for e in let_through if e.deadline <= now + ttft)


def overload_response(overload: Overload, status: int) -> Response:
    """The answer to a request refused for `overload` (`refusal_answer`)."""
    return refusal_answer(overload.message(), status, overload.retry_after_s)


def refusal_answer(message: str, status: int, retry_after_s: int) -> Response:
    """The answer to a refused request, by the API server or its engine: `status`,
    `Retry-After` (whole seconds, at least 1) and vLLM's error body (the one it sends for
    its own queue caps) saying `message`, whose `reason` is `REFUSED_REASON`."""
    from starlette.responses import JSONResponse

    error = {
        "message": message,
        "type": HTTPStatus(status).phrase,
        "param": None,
        "code": status,
        "reason": REFUSED_REASON,
    }
    headers = {"Retry-After": str(max(1, retry_after_s))}
    return JSONResponse(status_code=status, content={"error": error}, headers=headers)
