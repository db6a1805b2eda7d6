"""vLLM schedulers built without a model (docs/vllm.md §10), and requests for them: no
weights, no worker. Import it only after `pytest.importorskip("vllm")`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from vllm import SamplingParams
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from slidingserve.engines.vllm.adapter import SlidingServeScheduler

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
    tmp_path: Path,
    policy: str,
    options: dict[str, Any] | None = None,
    budget: int = 128,
    blocks: int = 1000,
    *,
    async_scheduling: bool = False,
    prefix_caching: bool = False,
    data_parallel_size: int = 1,
    **extra: Any,
) -> SlidingServeScheduler:
    """A scheduler without a model and `blocks` KV blocks of `BLOCK` tokens; `extra` are
    more adapter settings (e.g. `predictor`). With `async_scheduling`, the engine's config
    says so as on a GPU (vLLM's CPU platform turns it off in the config it checks). Every
    `engine_request` of one length has the same tokens: with `prefix_caching` they share
    their prefixes. `data_parallel_size`: the engines its config says there are."""
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
    cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=prefix_caching)
    settings = {
        "policy": policy,
        "policy_options": options or {},
        "online_learning": False,
        **extra,
    }
    config = VllmConfig(
        model_config=model,
        scheduler_config=scheduler,
        cache_config=cache,
        additional_config={"slidingserve": settings},
    )
    config.scheduler_config.async_scheduling = async_scheduling
    config.parallel_config.data_parallel_size = data_parallel_size  # as one of several engines
    kv = KVCacheConfig(
        num_blocks=blocks,
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
    cache.num_gpu_blocks = blocks
    return SlidingServeScheduler(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK,
        log_stats=False,
    )


def engine_request(
    request_id: str,
    prompt: int,
    max_tokens: int = 4,
    arrival: float = 0.0,
    *,
    ignore_eos: bool = True,
    **slo: Any,
) -> Request:
    """A request of `prompt` tokens; `slo` are its `extra_args` (`ttft_ms`, ...)."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos, extra_args=slo or None)
    params.update_from_generation_config({}, EOS)
    return Request(
        request_id=request_id,
        prompt_token_ids=[3 + i % 500 for i in range(prompt)],
        sampling_params=params,
        pooling_params=None,
        arrival_time=arrival,
        block_hasher=HASHER,
    )


class FakeTime:
    """Stands in for the `time` module of the adapter's clocks (`timing.py`): the fake model
    advances it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now
