"""Segment ids of generated requests, namespaced so that unrelated text never shares one.

`core/prefix.py` reads two runs of one segment id as the same text. A workload therefore
gives every piece of text its own id, and ids of different kinds never collide: the kind
sits in the lowest `KIND_BITS` bits, a trace file's index (for Mooncake's `hash_ids`, which
are only unique within their file) in the next `SOURCE_BITS`, and the value above them. A
Mooncake hash id 7 of file 0, one of file 1, request 7's own message and request 7's output
are four different segments.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum

from slidingserve.core.prefix import Run, leading_runs

KIND_BITS = 4
SOURCE_BITS = 16


class Kind(IntEnum):
    """What a segment holds."""

    SYSTEM = 0  # the shared system prompt (value 0)
    MESSAGE = 1  # a request's own prompt text (value: its index in the run)
    OUTPUT = 2  # a request's output (value: its index in the run)
    TRACE_BLOCK = 3  # a block of a trace's prompt (value: its hash id, with the file's index)


def segment(kind: Kind, value: int, source: int = 0) -> int:
    """The id of segment `value` of `kind` (from trace file `source`), unique over all three."""
    if value < 0:
        raise ValueError(f"a segment value must not be negative, got {value}")
    if not 0 <= source < 1 << SOURCE_BITS:
        raise ValueError(f"a trace file index must be in [0, {1 << SOURCE_BITS}), got {source}")
    return (((value << SOURCE_BITS) | source) << KIND_BITS) | int(kind)


def message(request: int, tokens: int) -> Run:
    """Request `request`'s own prompt text, `tokens` long."""
    return segment(Kind.MESSAGE, request), tokens


def output(request: int, tokens: int) -> Run:
    """Request `request`'s output, `tokens` long."""
    return segment(Kind.OUTPUT, request), tokens


def with_output(
    prompt_runs: Sequence[Run], prompt: int, output_tokens: int, request: int
) -> tuple[Run, ...]:
    """The content of a request trimmed to `prompt` tokens of `prompt_runs`, then its output."""
    return (*leading_runs(prompt_runs, prompt), output(request, output_tokens))


def trace_prompt(
    hash_ids: Sequence[int], source: int, prompt: int, block_size: int, request: int
) -> tuple[Run, ...]:
    """A replayed prompt of `prompt` tokens as runs: piece k of `block_size` tokens is the
    segment of `hash_ids[k]` in trace file `source`; tokens past the ids' blocks are the
    request's own message (ids past the prompt are ignored)."""
    runs: list[Run] = []
    covered = 0
    for hash_id in hash_ids:
        if covered >= prompt:
            break
        tokens = min(block_size, prompt - covered)
        runs.append((segment(Kind.TRACE_BLOCK, hash_id, source), tokens))
        covered += tokens
    if covered < prompt:
        runs.append(message(request, prompt - covered))
    return tuple(runs)
