"""The API server's admission check: the prompt's low estimate, and when it refuses."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from slidingserve.core.slo_args import SLODefaults
from slidingserve.engines.vllm.load_record import LoadRecord, QueueView
from slidingserve.engines.vllm.overload import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    TEXT_SLACK,
    LetThrough,
    Overload,
    Prompt,
    Verdict,
    admission_guard,
    best_record,
    count_tokens,
    most_tokens,
    overload_verdict,
    prompts,
    refusal_status,
    retry_after,
)

DEFAULTS = SLODefaults(ttft_ms=1000.0, tbt_ms=50.0)
RATE = 1000.0  # prefill tokens per second: a TTFT of 100 ms leaves time for 100 tokens


class WordTokenizer:
    """A token per word; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.calls += 1
        return [0] * (len(text.split()) + (1 if add_special_tokens else 0))


def make_record(rate: float = RATE, queued: float = 0.0) -> LoadRecord:
    return LoadRecord(written=0.0, prefill_rate=rate, queued_prefill_s=queued)


def verdict(
    payload: dict[str, Any],
    path: str = COMPLETIONS_PATH,
    records: list[LoadRecord] | None = None,
    tokenizer: WordTokenizer | None = None,
    now: float = 0.0,
    let_through: LetThrough | None = None,
    guard: float = 0.0,
) -> Verdict:
    records = [make_record()] if records is None else records
    return asyncio.run(
        overload_verdict(
            path,
            payload,
            records,
            DEFAULTS,
            tokenizer,
            clock=lambda: now,
            let_through=let_through,
            guard=guard,
        )
    )


def check(payload: dict[str, Any], path: str = COMPLETIONS_PATH, **options: Any) -> Overload | None:
    return verdict(payload, path, **options).overload


def words(n: int) -> str:
    return " ".join(["word"] * n)


class TestPrompts:
    @pytest.mark.parametrize(
        ("prompt", "expected"),
        [
            ("hello", [Prompt(0, ("hello",))]),
            ([1, 2, 3], [Prompt(3)]),
            (["a", "b"], [Prompt(0, ("a",)), Prompt(0, ("b",))]),
            ([[1, 2], [3]], [Prompt(2), Prompt(1)]),
            ([], []),
            (None, []),
            ([1, "a"], []),
            ([True, 2], []),
            ({"text": "x"}, []),
        ],
    )
    def test_completion_prompts(self, prompt: object, expected: list[Prompt]) -> None:
        assert prompts(COMPLETIONS_PATH, {"prompt": prompt}) == expected

    def test_a_chats_text_is_its_string_contents_and_text_parts(self) -> None:
        messages = [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]},
            {"role": "assistant", "content": None},
        ]
        assert prompts(CHAT_PATH, {"messages": messages}) == [Prompt(0, ("be brief", "hi"))]

    @pytest.mark.parametrize("messages", [None, "hi", ["hi"]])
    def test_messages_that_are_not_understood_give_no_prompt(self, messages: object) -> None:
        assert prompts(CHAT_PATH, {"messages": messages}) == []

    def test_the_upper_bound_is_a_token_per_byte_plus_slack(self) -> None:
        assert most_tokens(Prompt(5, ("ab", "é"))) == 5 + 2 + 2 + 2 * TEXT_SLACK

    def test_counting_needs_a_tokenizer_only_for_text(self) -> None:
        assert count_tokens(Prompt(7), None) == 7
        assert count_tokens(Prompt(0, ("a b",)), None) is None
        assert count_tokens(Prompt(2, ("a b", "c")), WordTokenizer()) == 5


