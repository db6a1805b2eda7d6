"""What the adapter adds to each vLLM step, beside vLLM's own scheduler, policy by policy.

    python benchmarks/vllm_overhead.py --model tiny-llama [--requests 64] [--policies ...]
        [--max-num-batched-tokens 256] [--max-num-seqs 32]

Needs the `vllm` extra and a model folder (`slidingserve tiny-model --out tiny-llama`).
For each policy it serves the same offline traffic (`--requests` prompts of mixed lengths,
one engine per policy, one torch thread) and prints, per step: the median and p99 time the
adapter spends (building the view, the policy's decision, imposing the plan, bookkeeping),
the median time of vLLM's own `schedule()` in the same steps, the median model step, and
how many steps vLLM departed from the plan.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from slidingserve.engines.vllm.runtime import (
    adapter_kwargs,
    engine_kwargs,
    prepare_offline_process,
    require_vllm,
)
from slidingserve.policies import POLICIES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--policies", nargs="+", default=sorted(POLICIES))
    parser.add_argument("--max-num-batched-tokens", type=int, default=256)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    args = parser.parse_args()
    require_vllm()
    prepare_offline_process()
    from vllm import LLM, SamplingParams

    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 300, size=args.requests).tolist()
    header = f"{'policy':<22} {'adapter med/p99 ms':>19} {'vLLM sched ms':>13} {'step ms':>8}"
    print(header + f" {'steps':>6} {'off-plan':>8}")
    for name in args.policies:
        llm = LLM(
            model=args.model,
            **engine_kwargs(
                max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs
            ),
            **adapter_kwargs(name, online_learning=False),
        )
        scheduler = llm.llm_engine.engine_core.engine_core.scheduler
        prompts = [{"prompt_token_ids": [5 + (i % 900) for i in range(n)]} for n in lengths]
        llm.generate(prompts, SamplingParams(max_tokens=32, ignore_eos=True), use_tqdm=False)
        adapter = np.array(scheduler.timer.step_overhead) * 1000
        own = statistics.median(scheduler.timer.vllm_schedule_seconds) * 1000
        step = statistics.median(s.seconds for s in scheduler.timer.samples) * 1000
        mismatches = scheduler.health.counts.plan_mismatches
        print(
            f"{name:<22} {np.median(adapter):>9.3f} / {np.percentile(adapter, 99):<7.3f}"
            f" {own:>13.3f} {step:>8.2f} {len(adapter):>6} {mismatches:>8}"
        )
        llm.llm_engine.engine_core.shutdown()
        del llm


if __name__ == "__main__":
    main()
