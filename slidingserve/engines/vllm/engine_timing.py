"""Time a real vLLM engine's steps (`slidingserve profile`): run traffic under a random token
budget, time every step, fit the batch-latency predictor, report its accuracy on held-out
steps.

The `random-chunk` policy draws each step's budget at random, so ordinary traffic of a few
sizes yields batches of every shape: few and many decodes, short and long contexts, small
and large prefill chunks. `save_profile` writes the fitted predictor together with the
timed batches it was fitted to, which `serve` hands to policies that fit a model of their
own (QoServe), so that they start from the same measurements.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from slidingserve.engines.vllm.runtime import (
    CPU_ENGINE_LIMITS,
    adapter_kwargs,
    engine_kwargs,
    prepare_offline_process,
    require_vllm,
)
from slidingserve.predictor import PredictorMetadata, save_predictor
from slidingserve.predictor.calibration import fit_batches
from slidingserve.predictor.steps import EngineSteps

if TYPE_CHECKING:
    from slidingserve.predictor import FitResult


class TrafficRound(NamedTuple):
    requests: int  # sent together
    prompt_share: float  # prompt length as a share of the context
    output_tokens: int


ROUNDS = (
    TrafficRound(1, 0.05, 48),
    TrafficRound(4, 0.25, 32),
    TrafficRound(12, 0.1, 40),
    TrafficRound(24, 0.4, 16),
    TrafficRound(32, 0.05, 24),
    TrafficRound(8, 0.7, 12),
)
"""Traffic that covers the shapes a scheduler produces (lengths relative to the context)."""


def time_engine(
    model: str,
    *,
    seed: int = 0,
    repeats: int = 3,
    max_num_batched_tokens: int = CPU_ENGINE_LIMITS.max_num_batched_tokens,
    max_num_seqs: int = CPU_ENGINE_LIMITS.max_num_seqs,
) -> EngineSteps:
    """Run `ROUNDS` `repeats` times on `model`; every timed step, with the engine's facts
    (`save_profile` fits the predictor to them)."""
    require_vllm()
    prepare_offline_process()
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=model,
        **engine_kwargs(
            seed=seed, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs
        ),
        **adapter_kwargs("random-chunk", policy_options={"seed": seed}, online_learning=False),
    )
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    context = int(llm.llm_engine.model_config.max_model_len)
    vocab = int(llm.llm_engine.model_config.get_vocab_size())
    rng = np.random.default_rng(seed)
    for _ in range(repeats):
        for round_ in ROUNDS:
            prompt = max(
                1, min(int(round_.prompt_share * context), context - 1 - round_.output_tokens)
            )
            prompts = [
                {"prompt_token_ids": rng.integers(3, vocab, size=prompt).tolist()}
                for _ in range(round_.requests)
            ]
            params = SamplingParams(max_tokens=round_.output_tokens, ignore_eos=True)
            llm.generate(prompts, params, use_tqdm=False)
    config = llm.llm_engine.vllm_config
    return EngineSteps(
        engine=f"{Path(model).name} on vllm-{vllm_version()}",
        max_model_len=context,
        kv_blocks=int(config.cache_config.num_gpu_blocks),
        block_size=int(config.cache_config.block_size),
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        batches=tuple(scheduler.timer.samples),
    )


def save_profile(
    path: str | Path, steps: EngineSteps, model: str, hardware: str, seed: int = 0
) -> FitResult:
    """Fit the predictor to the timed batches of `steps` and write it to `path` with those
    batches (`predictor/io.py`); return the fit, with its held-out accuracy."""
    fit = fit_batches(list(steps.batches), seed)
    metadata = PredictorMetadata.from_fit(fit, Path(model).name, hardware)
    save_predictor(path, fit.predictor, metadata, batches=steps.batches)
    return fit


def vllm_version() -> str:
    import vllm

    return str(vllm.__version__)