class TestDecision:
    def test_token_ids_that_take_longer_than_the_ttft_are_refused(self) -> None:
        overload = check({"prompt": [1] * 101, "vllm_xargs": {"ttft_ms": 100}})
        assert overload == Overload(101, RATE, 0.1, 1)
        assert overload.prefill_s == pytest.approx(0.101)
        assert "101 prompt tokens" in overload.message()
        assert overload.message().startswith("slo-refused:")

    def test_a_prompt_that_just_fits_is_let_through(self) -> None:
        assert check({"prompt": [1] * 100, "vllm_xargs": {"ttft_ms": 100}}) is None

    def test_the_default_ttft_applies_without_one(self) -> None:
        assert check({"prompt": [1] * 1001}) is not None
        assert check({"prompt": [1] * 1000}) is None

    @pytest.mark.parametrize("protected", [True, 1, "true"])
    def test_a_protected_request_is_never_refused(self, protected: object) -> None:
        xargs = {"ttft_ms": 1, "protected": protected}
        assert check({"prompt": [1] * 5000, "vllm_xargs": xargs}) is None

    def test_without_a_fresh_record_nothing_is_refused(self) -> None:
        assert check({"prompt": [1] * 5000, "vllm_xargs": {"ttft_ms": 1}}, records=[]) is None

    def test_text_is_counted_with_the_tokenizer(self) -> None:
        tokenizer = WordTokenizer()
        xargs = {"ttft_ms": 100}
        assert check({"prompt": words(101), "vllm_xargs": xargs}, tokenizer=tokenizer) is not None
        assert check({"prompt": words(100), "vllm_xargs": xargs}, tokenizer=tokenizer) is None

    def test_text_too_short_to_be_refused_is_not_tokenized(self) -> None:
        tokenizer = WordTokenizer()
        assert (
            check({"prompt": "x" * 90, "vllm_xargs": {"ttft_ms": 100}}, tokenizer=tokenizer) is None
        )
        assert tokenizer.calls == 0

    def test_without_a_tokenizer_text_is_let_through(self) -> None:
        assert check({"prompt": words(5000), "vllm_xargs": {"ttft_ms": 1}}) is None

    def test_a_chat_is_refused_on_its_messages_text(self) -> None:
        messages = [{"role": "user", "content": words(60)}, {"role": "user", "content": words(41)}]
        payload = {"messages": messages, "vllm_xargs": {"ttft_ms": 100}}
        overload = check(payload, path=CHAT_PATH, tokenizer=WordTokenizer())
        assert overload is not None and overload.prompt_tokens == 101

    def test_several_prompts_are_refused_only_if_the_shortest_is(self) -> None:
        xargs = {"ttft_ms": 100}
        assert check({"prompt": [[1] * 500, [1] * 50], "vllm_xargs": xargs}) is None
        overload = check({"prompt": [[1] * 500, [1] * 150], "vllm_xargs": xargs})
        assert overload is not None and overload.prompt_tokens == 150

    def test_a_body_without_a_prompt_is_let_through(self) -> None:
        assert check({"vllm_xargs": {"ttft_ms": 1}}) is None
        assert check({"prompt_embeds": "...", "vllm_xargs": {"ttft_ms": 1}}) is None

    def test_the_fastest_engine_decides(self) -> None:
        records = [make_record(rate=500.0), make_record(rate=2000.0)]
        payload = {"prompt": [1] * 150, "vllm_xargs": {"ttft_ms": 100}}
        assert check(payload, records=records) is None  # 75 ms at the faster engine
        assert check(payload, records=records[:1]) is not None


def queued(*entries: tuple[float, int], seen: float = 0.0) -> LoadRecord:
    """A record with a published queue at `RATE`: (seconds to the deadline, tokens)."""
    return LoadRecord(0.0, RATE, 0.0, QueueView(seen, RATE, entries))


