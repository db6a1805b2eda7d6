"""The simulator against a live vLLM engine: `slidingserve validate` over the workloads of
docs/live.md §6, within a stated time budget, then one summary of every goodput's error.

    .venv/bin/python benchmarks/validate_live.py --model small-llama --budget 60
    .venv/bin/python benchmarks/validate_live.py --model small-llama --quick

Workloads: mixed-v1 with Poisson arrivals, mixed-v1 with gamma arrivals (CV 2), and the
Mooncake trace's requests (its prompts and shared blocks, Poisson arrivals; only where
../shared/data holds it). The engine is profiled once, with the first workload, and every
later workload's twin is built from that profile (a step's time depends on its batch, not on
the workload). Each workload gets an equal share of the budget (minutes of live trials;
profiling and the simulated twins come on top); `validate` refuses a plan that could
overrun it, before its servers start. Needs the `vllm` extra and a model folder
(`slidingserve tiny-model --size small --out small-llama`).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from slidingserve.cli import main
from slidingserve.reporting import format_table

MOONCAKE = Path(__file__).resolve().parents[1].parent / "shared/data/traces"
MOONCAKE_TRACE = MOONCAKE / "mooncake_conversation_trace.jsonl"
WORKLOADS = {
    "mixed-v1 poisson": ["--workload", "mixed-v1"],
    "mixed-v1 gamma CV 2": ["--workload", "mixed-v1", "--arrival", "gamma", "--burstiness", "2"],
    "mooncake requests": ["--trace", f"{MOONCAKE_TRACE}:conversational"],
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="model folder to serve")
    parser.add_argument("--budget", type=float, default=60.0, help="minutes for every workload")
    parser.add_argument("--quick", action="store_true", help="two policies, one workload")
    parser.add_argument("--requests", type=int, default=200, help="requests a trial")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--out-dir", type=Path, default=Path("results/validate-live"))
    return parser.parse_args()


def main_script() -> None:
    args = parse_args()
    workloads = dict(WORKLOADS)
    if not MOONCAKE_TRACE.is_file():
        print(f"{MOONCAKE_TRACE} not found: the Mooncake workload is left out")
        workloads.pop("mooncake requests")
    policies = ["slidingserve", "vllm:fcfs"] if args.quick else None
    if args.quick:
        workloads = {"mixed-v1 gamma CV 2": workloads["mixed-v1 gamma CV 2"]}
    start = time.monotonic()
    steps: Path | None = None
    for index, (label, flags) in enumerate(workloads.items()):
        out = args.out_dir / f"w{index}"
        argv = ["validate", "--model", args.model, *flags, "--out-dir", str(out)]
        argv += ["--requests", str(args.requests), "--seeds", str(args.seeds)]
        argv += ["--budget", f"{args.budget / len(workloads):.1f}"]
        argv += ["--policies", ",".join(policies)] if policies else []
        argv += ["--steps", str(steps)] if steps else []
        print(f"\n=== {label}: slidingserve {' '.join(argv[1:])}", flush=True)
        main(argv)
        steps = steps or out / "steps.json"
    print(f"\nall workloads in {(time.monotonic() - start) / 60:.1f} min\n")
    print(summary_table(args.out_dir, list(workloads)))


def summary_table(out_dir: Path, labels: list[str]) -> str:
    """Per workload and policy: live and simulated goodput (`≥`/`<`: a bound), the error,
    both ranks."""
    rows = []
    for index, label in enumerate(labels):
        saved = json.loads((out_dir / f"w{index}" / "validation.json").read_text())
        for policy, figures in saved["summary"]["policies"].items():
            error = figures["goodput_error"]
            rows.append(
                [
                    label,
                    policy,
                    f"{figures['goodput_live_bound']} {figures['goodput_live']:.2f}".strip(),
                    f"{figures['goodput_simulated_bound']} "
                    f"{figures['goodput_simulated']:.2f}".strip(),
                    "n/a" if error is None or math.isnan(error) else f"{100 * error:+.0f}%",
                    str(figures["rank_live"]),
                    str(figures["rank_simulated"]),
                ]
            )
    header = ["workload", "policy", "live", "simulated", "error", "rank live", "rank sim"]
    return format_table(header, rows)


if __name__ == "__main__":
    main_script()
