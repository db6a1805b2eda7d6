"""Reject a request with a bad SLO, or one that cannot be served in time, before it
reaches vLLM's engine.

A request carries its SLO in `SamplingParams.extra_args` (offline) or in the request body's
`"vllm_xargs"` (HTTP): `ttft_ms`, `tbt_ms`, `protected`, `tier`. Two checks, both built on
`core.slo_args.parse_slo_args`:

- `SLOValidator`, a logits processor that changes no logit: vLLM calls its `validate_params`
  in the front end for every request, so a bad SLO raises `VLLMValidationError` from
  `LLM.generate` and becomes an HTTP 400 for a request that is not streamed. Load it with
  `LLM(logits_processors=[SLOValidator])` or `--logits-processors
  slidingserve.engines.vllm.validation:SLOValidator`.
- `slo_middleware`, an HTTP middleware for the API server (`--middleware
  slidingserve.engines.vllm.validation.slo_middleware`): it answers a bad SLO with a 400
  before the endpoint runs, so a streamed request gets a 400 too rather than a 200 whose
  stream carries the error.

What the middleware answers, for a POST to `/v1/completions` or `/v1/chat/completions` (one
`json.loads` of the body, then a few look-ups; every 400 has vLLM's `ErrorResponse` body, a
one-line message and `param` naming the field at fault):

- a body that is not JSON, a JSON value other than an object, or JSON nested deeper than
  Python's parser goes (`RecursionError`): passed on; the endpoint reports it (FastAPI answers
  a body it cannot parse with a 400 of its own);
- `vllm_xargs` present, not null and not an object (an array, a string, a number, a boolean):
  400 "vllm_xargs must be an object";
- a non-null top-level `seed` on a host where vLLM runs on the CPU: 400. vLLM 0.32's CPU build
  dies on a seeded request whose sampled token is discarded (a chunked prefill): the model
  runner rewinds the request's torch generator with `set_offset`, which a CPU generator
  refuses, and the `RuntimeError` kills the engine core. The engine-level `--seed` is safe;
- `vllm_xargs` holding a bad SLO (anything `parse_slo_args` refuses, however large or deep): 400
  with its message, which names the key;
- a valid request the engine cannot serve in time, judged from the load the engine cores
  publish (`LOAD_DIR_ENV`, `load_record.py`): 503 (or 429, `REFUSAL_STATUS_ENV`) with a
  `Retry-After` header, see `overload.py`;
- a request let through that the engine refuses: the same answer in place of the
  endpoint's 200 without a token (`refused_answers.py`; while the engine cores publish
  their load, a streamed response's status leaves with its first token);
- a request of one prompt let through after the queue test, with no id of its own: passed
  on with an `X-Request-Id` holding `ADMITTED_MARK` (`mark_admitted`, `overload.py`);
- anything else: passed on unchanged, but for the mark taken out of an id its client named
  (on every endpoint).

The defaults fill in what a request leaves out; they come from `SLO_DEFAULTS_ENV`, set by the
launcher, and only matter here as far as a request's SLO is checked with them.
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, NamedTuple

from vllm.exceptions import VLLMValidationError
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

from slidingserve.core.slo_args import (
    DEFAULT_SLO,
    SLOArgumentError,
    SLODefaults,
    parse_slo_args,
)
from slidingserve.engines.vllm.load_record import (
    ADMITTED_MARK,
    LOAD_DIR_ENV,
    LoadRecord,
    read_records,
)
from slidingserve.engines.vllm.overload import (
    ADMISSION_GUARD_ENV,
    REFUSAL_STATUS_ENV,
    LetThrough,
    Tokenizer,
    Verdict,
    admission_guard,
    best_record,
    overload_response,
    overload_verdict,
    refusal_status,
    retry_after,
)
from slidingserve.engines.vllm.refused_answers import answer_refusals
from slidingserve.engines.vllm.runtime import SLO_DEFAULTS_ENV

if TYPE_CHECKING:
    import torch
    from starlette.requests import Request
    from starlette.responses import Response
    from vllm.config import VllmConfig
    from vllm.sampling_params import SamplingParams

LET_THROUGH = LetThrough()
"""The requests this API server process let through lately, for the admission check."""
REQUEST_ID_HEADER = b"x-request-id"  # vLLM's request ids come from it when it is sent

COMPLETION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
"""The OpenAI endpoints whose body may carry `vllm_xargs`."""

SEED_ON_CPU = (
    "per-request seed is not supported by vLLM's CPU build (it crashes the engine); omit `seed`"
)


class BadRequest(NamedTuple):
    """Why the middleware refuses a request."""

    message: str  # one line, for the client
    param: str  # the body field at fault


def check_slo_args(extra_args: Mapping[str, object] | None) -> None:
    """Raise `SLOArgumentError` if `extra_args` holds a bad SLO."""
    parse_slo_args(extra_args, slo_defaults(os.environ.get(SLO_DEFAULTS_ENV)))


@functools.lru_cache(maxsize=4)
def slo_defaults(raw: str | None) -> SLODefaults:
    """The defaults encoded in `raw` (the JSON of `SLO_DEFAULTS_ENV`; a margin of 0 where it
    gives none), or `DEFAULT_SLO`."""
    if not raw:
        return DEFAULT_SLO
    try:
        values = json.loads(raw)
        return SLODefaults(
            ttft_ms=float(values["ttft_ms"]),
            tbt_ms=float(values["tbt_ms"]),
            margin_ms=float(values.get("margin_ms", 0.0)),
        )
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(f"{SLO_DEFAULTS_ENV}={raw!r} is not valid: {error!r}") from None


class SLOValidator(LogitsProcessor):  # type: ignore[misc]  # Any without the extra
    """A logits processor that only validates: it leaves every logit as it is."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Called by vLLM's front end for every request; raises `VLLMValidationError` (a 400
        over HTTP) when the request's `extra_args` hold a bad SLO."""
        try:
            check_slo_args(sampling_params.extra_args)
        except SLOArgumentError as error:
            raise VLLMValidationError(str(error), parameter="extra_args") from error

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        pass  # no state: the processor never changes logits

    def is_argmax_invariant(self) -> bool:
        return True

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        pass

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return logits