class TestQueueDecision:
    """The queue-aware test (`admission_test=queue`), from the queue the engine published."""

    def test_a_request_that_fits_behind_the_queue_is_let_through(self) -> None:
        # 600 tokens due before it: 600 + 300 in 0.9 s of its 1 s.
        record = queued((0.5, 600), (3.0, 2000))
        assert check({"prompt": [1] * 300}, records=[record]) is None

    def test_only_a_request_of_one_prompt_that_fits_the_queue_is_admitted(self) -> None:
        record = queued((0.5, 600), (3.0, 2000))
        assert verdict({"prompt": [1] * 300}, records=[record]) == Verdict(None, admitted=True)
        several = verdict({"prompt": [[1] * 300, [1] * 200]}, records=[record])
        assert several == Verdict(None, admitted=False)  # runs as two, one counted
        refused = verdict({"prompt": [1] * 500}, records=[record])
        assert refused.overload is not None and not refused.admitted
        untested = verdict({"prompt": [1] * 300})  # a rate, no queue: nothing to fit
        assert untested == Verdict(None, admitted=False)

    def test_one_that_would_finish_late_behind_it_is_refused(self) -> None:
        record = queued((0.5, 600), (3.0, 2000))
        overload = check({"prompt": [1] * 500}, records=[record])
        assert overload is not None and overload.queued_tokens == 600
        assert "after 600 queued ahead" in overload.message()

    def test_one_that_would_make_a_request_queued_before_it_late_is_refused(self) -> None:
        # Due in 1 s it goes before the one due in 1.2 s, which would finish at 1.3 s.
        record = queued((1.2, 1000))
        assert check({"prompt": [1] * 300}, records=[record]) is not None
        assert check({"prompt": [1] * 200}, records=[record]) is None

    def test_the_time_since_the_engine_saw_the_queue_counts(self) -> None:
        # Seen 0.5 s ago: the request's deadline is 1.5 s into the queue, and 1,200 tokens
        # are due before it (0.5 s of them done since, as the engine went on prefilling).
        record = queued((0.8, 1200), seen=-0.5)
        assert check({"prompt": [1] * 300}, records=[record]) is None
        assert check({"prompt": [1] * 300}, records=[record], now=-0.4) is not None

    def test_nothing_fits_a_queue_at_a_rate_of_zero(self) -> None:
        stalled = LoadRecord(0.0, RATE, 0.0, QueueView(0.0, 0.0, ()))
        overload = check({"prompt": [1] * 10}, records=[stalled])
        assert overload is not None and overload.queued_tokens == 0

    def test_a_request_that_fits_one_engine_is_let_through(self) -> None:
        full, empty = queued((0.9, 950)), queued()
        assert check({"prompt": [1] * 300}, records=[full]) is not None
        assert check({"prompt": [1] * 300}, records=[full, empty]) is None

    def test_no_request_fits_while_the_decodes_fill_the_tbt(self) -> None:
        full = LoadRecord(0.0, RATE, 0.0, QueueView(0.0, RATE, (), decode_seats=0))
        overload = check({"prompt": [1] * 10}, records=[full])
        assert overload is not None and overload.decodes_full
        assert "one more would make every decode late" in overload.message()
        room = LoadRecord(0.0, RATE, 0.0, QueueView(0.0, RATE, (), decode_seats=1))
        assert check({"prompt": [1] * 10}, records=[room]) is None

    def test_requests_let_through_since_the_queue_was_seen_are_counted_in_it(self) -> None:
        # Each 400-token request alone fits the empty queue (0.4 s of its 1 s); two fit
        # together (0.8 s), a third would finish at 1.2 s: late.
        let_through = LetThrough()
        record = queued(seen=0.0)
        answers = [
            check({"prompt": [1] * 400}, records=[record], now=0.01, let_through=let_through)
            for _ in range(3)
        ]
        assert answers[:2] == [None, None]
        assert answers[2] is not None and answers[2].queued_tokens == 800
        assert len(let_through) == 2  # the refused one is not counted
        # Without the bookkeeping each is tested against the same empty queue.
        assert check({"prompt": [1] * 400}, records=[record], now=0.01) is None

    def test_a_queue_seen_after_them_holds_them_already(self) -> None:
        let_through = LetThrough()
        for _ in range(2):
            check({"prompt": [1] * 400}, records=[queued()], now=0.01, let_through=let_through)
        later = queued((0.41, 400), (0.81, 400), seen=0.02)  # the engine saw both
        # 800 + 150 tokens by 1.01 s: fits; counted twice (1,750 tokens) it would not.
        fits = check({"prompt": [1] * 150}, records=[later], now=0.03, let_through=let_through)
        assert fits is None
        assert len(let_through) == 1  # the two are forgotten, the new one is kept

    def test_an_idle_engines_old_queue_does_not_keep_them_for_ever(self) -> None:
        let_through = LetThrough()
        stale = queued(seen=0.0)  # an idle engine does not see its queue anew
        check({"prompt": [1] * 10}, records=[stale], now=1.0, let_through=let_through)
        check({"prompt": [1] * 10}, records=[stale], now=2.5, let_through=let_through)
        assert len(let_through) == 2
        check({"prompt": [1] * 10}, records=[stale], now=3.5, let_through=let_through)
        assert len(let_through) == 2  # the first, let through over 2 s ago, is forgotten

    def test_each_request_let_through_takes_a_decode_seat(self) -> None:
        let_through = LetThrough()
        record = LoadRecord(0.0, RATE, 0.0, QueueView(0.0, RATE, (), decode_seats=2))
        answers = [
            check({"prompt": [1] * 10}, records=[record], now=0.01, let_through=let_through)
            for _ in range(3)
        ]
        assert answers[:2] == [None, None]
        assert answers[2] is not None and answers[2].decodes_full

    def test_text_is_always_counted_then(self) -> None:
        tokenizer = WordTokenizer()
        record = queued((0.9, 950))
        assert check({"prompt": words(60)}, records=[record], tokenizer=tokenizer) is not None
        assert tokenizer.calls == 1


