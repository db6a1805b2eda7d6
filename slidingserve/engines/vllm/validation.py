"""Reject a request with a bad SLO before it reaches vLLM's engine.

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

The defaults fill in what a request leaves out; they come from `SLO_DEFAULTS_ENV`, set by the
launcher, and only matter here as far as a request's SLO is checked with them.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from vllm.exceptions import VLLMValidationError
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

from slidingserve.core.slo_args import (
    DEFAULT_SLO,
    SLOArgumentError,
    SLODefaults,
    parse_slo_args,
)
from slidingserve.engines.vllm.runtime import SLO_DEFAULTS_ENV

if TYPE_CHECKING:
    import torch
    from starlette.requests import Request
    from starlette.responses import Response
    from vllm.config import VllmConfig
    from vllm.sampling_params import SamplingParams

COMPLETION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
"""The OpenAI endpoints whose body may carry `vllm_xargs`."""


def check_slo_args(extra_args: Mapping[str, object] | None) -> None:
    """Raise `SLOArgumentError` if `extra_args` holds a bad SLO."""
    parse_slo_args(extra_args, slo_defaults(os.environ.get(SLO_DEFAULTS_ENV)))


@functools.lru_cache(maxsize=4)
def slo_defaults(raw: str | None) -> SLODefaults:
    """The defaults encoded in `raw` (the JSON of `SLO_DEFAULTS_ENV`), or `DEFAULT_SLO`."""
    if not raw:
        return DEFAULT_SLO
    try:
        values = json.loads(raw)
        return SLODefaults(ttft_ms=float(values["ttft_ms"]), tbt_ms=float(values["tbt_ms"]))
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


async def slo_middleware(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """ASGI HTTP middleware: a completion request whose `vllm_xargs` hold a bad SLO gets a 400
    with an OpenAI-style error body; every other request goes through unchanged (a body that
    is not JSON is left to the endpoint, which reports it)."""
    if request.method == "POST" and request.url.path in COMPLETION_PATHS:
        message = _slo_error(await request.body())
        if message is not None:
            return _bad_request(message)
    return await call_next(request)


def _slo_error(body: bytes) -> str | None:
    """The error message for the SLO in a request body, or None when there is nothing to say."""
    try:
        payload: Any = json.loads(body or b"{}")
    except ValueError:
        return None
    xargs = payload.get("vllm_xargs") if isinstance(payload, dict) else None
    if not isinstance(xargs, dict):
        return None
    try:
        check_slo_args(xargs)
    except SLOArgumentError as error:
        return str(error)
    return None


def _bad_request(message: str) -> Response:
    """A 400 with the error body vLLM's OpenAI server uses (`ErrorResponse`)."""
    from starlette.responses import JSONResponse

    error = {"message": message, "type": "BadRequestError", "param": "vllm_xargs", "code": 400}
    return JSONResponse(status_code=400, content={"error": error})