@functools.cache
def seed_crashes_engine() -> bool:
    """Whether a per-request `seed` can kill this host's engine: true where vLLM runs on the
    CPU (see the module docstring). Asked once per process."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


async def slo_middleware(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """ASGI HTTP middleware: a completion request with a bad SLO in its `vllm_xargs` (or a
    `seed` the engine cannot take) gets a 400 with an OpenAI-style error body, one the
    engine cannot serve in time a 503 or 429 (`overload.py`), and so does one the engine
    refuses itself (`refused_answers.py`); every other request goes through unchanged but
    for its id (`mark_admitted`; while the engine cores publish their load, its status
    leaves with its first token). The module docstring lists every case."""
    if request.method != "POST" or request.url.path not in COMPLETION_PATHS:
        mark_admitted(request.scope, {}, admitted=False)  # no client's id carries the mark
        return await call_next(request)
    payload = _payload(await request.body())
    refusal = None if payload is None else _refusal(payload)
    if refusal is not None:
        return _bad_request(refusal)
    records = _load_records()
    if payload is None or not records or _protected(payload):  # protected: never refused
        mark_admitted(request.scope, payload or {}, admitted=False)
        return await call_next(request)
    status = refusal_status(os.environ.get(REFUSAL_STATUS_ENV))
    verdict = await _overload(request, payload, records)
    if verdict.overload is not None:
        return overload_response(verdict.overload, status)
    mark_admitted(request.scope, payload, verdict.admitted)
    response = await call_next(request)
    best = best_record(records)  # None only without records
    return await answer_refusals(response, status, retry_after(best) if best else 1)


def _payload(body: bytes) -> dict[str, Any] | None:
    """The JSON object of a body, or None if it is not one (the endpoint says so)."""
    try:
        payload: Any = json.loads(body or b"{}")
    except (ValueError, RecursionError):  # not JSON, or too deep to parse
        return None
    return payload if isinstance(payload, dict) else None


def _refusal(payload: dict[str, Any]) -> BadRequest | None:
    """Why a completion request with this body is refused, or None to let it through."""
    xargs = payload.get("vllm_xargs")
    if xargs is not None and not isinstance(xargs, dict):
        return BadRequest(f"vllm_xargs must be an object, got {_json_kind(xargs)}", "vllm_xargs")
    if payload.get("seed") is not None and seed_crashes_engine():
        return BadRequest(SEED_ON_CPU, "seed")
    if xargs is None:
        return None
    try:
        check_slo_args(xargs)
    except SLOArgumentError as error:
        return BadRequest(str(error), "vllm_xargs")
    return None


def _protected(payload: dict[str, Any]) -> bool:
    """Whether a request whose SLO is valid is protected."""
    defaults = slo_defaults(os.environ.get(SLO_DEFAULTS_ENV))
    return parse_slo_args(payload.get("vllm_xargs"), defaults).protected


def _load_records() -> list[LoadRecord]:
    """The engine cores' fresh load records ([] without `LOAD_DIR_ENV`, or with admission
    control off: then nothing is refused)."""
    folder = os.environ.get(LOAD_DIR_ENV)
    return read_records(folder, time.time()) if folder else []


async def _overload(
    request: Request, payload: dict[str, Any], records: list[LoadRecord]
) -> Verdict:
    """Whether the engine can serve this valid request in time, from the engine cores'
    load `records`."""
    defaults = slo_defaults(os.environ.get(SLO_DEFAULTS_ENV))
    tokenizer = served_tokenizer(request)
    path = request.url.path
    guard = admission_guard(os.environ.get(ADMISSION_GUARD_ENV))
    return await overload_verdict(
        path, payload, records, defaults, tokenizer, let_through=LET_THROUGH, guard=guard
    )


def mark_admitted(
    scope: MutableMapping[str, Any], payload: Mapping[str, Any], admitted: bool
) -> None:
    """Give an `admitted` request (`Verdict.admitted`) an id with `ADMITTED_MARK` in it,
    through the `X-Request-Id` header vLLM takes its request ids from, unless its client
    named an id of its own (the header, or the body's `request_id`: then the engine tests
    it again); take the mark out of any id the client named, so that only this check's
    answers carry it."""
    mark = ADMITTED_MARK.encode()
    headers = [
        (name, value.replace(mark, b"") if name.lower() == REQUEST_ID_HEADER else value)
        for name, value in scope.get("headers", [])
    ]
    named = any(name.lower() == REQUEST_ID_HEADER for name, _ in headers)
    body_id = payload.get("request_id")
    if not named and admitted and body_id is None:
        headers.append((REQUEST_ID_HEADER, f"{ADMITTED_MARK}-{uuid.uuid4().hex}".encode()))
    elif not named and isinstance(body_id, str) and ADMITTED_MARK in body_id:
        headers.append((REQUEST_ID_HEADER, body_id.replace(ADMITTED_MARK, "").encode()))
    scope["headers"] = headers


def served_tokenizer(request: Request) -> Tokenizer | None:
    """The served model's tokenizer, held by vLLM's engine client in the app's state; None
    where there is none (`skip_tokenizer_init`, an app that is not vLLM's)."""
    client = getattr(request.app.state, "engine_client", None)
    renderer = getattr(client, "renderer", None)
    tokenizer: Tokenizer | None = getattr(renderer, "tokenizer", None)
    return tokenizer


def _json_kind(value: object) -> str:
    """What a JSON value other than an object or null is, for an error message."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else "an array"


def _bad_request(refusal: BadRequest) -> Response:
    """A 400 with the error body vLLM's OpenAI server uses (`ErrorResponse`)."""
    from starlette.responses import JSONResponse

    error = {
        "message": refusal.message,
        "type": "BadRequestError",
        "param": refusal.param,
        "code": 400,
    }
    return JSONResponse(status_code=400, content={"error": error})
