"""The adapter on a vLLM Scheduler built without a model (SPEC §11): no weights, no worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

vllm = pytest.importorskip("vllm")

import torch  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from slidingserve.core import SLO  # noqa: E402
from slidingserve.engines.vllm.adapter import SlidingServeScheduler  # noqa: E402

BLOCK = 16
EOS = 2
CONFIG_ONLY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 1024,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 1024,
    "bos_token_id": 1,
    "eos_token_id": EOS,
    "torch_dtype": "float32",
}

init_none_hash(sha256)
HASHER = get_request_block_hasher(BLOCK, sha256)


def make_scheduler(
    tmp_path: Path, policy: str, options: dict[str, Any] | None = None, budget: int = 128
) -> SlidingServeScheduler:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG_ONLY))
    model = ModelConfig(
        model=str(tmp_path), skip_tokenizer_init=True, dtype="float32", max_model_len=1024
    )
    scheduler = SchedulerConfig(
        max_num_seqs=16,
        max_num_batched_tokens=budget,
        max_model_len=1024,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        async_scheduling=False,
    )
    cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=False)
    settings = {"policy": policy, "policy_options": options or {}, "online_learning": False}
    config = VllmConfig(
        model_config=model,
        scheduler_config=scheduler,
        cache_config=cache,
        additional_config={"slidingserve": settings},
    )
    kv = KVCacheConfig(
        num_blocks=1000,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer.0"],
                FullAttentionSpec(
                    block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32
                ),
            )
        ],
    )
    cache.num_gpu_blocks = 1000
    return SlidingServeScheduler(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK,
        log_stats=False,
    )


def engine_request(
    request_id: str, prompt: int, max_tokens: int = 4, arrival: float = 0.0, **slo: Any
) -> Request:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args=slo or None)
    params.update_from_generation_config({}, EOS)
    return Request(
        request_id=request_id,
        prompt_token_ids=[3 + i % 500 for i in range(prompt)],
        sampling_params=params,
        pooling_params=None,
        arrival_time=arrival,
        block_hasher=HASHER,
    )


def run_step(scheduler: SlidingServeScheduler) -> Any:
    """One step with a fake model: a token for each request whose prompt is complete."""
    output = scheduler.schedule()
    ids = list(output.num_scheduled_tokens)
    sampled = [
        [7] if scheduler.requests[i].num_computed_tokens >= scheduler.requests[i].num_tokens else []
        for i in ids
    ]
    runner = ModelRunnerOutput(
        req_ids=ids, req_id_to_index={r: k for k, r in enumerate(ids)}, sampled_token_ids=sampled
    )
    scheduler.update_from_output(output, runner)
    return output


def steps(scheduler: SlidingServeScheduler, limit: int = 100) -> Iterator[Any]:
    for _ in range(limit):
        if not scheduler.has_requests():
            return
        yield run_step(scheduler)


@pytest.mark.parametrize(
    ("policy", "options"),
    [
        ("sarathi-edf", {"chunk_size": 48}),
        ("sarathi", {"chunk_size": 40}),
        ("vllm", {}),
        ("slidingserve", {}),
        ("qoserve", {}),
    ],
)
def test_vllm_runs_exactly_the_plan_in_order(
    tmp_path: Path, policy: str, options: dict[str, Any]
) -> None:
    scheduler = make_scheduler(tmp_path, policy, options)
    # Deadlines against the arrival: "c" is due first, then "a", then "b".
    scheduler.add_request(engine_request("a", 100, arrival=0.0, ttft_ms=3000))
    scheduler.add_request(engine_request("b", 20, arrival=0.0, ttft_ms=9000))
    scheduler.add_request(engine_request("c", 60, arrival=0.0, ttft_ms=1000))
    checked = 0
    for output in steps(scheduler):
        plan = scheduler.last_plan
        assert plan is not None
        wanted = {c.request.request_id: c.tokens for c in plan.chunks}
        assert dict(output.num_scheduled_tokens) == wanted
        assert output.total_num_scheduled_tokens <= scheduler.limits.max_num_batched_tokens
        new = {d.req_id for d in output.scheduled_new_reqs}
        planned_order = [c.request.request_id for c in plan.chunks]
        got_order = list(output.num_scheduled_tokens)
        assert [r for r in got_order if r not in new] == [r for r in planned_order if r not in new]
        assert [r for r in got_order if r in new] == [r for r in planned_order if r in new]
        checked += 1
    assert checked >= 3
    assert scheduler.plan_mismatches == 0
    assert len(scheduler.mirror) == 0  # every finished request was forgotten


def test_edf_plan_follows_the_slos_from_extra_args(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi-edf", {"chunk_size": 48})
    scheduler.add_request(engine_request("late", 30, ttft_ms=5000, tbt_ms=80, tier="std"))
    scheduler.add_request(engine_request("soon", 30, ttft_ms=500, protected="true"))
    assert scheduler.mirror.get("late").slo == SLO(5.0, 0.08, False, "std")  # type: ignore[union-attr]
    assert scheduler.mirror.get("soon").slo == SLO(0.5, 0.05, True, None)  # type: ignore[union-attr]
    output = run_step(scheduler)
    assert list(output.num_scheduled_tokens) == ["soon", "late"]  # earliest deadline first
    assert dict(output.num_scheduled_tokens) == {"soon": 30, "late": 18}


def test_a_bad_slo_never_breaks_the_engine_loop(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "sarathi")
    scheduler.add_request(engine_request("bad", 10, ttft_ms=-5))  # front end would say 400
    assert scheduler.invalid_slo_requests == 1
    assert scheduler.mirror.get("bad").slo == SLO(2.0, 0.05)  # type: ignore[union-attr]
    assert len(list(steps(scheduler))) >= 1 and not scheduler.has_requests()


def test_aborted_requests_are_forgotten(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "qoserve")
    scheduler.add_request(engine_request("stay", 40, max_tokens=20))
    scheduler.add_request(engine_request("gone", 300, max_tokens=20))
    run_step(scheduler)
    scheduler.finish_requests("gone", RequestStatus.FINISHED_ABORTED)
    assert scheduler.mirror.get("gone") is None and len(scheduler.mirror) == 1
    for output in steps(scheduler):
        assert "gone" not in output.num_scheduled_tokens
    assert len(scheduler.mirror) == 0


def test_each_step_is_timed_and_its_overhead_counted(tmp_path: Path) -> None:
    scheduler = make_scheduler(tmp_path, "slidingserve")
    scheduler.add_request(engine_request("a", 50, max_tokens=3))
    outputs = list(steps(scheduler))
    working = [o for o in outputs if o.total_num_scheduled_tokens > 0]
    assert len(scheduler.samples) == len(working) == 3  # prefill + two decodes
    assert len(scheduler.step_overhead) == len(outputs)
    first = scheduler.samples[0]
    assert first.shape.num_prefill_tokens == 50 and first.seconds >= 0
    assert all(s.shape.num_decodes == 1 for s in list(scheduler.samples)[1:])
