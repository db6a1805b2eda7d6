"""Synthetic shared prefixes for the built-in workloads: a system prompt, multi-turn chats.

Both options are off by default and change nothing then. When on, they lengthen prompts and
describe every request's tokens as content runs (`core/prefix.py`, ids from `segments.py`):

- `SystemPrompt(tokens, share)`: each request is chosen with probability `share` (a draw of
  the workload's prefix stream, see `workload.py`) and its prompt starts with the same
  `tokens`-token system prompt, one segment shared by all chosen requests.
- `Conversations(turns, concurrent)`: requests in arrival order are dealt round-robin into
  `concurrent` streams, so a conversation's turns are about `concurrent` ÷ rate apart and
  which request follows which does not depend on the rate (common random numbers). Each
  stream is cut into conversations of `turns` turns. Turn t ≥ 2's prompt is the previous
  turn's prompt, its output, then the request's own sampled prompt (the new message). When
  that would not fit the context (prompt ≤ L − 1 and prompt + output ≤ L, L the model's
  context), the conversation ends and a new one starts with this request.

With both, a conversation whose first request was chosen starts every turn with the system
prompt (the later turns' own draws are not used). A request that starts a conversation (or
every request, without conversations) is trimmed to the context as
`workload.trim_to_context` does, its runs with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from slidingserve.core.checks import require_int, require_number
from slidingserve.workloads.segments import Kind, message, segment, with_output

if TYPE_CHECKING:
    import numpy.typing as npt

    from slidingserve.core.prefix import Run

CONCURRENT_CONVERSATIONS = 16
"""Conversations under way at once when `--conversations TURNS` gives no count."""


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    """A system prompt of `tokens` tokens that a `share` of requests start with."""

    tokens: int  # tokens of the system prompt
    share: float = 1.0  # probability that a request (a conversation) has it, in (0, 1]

    def __post_init__(self) -> None:
        require_int("system prompt tokens", self.tokens)
        share = require_number("system prompt share", self.share, 0.0, strict=True)
        if share > 1:
            raise ValueError(f"system prompt share must be in (0, 1], got {self.share}")

    @classmethod
    def parse(cls, text: str) -> SystemPrompt:
        """`TOKENS` or `TOKENS:SHARE` (share 1 when not given)."""
        tokens, _, share = text.partition(":")
        try:
            return cls(int(tokens), float(share) if share else 1.0)
        except ValueError as error:
            raise ValueError(f"--system-prompt TOKENS[:SHARE], got {text!r}: {error}") from None

    def describe(self) -> str:
        return f"a {self.tokens}-token system prompt on {self.share:.0%} of requests"


@dataclass(frozen=True, slots=True)
class Conversations:
    """Multi-turn conversations of `turns` turns, `concurrent` of them under way at once."""

    turns: int  # requests per conversation (fewer when the context runs out)
    concurrent: int = CONCURRENT_CONVERSATIONS  # round-robin streams of requests

    def __post_init__(self) -> None:
        require_int("conversation turns", self.turns, minimum=2)
        require_int("concurrent conversations", self.concurrent)

    @classmethod
    def parse(cls, text: str) -> Conversations:
        """`TURNS` or `TURNS:CONCURRENT` (`CONCURRENT_CONVERSATIONS` when not given)."""
        turns, _, concurrent = text.partition(":")
        try:
            return cls(int(turns), int(concurrent) if concurrent else CONCURRENT_CONVERSATIONS)
        except ValueError as error:
            raise ValueError(f"--conversations TURNS[:CONCURRENT], got {text!r}: {error}") from None

    def describe(self) -> str:
        return f"conversations of {self.turns} turns, {self.concurrent} at once"


class Composed(NamedTuple):
    """Requests with their shared prefixes: lengths after trimming, and their content."""

    prompt: npt.NDArray[np.int64]  # tokens
    output: npt.NDArray[np.int64]  # tokens
    content: tuple[tuple[Run, ...], ...]  # per request, prompt then output
    trimmed: int  # requests cut to fit the context


class _Turn(NamedTuple):
    """One request as composed, and what the next turn of its conversation needs."""

    runs: tuple[Run, ...]  # its prompt then its output
    prompt: int  # tokens
    output: int  # tokens
    turn: int  # 1 for a conversation's first request
    trimmed: bool  # whether it was cut to fit the context


def compose(
    prompt: npt.NDArray[np.int64],
    output: npt.NDArray[np.int64],
    max_model_len: int,
    system: SystemPrompt | None,
    conversations: Conversations | None,
    stream: np.random.Generator,
) -> Composed:
    """Sampled lengths (request i in row i, in arrival order) with the options applied
    (module docstring); `stream` draws which requests have the system prompt."""
    n = len(prompt)
    chosen = (stream.random(n) < system.share) if system else np.zeros(n, dtype=bool)
    streams = conversations.concurrent if conversations else 1
    last: dict[int, _Turn] = {}
    turns: list[_Turn] = []
    for i, (sampled, answer) in enumerate(zip(prompt.tolist(), output.tolist(), strict=True)):
        previous = last.get(i % streams) if conversations else None
        if previous is None or not _continues(
            previous, conversations, sampled, answer, max_model_len
        ):
            turn = _first_turn(i, sampled, answer, system if chosen[i] else None, max_model_len)
        else:
            turn = _next_turn(previous, i, sampled, answer)
        last[i % streams] = turn
        turns.append(turn)
    return Composed(
        np.asarray([turn.prompt for turn in turns], dtype=np.int64),
        np.asarray([turn.output for turn in turns], dtype=np.int64),
        tuple(turn.runs for turn in turns),
        sum(turn.trimmed for turn in turns),
    )


def _continues(
    previous: _Turn, conversations: Conversations | None, sampled: int, answer: int, context: int
) -> bool:
    """Whether a request of `sampled` prompt and `answer` output tokens can be the next turn
    after `previous`: the conversation has turns left and the grown prompt fits untrimmed."""
    if conversations is None or previous.turn >= conversations.turns:
        return False
    grown = previous.prompt + previous.output + sampled
    return grown <= context - 1 and grown + answer <= context


def _first_turn(
    request: int, sampled: int, answer: int, system: SystemPrompt | None, context: int
) -> _Turn:
    """Request `request` starting a conversation (or alone), trimmed to the context."""
    runs: tuple[Run, ...] = (message(request, sampled),)
    if system is not None:
        runs = ((segment(Kind.SYSTEM, 0), system.tokens), *runs)
    wanted = sampled + (system.tokens if system else 0)
    prompt = min(wanted, context - 1)
    output = min(answer, context - prompt)
    trimmed = prompt < wanted or output < answer
    content = with_output(runs, prompt, output, request)
    return _Turn(content, prompt, output, 1, trimmed)


def _next_turn(previous: _Turn, request: int, sampled: int, answer: int) -> _Turn:
    """Request `request` as the turn after `previous` (it fits: `_continues`)."""
    prompt = previous.prompt + previous.output + sampled
    runs = (*previous.runs, message(request, sampled))
    content = with_output(runs, prompt, answer, request)
    return _Turn(content, prompt, answer, previous.turn + 1, False)
