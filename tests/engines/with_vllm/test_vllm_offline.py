"""Offline generation through `LLM(...)` with the adapter, for every registered policy."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

vllm = pytest.importorskip("vllm", minversion="0.32")

from slidingserve.engines.vllm.runtime import adapter_kwargs, engine_kwargs  # noqa: E402
from slidingserve.policies import POLICIES  # noqa: E402

PROMPT_LENGTHS = (150, 20, 90, 5, 60, 35)
MAX_TOKENS = 8
LIMITS = {"max_model_len": 512, "max_num_batched_tokens": 256, "max_num_seqs": 16}


def prompts(lengths: tuple[int, ...]) -> list[dict[str, list[int]]]:
    """Token-id prompts of the given lengths (ids past the tokenizer's special tokens)."""
    return [
        {"prompt_token_ids": [4 + (31 * i + 7 * j) % 1000 for j in range(n)]}
        for i, n in enumerate(lengths)
    ]


def slo_params(index: int) -> Any:
    """Greedy sampling of exactly MAX_TOKENS tokens, each request with its own SLO."""
    extra = {"ttft_ms": 400 + 100 * index, "tbt_ms": 80, "protected": index % 3 == 0}
    return vllm.SamplingParams(
        max_tokens=MAX_TOKENS, ignore_eos=True, temperature=0.0, extra_args=extra
    )


@pytest.fixture
def make_llm(tiny_model: Path, offline_process: None) -> Iterator[Any]:
    """Builds an `LLM` on the tiny model scheduled by a policy; shuts it down afterwards."""
    built: list[Any] = []

    def build(policy: str) -> Any:
        llm = vllm.LLM(model=str(tiny_model), **engine_kwargs(**LIMITS), **adapter_kwargs(policy))
        built.append(llm)
        return llm

    yield build
    for llm in built:
        llm.llm_engine.engine_core.shutdown()
    built.clear()
    gc.collect()


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_request_completes_and_runs_as_planned(make_llm: Any, policy: str) -> None:
    llm = make_llm(policy)
    params = [slo_params(i) for i in range(len(PROMPT_LENGTHS))]
    outputs = llm.generate(prompts(PROMPT_LENGTHS), params, use_tqdm=False)

    assert [len(o.prompt_token_ids) for o in outputs] == list(PROMPT_LENGTHS)
    assert [len(o.outputs[0].token_ids) for o in outputs] == [MAX_TOKENS] * len(PROMPT_LENGTHS)
    assert all(o.finished for o in outputs)
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    assert type(scheduler).__name__ == "SlidingServeScheduler"
    # KV is ample: vLLM ran every plan as given, and never had to fill an empty one.
    assert (scheduler.health.plan_mismatches, scheduler.health.empty_plans) == (0, 0)
    # One sample per executed step: every prompt token once, then MAX_TOKENS - 1 decodes each
    # (the first output token comes from the last prefill chunk).
    tokens = sum(sample.shape.num_tokens for sample in scheduler.timer.samples)
    assert tokens == sum(PROMPT_LENGTHS) + (MAX_TOKENS - 1) * len(PROMPT_LENGTHS)
    assert all(0 < sample.seconds < 10 for sample in scheduler.timer.samples)
    assert len(scheduler.timer.step_overhead) >= len(scheduler.timer.samples)
    assert all(seconds >= 0 for seconds in scheduler.timer.step_overhead)
