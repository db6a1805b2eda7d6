"""Does a served engine keep its memory and the adapter's state flat over thousands of
requests, a share of them cut by their clients?

    python benchmarks/soak.py [--requests 3000] [--abort-share 0.3] [--concurrency 16]
        [--model DIR | --port PORT] [--policy slidingserve] [--report-every 1000]
        [--warmup 1000] [--kv-blocks N] [--seed 0]

Needs the `vllm` extra. Serves `--model` (default: the tiny random Llama, built in a
temporary folder) with the SlidingServe scheduler on a free local port, its KV cache cut to
what `--concurrency` whole-context requests need (pages of a cache count in RSS from their
first write, so a large one would look like growth); or, with `--port`, soaks the server
already listening there (`slidingserve serve` exports the adapter's gauges). It sends
`--requests` streamed completions in waves of `--concurrency` at once: prompts of 8 to 200
tokens, 4 to 64 output tokens, a share `--abort-share` of them cut by their client 0 to
0.5 s after it opened them (all seeded). After every `--report-every` requests, once the
engine is idle, it prints a row: requests done, how they ended, the resident memory (RSS,
MiB) of the API server, of vLLM's engine core (the process that runs the scheduler) and of
its model worker, and each `slidingserve:*` gauge on `/metrics` (the adapter's state sizes;
`tracked_requests` must be 0 at every row). It ends with each column's growth per thousand
requests from `--warmup` on (least-squares slope) beside its noise (the slope's standard
error) and a verdict: a column grows when its slope is over three times its noise and over
1 (MiB or item) per thousand. The adapter's buffers are bounded, not constant: they fill
during the first 10,000 steps or so (about 2,500 requests of this mix), and the engine
core's RSS with them, so judge a leak over a longer run than that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp

from slidingserve.bench.client import StreamError, StreamProgress, stream_completion
from slidingserve.engines.vllm.runtime import CPU_ENGINE_LIMITS, require_vllm
from slidingserve.engines.vllm.server import (
    API_SERVER_MODULE,
    server_command,
    server_environment,
)
from slidingserve.engines.vllm.tiny_model import make_tiny_llama
from slidingserve.live.servers import scrape_metrics, serving
from slidingserve.policies import POLICIES

MODEL_NAME = "soak"  # the served model's name when this script starts the server
MAX_MODEL_LEN = 512  # tokens of context of the server started here
BLOCK_SIZE = CPU_ENGINE_LIMITS.block_size  # tokens per KV block
REQUEST_TIMEOUT = 120.0  # seconds one request may take
IDLE_TIMEOUT = 30.0  # seconds for the engine to be idle before a row
MAX_CUT_DELAY = 0.5  # seconds after which a cut request is cut, at most
GROWTH_FLOOR = 1.0  # MiB or items per thousand requests under which nothing "grows"
NOISE_FACTOR = 3.0  # growth over this many standard errors is not noise
BUSY = ("vllm:num_requests_running", "vllm:num_requests_waiting", "slidingserve:tracked_requests")
ROLES = {  # each process of the server's tree by a mark its command line holds
    "api": API_SERVER_MODULE,
    "core": "VLLM::EngineCore",
    "worker": "VLLM::Worker",
}


class Row(NamedTuple):
    """One report: after `done` requests, the engine idle."""

    done: int  # requests sent and ended so far
    outcomes: Counter[str]  # "ok", "cut" or an error kind, over all requests so far
    values: dict[str, float]  # MiB by process role (`ROLES`), then gauge sizes by name
    idle: bool  # whether the engine was idle within IDLE_TIMEOUT


class Growth(NamedTuple):
    """A column's least-squares slope over the rows after the warm-up."""

    per_thousand: float  # MiB or items per 1000 requests
    noise: float  # the slope's standard error, same unit

    @property
    def grows(self) -> bool:
        return self.per_thousand > max(NOISE_FACTOR * self.noise, GROWTH_FLOOR)


