"""How much of a TBT window the decodes leave for prefill, per hardware point.

    .venv/bin/python scripts/decode_budget.py [--hardware a40:llama-2-7b:2 ...]
                                              [--context 1500] [--tbt-ms 50]

For 8, 16 and 32 decodes of `--context` cached tokens each, prints the noise-free time of a
decode-only iteration on the simulator's ground-truth model, the share of it that is decode
attention (reading the KV cache), and the most prefill tokens (in steps of 16) that still fit
beside those decodes in one iteration of `--tbt-ms`. Where decode attention is large (an MHA
model on a GPU of modest bandwidth) the window leaves few prefill tokens, and an adaptive
budget has little room to differ from a fixed chunk.
"""

from __future__ import annotations

import argparse
import dataclasses

from slidingserve.core.batch import BatchShape
from slidingserve.sim.hardware import GroundTruthLatency, parse_hardware

POINTS = ("a40:llama-2-7b:2", "a40:qwen2.5-7b:2", "a40:llama-2-7b:1", "a100:llama-2-7b:1")
DECODES = (8, 16, 32)


def prefill_room(latency: GroundTruthLatency, decodes: tuple[int, ...], window: float) -> int:
    """The most prefill tokens (a multiple of 16, up to 2048) that fit beside `decodes`."""
    room = 0
    for tokens in range(16, 2049, 16):
        if latency.expected_time(BatchShape(decodes, ((tokens, 0),))) > window:
            break
        room = tokens
    return room


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hardware", action="append", metavar="GPU:MODEL:TP")
    parser.add_argument("--context", type=int, default=1500)
    parser.add_argument("--tbt-ms", type=float, default=50.0)
    args = parser.parse_args()
    window = args.tbt_ms / 1000
    for point in args.hardware or POINTS:
        latency = GroundTruthLatency(dataclasses.replace(parse_hardware(point), noise=0.0))
        for count in DECODES:
            decodes = (args.context,) * count
            total = latency.expected_time(BatchShape(decodes, ()))
            attention = float(latency.decode_attention_time(count, count * args.context))
            room = prefill_room(latency, decodes, window)
            print(
                f"{point:20s} {count:3d} decodes: {total * 1000:5.1f} ms decode-only "
                f"({attention * 1000:4.1f} ms attention); prefill room in "
                f"{args.tbt_ms:g} ms: {room} tokens"
            )


if __name__ == "__main__":
    main()
