"""What compiling the policies' hot passes with mypyc would buy, measured.

    python benchmarks/compiled_reads.py [--requests 256] [--repeats 300]

Needs mypyc (it comes with mypy, in the `--dev` install) and a C compiler. It writes one
scratch module to a temporary folder with the project's own passes in it (their source,
read at run time), compiles it with mypyc, checks that the compiled passes answer as the
project's do, and times both on the project's `Request` objects (half decoding, half
waiting, with random lengths and slacks) and on a mypyc class with the fields the deadline
reads:

- the pass every planning policy makes over the queue at every step (each request's next
  deadline, `core.request.next_deadlines`), interpreted and compiled over `Request`, and
  over the compiled class from interpreted and compiled code;
- Moore–Hodgson on the deadlines and prefill tokens of the waiting requests
  (`policies.slidingserve.triage.moore_hodgson`), numbers only.

Prints the best time of `--repeats` calls of each, in microseconds, and the ratio to the
interpreted pass over `Request`. The figures (docs/design.md, section 11.2) say where a
compiled core helps and where it costs: numbers-only loops and compiled code reading
compiled classes run faster; compiled code reading the project's dataclasses, and
interpreted code (the simulator, the vLLM adapter, the metrics) reading compiled classes,
run slower than CPython 3.11's own specialised attribute reads.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import numpy as np

from slidingserve.core import SLO, Phase, Request
from slidingserve.core.request import next_deadlines, remaining_prefills
from slidingserve.policies.slidingserve.triage import moore_hodgson

SCRATCH_MODULE = "compiled_passes"
# The scratch module: the project's own `next_deadlines` and `moore_hodgson` (their source,
# read at run time), the deadline pass again typed on `Job`, and `Slo` and `Job`, compiled
# stand-ins of `SLO` and `Request` with the fields the deadline reads. `Request` is `Any`
# there: compiled code reads the project's requests as any object.
SCRATCH_HEADER = """
from __future__ import annotations
from collections.abc import Iterable, Sequence
from heapq import heappop, heappush, heappushpop
from typing import Any as Request


class Slo:
    def __init__(self, ttft: float, tbt: float) -> None:
        self.ttft = ttft
        self.tbt = tbt


class Job:
    def __init__(self, arrival: float, slo: Slo, num_generated: int) -> None:
        self.arrival = arrival
        self.slo = slo
        self.num_generated = num_generated
