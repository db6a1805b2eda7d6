"""A simulator workload turned into the HTTP requests of a benchmark run.

The workload is the simulator's (`generate_requests`: same lengths, mixes, arrivals, tiers
and SLOs for one seed), generated for the simulator's 8192-token context and then scaled to
the served model's context: both lengths × max_model_len / 8192 when the model's context is
shorter, rounded, then trimmed so that prompt + output ≤ max_model_len − 1, each ≥ 1 token.
Prompts are token ids drawn from a stream of the seed of their own (in [10, vocab_size)), so a
prompt has exactly its planned length whatever the tokenizer. A request whose content is known
(`--system-prompt`, `--conversations`, a replayed trace's hash ids) takes each run's ids from
its segment's own stream instead, so that requests sharing text share token ids and the
server's prefix cache finds them; scaling a prompt to the context keeps its leading runs.
Only prompts share ids: a conversation's next turn repeats the previous turn's planned
output, which the server never generated, so live it shares the earlier prompt only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from slidingserve.core.checks import require_int
from slidingserve.core.prefix import Run, leading_runs
from slidingserve.core.request import Request
from slidingserve.core.slo_args import to_slo_args
from slidingserve.workloads import WorkloadConfig, generate_requests

if TYPE_CHECKING:
    import numpy.typing as npt

    from slidingserve.core.request import SLO

REFERENCE_CONTEXT = 8192
"""Tokens of context the workload's lengths are drawn for (Llama-3-8B, the simulator's model)."""

FIRST_TOKEN_ID = 10
"""Prompt ids start here: low ids are often special tokens (BOS, EOS, padding)."""

SEGMENT_CHUNK = 1024
"""A content segment's token ids are drawn this many at a time (`SegmentIds`)."""


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request of the run, before it is sent."""

    request_id: str  # "r0", "r1", ... in order of sending
    send_at: float  # seconds after the run starts (the scheduled send time)
    prompt_ids: tuple[int, ...]  # token ids; the prompt length is len(prompt_ids)
    max_tokens: int  # output tokens asked for (ignore_eos: the server produces all of them)
    slo: SLO  # seconds; deadlines count from `send_at` (docs/design.md §1.1)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def ttft_deadline(self) -> float:
        """Seconds after the run start by which the first token is due."""
        return self.slo.deadline(self.send_at, 0)


def plan_requests(
    workload: WorkloadConfig, rate: float, seed: int, max_model_len: int, vocab_size: int
) -> list[PlannedRequest]:
    """The workload's requests at `rate` (requests/s), scaled to `max_model_len` tokens."""
    vocab_size = require_int("vocab_size", vocab_size, minimum=FIRST_TOKEN_ID + 1)
    ids = _prompt_stream(seed)
    segments = SegmentIds(seed, vocab_size)
    return [
        PlannedRequest(
            request.request_id,
            request.arrival,
            segments.prompt(request)
            if request.content
            else tuple(ids.integers(FIRST_TOKEN_ID, vocab_size, size=request.prompt_len).tolist()),
            request.output_len,
            request.slo,
        )
        for request in scaled_requests(workload, rate, seed, max_model_len)
    ]


class SegmentIds:
    """The token ids of each content segment: a stream of its own, the same in every request
    that holds it, drawn once and kept as far as a request has read it."""

    def __init__(self, seed: int, vocab_size: int) -> None:
        self._seed = seed
        self._vocab_size = vocab_size
        self._ids: dict[int, list[int]] = {}

    def prompt(self, request: Request) -> tuple[int, ...]:
        """`request`'s prompt ids, run by run (its content's first `prompt_len` tokens)."""
        ids: list[int] = []
        used: dict[int, int] = {}  # tokens of each segment read so far in this request
        for segment, tokens in leading_runs(request.content, request.prompt_len):
            start = used.get(segment, 0)
            used[segment] = start + tokens
            ids += self._segment(segment, start + tokens)[start : start + tokens]
        return tuple(ids)

    def _segment(self, segment: int, length: int) -> list[int]:
        """At least the first `length` ids of `segment`, drawn `SEGMENT_CHUNK` at a time,
        chunk k from a stream of (seed, segment, k): the same whatever reads it first."""
        known = self._ids.setdefault(segment, [])
        while len(known) < length:
            chunk = len(known) // SEGMENT_CHUNK
            stream = np.random.default_rng([self._seed, segment % (1 << 63), chunk])
            known += stream.integers(FIRST_TOKEN_ID, self._vocab_size, SEGMENT_CHUNK).tolist()
        return known