# -- the server's processes -------------------------------------------------------------------


def _psutil() -> Any:
    """psutil when installed (it has no type stubs: used as Any), else None."""
    try:
        return importlib.import_module("psutil")
    except ImportError:
        return None


class Proc(NamedTuple):
    pid: int
    ppid: int
    command: str  # the command line, arguments joined by spaces


def all_processes() -> list[Proc]:
    """Every process of this machine (psutil, else /proc)."""
    psutil = _psutil()
    if psutil is not None:
        found = []
        for p in psutil.process_iter(["pid", "ppid", "cmdline"]):
            found.append(Proc(p.info["pid"], p.info["ppid"], " ".join(p.info["cmdline"] or ())))
        return found
    return [proc for entry in Path("/proc").iterdir() if (proc := _proc(entry)) is not None]


def _proc(entry: Path) -> Proc | None:
    if not entry.name.isdigit():
        return None
    try:
        stat = (entry / "stat").read_text()
        command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # the process ended while we looked
        return None
    ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state
    return Proc(int(entry.name), ppid, command.strip())


def rss_mib(pid: int) -> float | None:
    """The resident memory of `pid` in MiB (psutil, else /proc), None if it is gone."""
    psutil = _psutil()
    if psutil is not None:
        try:
            return float(psutil.Process(pid).memory_info().rss) / 2**20
        except psutil.Error:  # it ended
            return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # it ended
        return None
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return None if found is None else int(found.group(1)) / 1024


def server_processes(port: int | None) -> dict[str, int]:
    """The pid of each role of `ROLES` in the server's tree: the server this process started
    (`port` None), or the API server whose command line has `--port <port>`."""
    processes = all_processes()
    if port is None:
        roots = [os.getpid()]
    else:
        pattern = re.compile(rf"{re.escape(API_SERVER_MODULE)}\b.*--port[ =]{port}\b")
        roots = [p.pid for p in processes if pattern.search(p.command)]
    children: dict[int, list[Proc]] = {}
    for proc in processes:
        children.setdefault(proc.ppid, []).append(proc)
    found: dict[str, int] = {}
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), []):
            stack.append(child.pid)
            for role, mark in ROLES.items():
                if mark in child.command and role not in found:
                    found[role] = child.pid
    if port is not None and roots:
        found["api"] = roots[0]
    return found


# -- the server's metrics ---------------------------------------------------------------------


def adapter_gauges(metrics: dict[str, float]) -> dict[str, float]:
    """The `slidingserve:*` gauges (the counters end in _total or _created), by short name."""
    return {
        name.removeprefix("slidingserve:"): value
        for name, value in metrics.items()
        if name.startswith("slidingserve:") and not name.endswith(("_total", "_created"))
    }


def idle_metrics(base: str) -> tuple[dict[str, float], bool]:
    """`/metrics` once nothing runs, waits or is tracked (at most IDLE_TIMEOUT seconds), and
    whether that happened."""
    deadline = time.monotonic() + IDLE_TIMEOUT
    while True:
        metrics = scrape_metrics(base)
        if not any(metrics.get(name) for name in BUSY):
            return metrics, True
        if time.monotonic() > deadline:
            return metrics, False
        time.sleep(0.25)


# -- the load ---------------------------------------------------------------------------------


class Soak(NamedTuple):
    """What to send."""

    requests: int
    abort_share: float  # of requests cut by their client
    concurrency: int  # requests per wave
    report_every: int  # requests between two rows
    seed: int


def served_model(base: str) -> str:
    """The first model the server lists on /v1/models."""
    with urllib.request.urlopen(base + "/v1/models", timeout=10) as response:
        name: str = json.loads(response.read())["data"][0]["id"]
        return name


def request_body(rng: random.Random, model: str) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": [rng.randrange(10, 1000) for _ in range(rng.randint(8, 200))],
        "max_tokens": rng.randint(4, 64),
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }


async def one_request(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], cut_after: float | None
) -> str:
    """Send `body`; "ok", the error's kind, or "cut" if it was cut after `cut_after` s."""

    async def whole() -> str:
        progress = StreamProgress()
        try:
            await stream_completion(http, url, body, progress, time.monotonic, REQUEST_TIMEOUT)
        except StreamError as error:
            # 200 and [DONE] without a token or a finish reason: how a refusal reaches a
            # streaming client through vLLM 0.32.
            silent = error.kind == "truncated" and not progress.tokens
            return "silent end" if silent else error.kind
        return "ok"

    task = asyncio.create_task(whole())
    await asyncio.wait([task], timeout=cut_after)
    if task.done():
        return task.result()
    task.cancel()  # closes the connection: the server sees its client go
    await asyncio.gather(task, return_exceptions=True)
    return "cut"


async def soak(base: str, plan: Soak, port: int | None) -> list[Row]:
    """Send the waves, print a row after every `report_every` requests; the rows."""
    rng = random.Random(plan.seed)
    url = base + "/v1/completions"
    model = served_model(base)
    outcomes: Counter[str] = Counter()
    rows = [measure(base, 0, outcomes, port)]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None)  # each request has its own limit
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        done = 0
        while done < plan.requests:
            next_row = (done // plan.report_every + 1) * plan.report_every
            size = min(plan.concurrency, min(plan.requests, next_row) - done)
            wave = [
                one_request(http, url, request_body(rng, model), cut_delay(rng, plan.abort_share))
                for _ in range(size)
            ]
            outcomes.update(await asyncio.gather(*wave))
            done += size
            if done % plan.report_every == 0 or done == plan.requests:
                rows.append(await asyncio.to_thread(measure, base, done, outcomes, port))
    return rows


def cut_delay(rng: random.Random, share: float) -> float | None:
    return rng.uniform(0.0, MAX_CUT_DELAY) if rng.random() < share else None


def measure(base: str, done: int, outcomes: Counter[str], port: int | None) -> Row:
    """A row once the engine is idle; printed."""
    metrics, idle = idle_metrics(base)
    values: dict[str, float] = {}
    for role, pid in server_processes(port).items():
        if (mib := rss_mib(pid)) is not None:
            values[role] = mib
    values.update(adapter_gauges(metrics))
    row = Row(done, Counter(outcomes), values, idle)
    print_row(row, header=done == 0)
    return row


def columns(row: Row) -> list[str]:
    """The processes' RSS, then the gauges by name."""
    return [*ROLES, *sorted(set(row.values) - set(ROLES))]


def label(column: str) -> str:
    return f"{column} MiB" if column in ROLES else column


def print_row(row: Row, header: bool) -> None:
    widths = {c: max(9, len(label(c))) for c in columns(row)}
    if header:
        names = " ".join(f"{label(c):>{w}}" for c, w in widths.items())
        print(f"{'done':>6} {'ok':>6} {'cut':>5} {'errors':>6} {names}")
    errors = row.outcomes.total() - row.outcomes["ok"] - row.outcomes["cut"]
    cells = " ".join(
        f"{row.values.get(c, math.nan):>{w}.{1 if c in ROLES else 0}f}" for c, w in widths.items()
    )
    busy = "" if row.idle else f"  (not idle after {IDLE_TIMEOUT:g} s)"
    print(
        f"{row.done:>6} {row.outcomes['ok']:>6} {row.outcomes['cut']:>5} {errors:>6} {cells}{busy}",
        flush=True,
    )


# -- the verdict ------------------------------------------------------------------------------


def growth(rows: list[Row], column: str) -> Growth | None:
    """The slope of `column` over `rows` per thousand requests, None under three points."""
    points = [(r.done / 1000, r.values[column]) for r in rows if column in r.values]
    if len(points) < 3:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    residuals = [y - mean_y - slope * (x - mean_x) for x, y in points]
    noise = math.sqrt(sum(r * r for r in residuals) / (n - 2) / sxx)
    return Growth(slope, noise)


def report(rows: list[Row], warmup: int) -> None:
    """Print each column's growth after the warm-up and the verdict."""
    steady = [r for r in rows if r.done >= warmup]
    errors = {kind: n for kind, n in rows[-1].outcomes.items() if kind not in ("ok", "cut")}
    print(f"\nerrors by kind: {errors or 'none'}")
    if not all(r.idle for r in rows):
        print("NOT IDLE at some rows: requests left running, waiting or tracked")
    print(f"growth per 1000 requests over the {len(steady)} rows from {warmup} requests on:")
    grown = []
    for column in columns(rows[-1]):
        found = growth(steady, column)
        if found is None:
            continue
        unit = "MiB" if column in ROLES else "items"
        mark = "  GROWS" if found.grows else ""
        print(f"  {label(column):<20} {found.per_thousand:+9.2f} ± {found.noise:.2f} {unit}{mark}")
        if found.grows:
            grown.append(column)
    core = growth(steady, "core")
    if core is None:
        print("verdict: too few rows after the warm-up (three needed): more --requests")
    elif grown:
        print(f"verdict: GROWS beyond its noise: {', '.join(grown)}")
    else:
        print(
            f"verdict: flat: engine core {core.per_thousand:+.2f} ± {core.noise:.2f} MiB per "
            f"1000 requests, nothing over {NOISE_FACTOR:g}× its noise and {GROWTH_FLOOR:g} per 1000"
        )


# -- the command ------------------------------------------------------------------------------


@contextlib.contextmanager
def served(args: argparse.Namespace, folder: Path) -> Iterator[str]:
    """The base URL of the server to soak: the one on `--port`, or one started here."""
    if args.port is not None:
        yield f"http://127.0.0.1:{args.port}"
        return
    model = args.model or str(make_tiny_llama(folder / "model", seed=args.seed))
    limits = ["--served-model-name", MODEL_NAME, "--max-model-len", str(MAX_MODEL_LEN)]
    limits += ["--max-num-batched-tokens", "256", "--max-num-seqs", str(args.concurrency)]
    # A cache just big enough that the warm-up writes all of it: its pages count in the
    # worker's RSS from their first write on, which would look like growth.
    blocks = args.kv_blocks or args.concurrency * -(-MAX_MODEL_LEN // BLOCK_SIZE)
    limits += ["--num-gpu-blocks-override", str(blocks)]

    def command(port: int) -> list[str]:
        return server_command(model, args.policy, port=port, extra_vllm_args=limits)

    (folder / "metrics").mkdir()
    env = server_environment(metrics_dir=folder / "metrics")
    log = folder / "server.log"
    print(f"serving {model} with {args.policy}; log: {log}", file=sys.stderr)
    with serving(command, env, log) as base:
        yield base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--abort-share", type=float, default=0.3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--model", help="model folder (default: a tiny random Llama)")
    parser.add_argument("--port", type=int, help="soak the server on this local port")
    parser.add_argument("--policy", default="slidingserve", choices=sorted(POLICIES))
    parser.add_argument(
        "--kv-blocks", type=int, help="KV blocks of the server started here (default: enough "
        "for --concurrency requests of the whole context)",
    )  # fmt: skip
    parser.add_argument("--report-every", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=1000, help="requests left out of growth")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    if not 0 <= args.abort_share <= 1:
        parser.error("--abort-share must be in [0, 1]")
    if min(args.requests, args.concurrency, args.report_every) < 1:
        parser.error("--requests, --concurrency and --report-every must be positive")
    require_vllm()
    plan = Soak(args.requests, args.abort_share, args.concurrency, args.report_every, args.seed)
    folder = Path(tempfile.mkdtemp(prefix="slidingserve-soak-"))
    start = time.perf_counter()
    with served(args, folder) as base:
        rows = asyncio.run(soak(base, plan, args.port))
    print(f"{args.requests} requests in {time.perf_counter() - start:.0f} s")
    report(rows, args.warmup)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
