"""Synthetic shared prefixes: a system prompt on a share of requests, multi-turn
conversations; both off leave every request as it was."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slidingserve.core.prefix import block_keys
from slidingserve.workloads import (
    ArrivalConfig,
    Conversations,
    SystemPrompt,
    WorkloadConfig,
    generate_requests,
    get_tier_mix,
    sample_workload,
)
from slidingserve.workloads.segments import Kind, segment

KEY_BLOCK = 16
SYSTEM = segment(Kind.SYSTEM, 0)
CONTEXT = 8192


def config(name: str = "sharegpt", n: int = 2000, **options: object) -> WorkloadConfig:
    return WorkloadConfig(
        name,
        n,
        ArrivalConfig("gamma", burstiness=2.0),
        tiers=get_tier_mix("premium-standard"),
        **options,  # type: ignore[arg-type]
    )


def digest(values: object) -> str:
    return hashlib.sha256(repr(values).encode()).hexdigest()[:16]


# Computed before prefixes existed: generate_requests(config(name, 300), 3.0, 7, 4096).
BEFORE = {
    "sharegpt": ("c93e4d79a777c44e", "769dfd6199c34110", "4347302a39ff5a81", "c65590e38224fc7f"),
    "mixed-v1": ("dcc88f427f08fbe5", "5300785444d90e14", "4347302a39ff5a81", "48030f868f3f1f06"),
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_without_options_requests_are_as_before(name: str) -> None:
    requests = generate_requests(config(name, 300), 3.0, 7, 4096)
    got = (
        digest([r.prompt_len for r in requests]),
        digest([r.output_len for r in requests]),
        digest(np.round([r.arrival for r in requests], 9).tolist()),
        digest([(r.slo.ttft, r.slo.tbt) for r in requests]),
    )
    assert got == BEFORE[name]
    assert all(r.content == () for r in requests)


class TestSystemPrompt:
    PROMPT = SystemPrompt(160, 0.3)

    def test_the_chosen_share_shares_its_first_blocks_and_no_other_does(self) -> None:
        requests = generate_requests(config(system_prompt=self.PROMPT), 2.0, 1, CONTEXT)
        expected = block_keys([(SYSTEM, 160)], KEY_BLOCK)  # 10 keys
        starts = [block_keys(r.content, KEY_BLOCK)[:10] for r in requests]
        chosen = [keys == expected for keys in starts]
        assert sum(chosen) / len(requests) == pytest.approx(0.3, abs=0.04)
        others = {keys[0] for keys, has in zip(starts, chosen, strict=True) if not has}
        assert expected[0] not in others and len(others) == len(requests) - sum(chosen)

    def test_prompts_grow_by_the_system_prompt_and_arrivals_and_slos_stay(self) -> None:
        plain = generate_requests(config(), 2.0, 1, CONTEXT)
        longer = generate_requests(config(system_prompt=self.PROMPT), 2.0, 1, CONTEXT)
        for before, after in zip(plain, longer, strict=True):
            assert (after.arrival, after.slo) == (before.arrival, before.slo)
            extra = 160 if after.content[0][0] == SYSTEM else 0
            assert after.prompt_len == min(before.prompt_len + extra, CONTEXT - 1)

    def test_a_share_of_one_gives_every_request_the_prompt(self) -> None:
        requests = generate_requests(config(n=50, system_prompt=SystemPrompt(40)), 1.0, 0, CONTEXT)
        assert all(r.content[0] == (SYSTEM, 40) for r in requests)


class TestConversations:
    TURNS = Conversations(3, 4)

    def sampled(self, n: int) -> tuple[list[int], list[int]]:
        """The requests' own sampled lengths, untrimmed (lengths do not depend on L)."""
        sample = sample_workload(config(n=n), 1.0, 2, 10**9)
        return sample.prompt_lens.tolist(), sample.output_lens.tolist()

    def test_a_turn_holds_the_previous_turn_then_its_own_message(self) -> None:
        context = 4096
        requests = generate_requests(config(n=400, conversations=self.TURNS), 1.0, 2, context)
        prompts, outputs = self.sampled(400)
        continued = 0
        turn = [1] * len(requests)
        for i, request in enumerate(requests):
            assert request.prompt_len <= context - 1
            assert request.prompt_len + request.output_len <= context
            if i < 4:
                continue
            previous = requests[i - 4]
            grown = previous.prompt_len + previous.output_len + prompts[i]
            if request.content[: len(previous.content)] == previous.content:
                continued += 1
                turn[i] = turn[i - 4] + 1
                assert request.prompt_len == grown and request.output_len == outputs[i]
                shared = block_keys(previous.content, KEY_BLOCK)
                assert block_keys(request.content, KEY_BLOCK)[: len(shared)] == shared
            else:  # a new conversation: the last one had its turns, or this one cannot fit
                fits = grown <= context - 1 and grown + outputs[i] <= context
                assert turn[i - 4] == 3 or not fits
        assert max(turn) == 3 and continued > 100

    def test_content_does_not_depend_on_the_rate(self) -> None:
        slow = generate_requests(config(n=200, conversations=self.TURNS), 0.5, 0, CONTEXT)
        fast = generate_requests(config(n=200, conversations=self.TURNS), 8.0, 0, CONTEXT)
        assert [r.content for r in slow] == [r.content for r in fast]

    def test_with_a_system_prompt_every_turn_starts_with_it(self) -> None:
        both = config(n=200, conversations=self.TURNS, system_prompt=SystemPrompt(64))
        requests = generate_requests(both, 1.0, 0, CONTEXT)
        assert all(r.content[0] == (SYSTEM, 64) for r in requests)
        assert sum(len(r.content) > 3 for r in requests) > 50  # later turns among them


@settings(max_examples=30, deadline=None)
@given(
    tokens=st.integers(1, 3000),
    share=st.floats(0.01, 1.0),
    turns=st.integers(2, 6),
    concurrent=st.integers(1, 5),
    context=st.integers(2, 6000),
    seed=st.integers(0, 1000),
)
def test_runs_always_cover_the_request_within_the_context(
    tokens: int, share: float, turns: int, concurrent: int, context: int, seed: int
) -> None:
    options = config(
        "mixed-v1",
        40,
        system_prompt=SystemPrompt(tokens, share),
        conversations=Conversations(turns, concurrent),
    )
    for request in generate_requests(options, 1.0, seed, context):
        assert sum(t for _, t in request.content) == request.prompt_len + request.output_len
        assert request.prompt_len <= context - 1
        assert request.prompt_len + request.output_len <= context


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: SystemPrompt(0), "system prompt tokens must be at least 1"),
        (lambda: SystemPrompt(10, 0.0), "system prompt share must be above 0"),
        (lambda: SystemPrompt(10, 1.5), r"share must be in \(0, 1\]"),
        (lambda: Conversations(1), "conversation turns must be at least 2"),
        (lambda: Conversations(2, 0), "concurrent conversations must be at least 1"),
        (lambda: SystemPrompt.parse("x:1"), "--system-prompt TOKENS"),
        (lambda: Conversations.parse("3:y"), "--conversations TURNS"),
    ],
)
def test_bad_options_say_what_is_wrong(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


def test_parse_defaults() -> None:
    assert SystemPrompt.parse("300") == SystemPrompt(300, 1.0)
    assert SystemPrompt.parse("300:0.25") == SystemPrompt(300, 0.25)
    assert Conversations.parse("4") == Conversations(4, 16)
    assert Conversations.parse("4:2") == Conversations(4, 2)