"""
PASS_SIGNATURE = "def next_deadlines(requests: Iterable[Request])"
JOB_SIGNATURE = "def next_deadlines_of_jobs(requests: list[Job])"


def scratch_source() -> str:
    """The scratch module's text (`SCRATCH_HEADER`, then the project's passes)."""
    deadlines = inspect.getsource(next_deadlines)
    if PASS_SIGNATURE not in deadlines:
        sys.exit(f"next_deadlines no longer starts with {PASS_SIGNATURE!r}: update this script")
    return "\n\n".join(
        [
            SCRATCH_HEADER,
            deadlines,
            deadlines.replace(PASS_SIGNATURE, JOB_SIGNATURE),
            inspect.getsource(moore_hodgson),
        ]
    )


TRIAGE_RATE = 20_000.0  # prefill tokens per second Moore–Hodgson assumes here
NOW = 100.0  # seconds: the states' clock
PROTECTED_EVERY = 16  # one request in this many is protected (Moore–Hodgson keeps its time)


def states(size: int, rng: np.random.Generator) -> tuple[list[Request], list[Request]]:
    """`size` requests, half decoding and half waiting (decodes first), with random prompts
    and outputs, first-token slacks from −0.2 to 2 s, as `benchmarks/sched_overhead.py`
    gives its waiting requests, and one in `PROTECTED_EVERY` protected."""
    decoding: list[Request] = []
    waiting: list[Request] = []
    for i in range(size):
        prompt, output = int(rng.integers(16, 2048)), int(rng.integers(2, 512))
        arrival = NOW - float(rng.uniform(0.0, 20.0))
        ttft = max(0.01, NOW - arrival + float(rng.uniform(-0.2, 2.0)))
        slo = SLO(ttft, 0.05, protected=i % PROTECTED_EVERY == 1)
        request = Request(f"r{i}", arrival, prompt, output, slo)
        if i % 2 == 0:
            request.phase, request.num_generated = Phase.DECODING, int(rng.integers(1, output))
            request.num_computed = prompt + request.num_generated - 1
            decoding.append(request)
        else:
            waiting.append(request)
    return decoding, waiting


def compile_scratch(folder: Path) -> ModuleType:
    """The scratch module compiled by mypyc in `folder`, imported."""
    source = folder / f"{SCRATCH_MODULE}.py"
    source.write_text(scratch_source())
    command = [sys.executable, "-m", "mypyc", source.name]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"mypyc could not compile the scratch module:\n{done.stdout}{done.stderr}")
    source.unlink()  # only the extension module is left to import
    sys.modules.pop(SCRATCH_MODULE, None)  # an earlier run's, from a folder now gone
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module(SCRATCH_MODULE)
    finally:
        sys.path.remove(str(folder))
    if not str(module.__file__).endswith((".so", ".pyd")):
        sys.exit(f"{SCRATCH_MODULE} imported from {module.__file__}, not a compiled module")
    return module


def best_microseconds(call: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    decoding, waiting = states(args.requests, np.random.default_rng(0))
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as folder:
        compiled = compile_scratch(Path(folder))
        timed = passes(compiled, [*decoding, *waiting], waiting)
        times = [(label, best_microseconds(call, args.repeats)) for label, call in timed.calls]
    reference = times[0][1]
    print(
        f"{args.requests} requests ({len(waiting)} waiting, Moore–Hodgson keeps {timed.kept}), "
        f"best of {args.repeats} calls"
    )
    print(f"{'pass':<44} {'µs':>7} {'÷ first row':>12}")
    for label, micros in times:
        print(f"{label:<44} {micros:>7.1f} {micros / reference:>12.2f}")


class Passes(NamedTuple):
    """The passes to time, and how many waiting requests Moore–Hodgson keeps."""

    calls: list[tuple[str, Callable[[], object]]]
    kept: int


def passes(compiled: ModuleType, requests: list[Request], waiting: list[Request]) -> Passes:
    """The passes to time, each checked first to give what the project's own gives."""
    jobs = [
        compiled.Job(r.arrival, compiled.Slo(r.slo.ttft, r.slo.tbt), r.num_generated)
        for r in requests
    ]
    expected = next_deadlines(requests)
    if not compiled.next_deadlines(requests) == compiled.next_deadlines_of_jobs(jobs) == expected:
        sys.exit("the compiled passes do not give the interpreted pass's deadlines")
    queue = sorted(waiting, key=lambda r: r.next_deadline)
    triage = (
        next_deadlines(queue),
        remaining_prefills(queue),
        [r.protected for r in queue],
        NOW,
        TRIAGE_RATE,
    )
    kept = moore_hodgson(*triage)
    if compiled.moore_hodgson(*triage) != kept:
        sys.exit("the compiled Moore–Hodgson does not keep what the interpreted one keeps")
    calls: list[tuple[str, Callable[[], object]]] = [
        ("deadlines: interpreted, over Request", lambda: next_deadlines(requests)),
        ("deadlines: compiled, over Request", lambda: compiled.next_deadlines(requests)),
        ("deadlines: interpreted, over compiled class", lambda: next_deadlines(jobs)),
        ("deadlines: compiled, over compiled class", lambda: compiled.next_deadlines_of_jobs(jobs)),
        ("Moore–Hodgson: interpreted", lambda: moore_hodgson(*triage)),
        ("Moore–Hodgson: compiled", lambda: compiled.moore_hodgson(*triage)),
    ]
    return Passes(calls, sum(kept))


if __name__ == "__main__":
    main()