class TestGuard:
    """`serve --admission-guard-ms`: the API server tests each request that much early."""

    def test_a_prompt_that_fits_only_without_the_guard_is_refused_with_it(self) -> None:
        payload = {"prompt": [1] * 95, "vllm_xargs": {"ttft_ms": 100}}
        assert check(payload) is None
        overload = check(payload, guard=0.010)  # 95 ms of prefill, 90 ms to the guard
        assert overload == Overload(95, RATE, 0.1, 1, guard_s=0.010)
        assert "TTFT of 100 ms less the server's admission guard of 10 ms" in overload.message()

    def test_behind_the_queue_the_request_is_tested_early_and_counted_with_its_deadline(
        self,
    ) -> None:
        # 600 queued tokens due first, then 300 of its own: done at 0.9 s of its 1 s.
        record = queued((0.5, 600))
        assert check({"prompt": [1] * 300}, records=[record], guard=0.05) is None
        refused = check({"prompt": [1] * 300}, records=[record], guard=0.15)
        assert refused is not None and refused.ttft_s == 1.0 and refused.guard_s == 0.15
        # Let through, it is counted due at its own deadline (1 s), not the guarded one.
        let_through = LetThrough()
        check({"prompt": [1] * 10}, records=[queued()], let_through=let_through, guard=0.5)
        assert let_through.since(-1.0)[0].deadline == 1.0

    def test_a_guard_as_long_as_the_ttft_leaves_the_request_due_at_once(self) -> None:
        assert check({"prompt": [1], "vllm_xargs": {"ttft_ms": 100}}, guard=0.2) is not None

    @pytest.mark.parametrize(
        ("raw", "seconds"), [(None, 0.0), ("", 0.0), ("0", 0.0), ("250", 0.25)]
    )
    def test_the_configured_guard(self, raw: str | None, seconds: float) -> None:
        assert admission_guard(raw) == seconds

    @pytest.mark.parametrize("raw", ["-1", "nan", "inf", "x", "3600001"])
    def test_a_bad_guard_is_an_error(self, raw: str) -> None:
        with pytest.raises(ValueError, match="admission guard is a number of milliseconds"):
            admission_guard(raw)


class TestRetryAfter:
    @pytest.mark.parametrize(("queued", "seconds"), [(0.0, 1), (0.2, 1), (1.0, 1), (7.2, 8)])
    def test_the_queued_prefill_rounded_up_at_least_one_second(
        self, queued: float, seconds: int
    ) -> None:
        assert retry_after(make_record(queued=queued)) == seconds

    def test_ties_in_rate_go_to_the_least_queued(self) -> None:
        chosen = best_record([make_record(queued=3.0), make_record(queued=1.0)])
        assert chosen == make_record(queued=1.0)
        assert best_record([]) is None


class TestStatus:
    @pytest.mark.parametrize(
        ("raw", "status"), [(None, 503), ("", 503), ("503", 503), ("429", 429)]
    )
    def test_the_configured_status(self, raw: str | None, status: int) -> None:
        assert refusal_status(raw) == status

    @pytest.mark.parametrize("raw", ["500", "x", "200"])
    def test_another_status_is_an_error(self, raw: str) -> None:
        with pytest.raises(ValueError, match="503 or 429"):
            refusal_status(raw)