def scaled_requests(
    workload: WorkloadConfig, rate: float, seed: int, max_model_len: int
) -> list[Request]:
    """The workload's requests at `rate` with lengths fitted to `max_model_len` tokens
    (`scale_lengths`): what a bench run sends, and what a simulation of it runs."""
    requests = generate_requests(workload, rate, seed, REFERENCE_CONTEXT)
    prompt, output = scale_lengths(
        np.array([r.prompt_len for r in requests], dtype=np.int64),
        np.array([r.output_len for r in requests], dtype=np.int64),
        max_model_len,
    )
    return [
        Request(
            request.request_id, request.arrival, p, o, request.slo, content=_scaled(request, p, o)
        )
        for request, p, o in zip(requests, prompt.tolist(), output.tolist(), strict=True)
    ]


def _scaled(request: Request, prompt: int, output: int) -> tuple[Run, ...]:
    """`request`'s content for a prompt cut to `prompt` tokens (its leading runs) and an
    output of `output` (its own output segment); empty without content."""
    if not request.content:
        return ()
    output_segment = leading_runs(request.content, request.prompt_len + 1)[-1][0]
    return (*leading_runs(request.content, prompt), (output_segment, output))


def scale_lengths(
    prompt: npt.NDArray[np.int64], output: npt.NDArray[np.int64], max_model_len: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Lengths drawn for `REFERENCE_CONTEXT` tokens fitted to a context of `max_model_len`.

    Both shrink by max_model_len / REFERENCE_CONTEXT when that is below 1 (a longer context
    keeps the workload's own lengths), round to the nearest token (≥ 1), then the prompt is
    cut to max_model_len − 2 and the output to max_model_len − 1 − prompt.
    """
    max_model_len = require_int("max_model_len", max_model_len, minimum=3)  # tokens
    factor = min(1.0, max_model_len / REFERENCE_CONTEXT)
    scaled_prompt = np.maximum(np.rint(prompt * factor), 1).astype(np.int64)
    scaled_output = np.maximum(np.rint(output * factor), 1).astype(np.int64)
    scaled_prompt = np.minimum(scaled_prompt, max_model_len - 2)
    return scaled_prompt, np.minimum(scaled_output, max_model_len - 1 - scaled_prompt)


def _prompt_stream(seed: int) -> np.random.Generator:
    """The prompt-id stream of `seed`: a fifth child of its SeedSequence (the workload
    generator uses the first four), so prompts never change lengths or arrivals."""
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(5)[4])


def request_body(
    planned: PlannedRequest,
    model: str,
    *,
    xargs: bool = True,
    priority: bool = False,
    cache_salt: str | None = None,
) -> dict[str, Any]:
    """The JSON body of `planned` for an OpenAI-compatible `/v1/completions` endpoint.

    `xargs` adds vLLM's own fields: the SLO as `vllm_xargs` (`to_slo_args`: `ttft_ms`,
    `tbt_ms`, `protected` 0/1, `tier` when it has one) and `return_token_ids` (each chunk
    then says how many tokens it carries: vLLM merges tokens into one chunk when the client
    lags). `priority` sets vLLM's `priority` to the TTFT deadline in ms after the run start
    (smaller runs sooner under `--scheduling-policy priority`). `cache_salt` (vLLM's field)
    keeps the request's prefix-cache blocks apart from those of requests with another salt.
    """
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(planned.prompt_ids),
        "max_tokens": planned.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if xargs:
        body["vllm_xargs"] = to_slo_args(planned.slo)
        body["return_token_ids"] = True
    if priority:
        body["priority"] = round(planned.ttft_deadline * 1000.0)
    if cache_salt is not None:
        body["cache_salt"] = cache_salt
    return body


def workload_with(workload: WorkloadConfig, num_requests: int | None) -> WorkloadConfig:
    """`workload` with `num_requests` requests (None: unchanged)."""
    if num_requests is None:
        return workload
    return dataclasses.replace(workload, num_requests=num_requests)
