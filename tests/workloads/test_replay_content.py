"""Replayed traces carry their hash_ids as content: requests share block keys where the
trace's prompt blocks agree, across files never, and resampled rows never."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slidingserve.core.prefix import block_keys
from slidingserve.core.request import Request
from slidingserve.workloads import (
    TRACE_WORKLOAD,
    ArrivalConfig,
    Conversations,
    SystemPrompt,
    TraceSource,
    WorkloadConfig,
    generate_requests,
)

KEY_BLOCK = 16  # tokens per block of the cache the tests read keys with
PER_ID = 512 // KEY_BLOCK  # cache blocks in one trace hash id of 512 tokens


def jsonl(tmp_path: Path, name: str, rows: list[tuple[int, int, list[int]]]) -> str:
    """A Mooncake-style trace of (prompt, output, hash_ids) rows, one every second."""
    path = tmp_path / name
    path.write_text(
        "".join(
            json.dumps(
                {"timestamp": 1000 * k, "input_length": p, "output_length": o, "hash_ids": h}
            )
            + "\n"
            for k, (p, o, h) in enumerate(rows)
        ),
        encoding="utf-8",
    )
    return str(path)


def replayed(
    paths: list[str], max_model_len: int = 8192, options: dict[str, object] | None = None
) -> list[Request]:
    """Every row of the files replayed (seed 0, 1 req/s), with `WorkloadConfig` `options`."""
    count = sum(len(Path(p).read_text().splitlines()) - p.endswith(".csv") for p in paths)
    config = WorkloadConfig(
        TRACE_WORKLOAD,
        count,
        ArrivalConfig("trace"),
        traces=tuple(TraceSource(p) for p in paths),
        **(options or {}),  # type: ignore[arg-type]
    )
    return generate_requests(config, 1.0, 0, max_model_len)


def prompt_keys(request: Request) -> list[int]:
    """The block keys of a request's prompt alone."""
    return block_keys(request.content, KEY_BLOCK)[: request.prompt_len // KEY_BLOCK]


ROWS = [
    (1200, 5, [3, 4, 5]),  # three ids: 512 + 512 + 176 tokens
    (1100, 7, [3, 8, 9]),  # the first id shared with row 0
    (1300, 2, [3, 4, 5]),  # ids as row 0's; 100 tokens past them its own
    (700, 1, [11, 12]),  # nothing shared
]


def test_requests_share_keys_exactly_where_their_hash_ids_agree(tmp_path: Path) -> None:
    first, second, third, other = (prompt_keys(r) for r in replayed([jsonl(tmp_path, "a", ROWS)]))
    assert first[:PER_ID] == second[:PER_ID]
    assert first[PER_ID] != second[PER_ID]
    assert third[: len(first)] == first  # all of row 0's full blocks (1200 // 16 = 75)
    assert len(first) == 75 and third[75] != third[74]
    assert not set(other) & set(first + second + third)


def test_outputs_and_files_never_share(tmp_path: Path) -> None:
    same = [(1024, 64, [3, 4])] * 2
    a0, b0, a1, _ = replayed([jsonl(tmp_path, "a.jsonl", same), jsonl(tmp_path, "b.jsonl", same)])
    assert not set(prompt_keys(a0)) & set(prompt_keys(b0))  # one id in two files: two texts
    keys_a0, keys_a1 = block_keys(a0.content, KEY_BLOCK), block_keys(a1.content, KEY_BLOCK)
    assert keys_a0[:64] == keys_a1[:64]  # the prompts: 1024 tokens
    assert len(keys_a0) == 68 and not set(keys_a0[64:]) & set(keys_a1[64:])  # own outputs


def test_trimming_keeps_runs_consistent_with_the_lengths(tmp_path: Path) -> None:
    requests = replayed([jsonl(tmp_path, "a", ROWS)], max_model_len=1024)
    assert [r.prompt_len for r in requests] == [1023, 1023, 1023, 700]
    for request in requests:  # Request checks the runs cover prompt + output
        assert (
            sum(tokens for _, tokens in request.content) == 1024
            if request.prompt_len == 1023
            else 701
        )
    first, second = (prompt_keys(r) for r in requests[:2])
    assert first[:PER_ID] == second[:PER_ID] and first[PER_ID] != second[PER_ID]


def test_a_trace_without_hash_ids_gives_no_content(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,1\n1,6,2\n")
    assert all(r.content == () for r in replayed([str(path)]))


def test_resampled_rows_carry_no_content(tmp_path: Path) -> None:
    config = WorkloadConfig(
        TRACE_WORKLOAD,
        20,
        ArrivalConfig("poisson"),
        traces=(TraceSource(jsonl(tmp_path, "a", ROWS)),),
    )
    assert all(r.content == () for r in generate_requests(config, 1.0, 0, 8192))


def test_the_trace_block_size_sets_the_tokens_per_id(tmp_path: Path) -> None:
    rows = [(256, 1, [3, 4]), (256, 1, [3, 9])]
    first, second = (
        prompt_keys(r)
        for r in replayed([jsonl(tmp_path, "a", rows)], options={"trace_block_size": 128})
    )
    assert first[:8] == second[:8] and first[8] != second[8]  # 128 tokens = 8 blocks of 16


@pytest.mark.parametrize("option", ["system_prompt", "conversations"])
def test_synthetic_prefixes_are_refused_on_a_replay(tmp_path: Path, option: str) -> None:
    value = SystemPrompt(100) if option == "system_prompt" else Conversations(3)
    options: dict[str, object] = {option: value}
    with pytest.raises(ValueError, match="replayed trace's recorded lengths"):
        replayed([jsonl(tmp_path, "a", ROWS)], options=options)
