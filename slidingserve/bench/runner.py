"""Replay a workload against an OpenAI-compatible server and measure it.

`run_bench(config)` runs `bench(config)` in a fresh event loop. A run finds the model and its
context on `/v1/models` (unless the config gives both), plans the requests, sends each at its
scheduled time (seconds after the run start, on the monotonic clock) and waits for them all.
It stops sending after `max_duration` seconds; each request has `request_timeout` seconds.
Ctrl-C (SIGINT, when run in the main thread) or setting `stop` ends the run early: requests
in flight are cancelled and reported as such with what they had received; a second Ctrl-C
quits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import aiohttp
from tqdm import tqdm

from slidingserve.bench.client import (
    REFUSED,
    StreamError,
    StreamProgress,
    list_models,
    stream_completion,
)
from slidingserve.bench.records import RequestRecord
from slidingserve.bench.requests import (
    PlannedRequest,
    plan_requests,
    request_body,
    workload_with,
)
from slidingserve.bench.summary import BenchSummary, summarize
from slidingserve.metrics import Outcome, Percentiles, Timeline
from slidingserve.workloads import WorkloadConfig

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

DISCOVERY_TIMEOUT = 30.0  # seconds for GET /v1/models
CANCEL_GRACE = 5.0  # seconds for cancelled requests to unwind
DRAIN_MARGIN = 5.0  # seconds past the request timeout before stragglers are cancelled


class BenchSetupError(ValueError):
    """The run cannot start: the server does not answer, or the model or its context is
    unknown. The message says what to pass instead."""


def _default_workload() -> WorkloadConfig:
    return WorkloadConfig("sharegpt", 200)


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark run."""

    url: str  # the server's base URL, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine)
    workload: WorkloadConfig = field(default_factory=_default_workload)
    rate: float = 1.0  # base arrival rate, requests/s
    model: str | None = None  # served model name; None: the first of /v1/models
    seed: int = 0  # fixes lengths, arrivals, tiers and prompt ids
    vocab_size: int = 1000  # prompt ids are drawn from [10, vocab_size)
    max_model_len: int | None = None  # tokens of context; None: /v1/models's max_model_len
    max_requests: int | None = None  # requests to plan; None: workload.num_requests
    max_duration: float = 600.0  # seconds: no request is sent after this
    request_timeout: float = 300.0  # seconds one request may take, from sending to its end
    xargs: bool = True  # send vLLM's fields: the SLO in `vllm_xargs`, `return_token_ids`
    priority_from_slo: bool = False  # send vLLM's `priority` = TTFT deadline in ms
    cache_salt: str | None = None  # vLLM's: this run's prefix-cache blocks apart from others'
    progress: bool = True  # a progress bar on stderr

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        for name in ("rate", "max_duration", "request_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"max_requests must be at least 1, got {self.max_requests}")

    @property
    def base_url(self) -> str:
        """The URL without a trailing slash or /v1."""
        base = self.url.rstrip("/")
        return base.removesuffix("/v1")

    @property
    def planned_workload(self) -> WorkloadConfig:
        return workload_with(self.workload, self.max_requests)

    def to_dict(self) -> dict[str, Any]:
        """The settings, JSON-ready (the workload as its dataclass fields)."""
        return {
            "url": self.url,
            "model": self.model,
            "workload": self.planned_workload,
            "rate": self.rate,
            "seed": self.seed,
            "vocab_size": self.vocab_size,
            "max_model_len": self.max_model_len,
            "max_duration_s": self.max_duration,
            "request_timeout_s": self.request_timeout,
            "xargs": self.xargs,
            "priority_from_slo": self.priority_from_slo,
            "cache_salt": self.cache_salt,
        }


@dataclass(frozen=True, slots=True)
class Refusals:
    """Requests the server refused by its admission control, and how fast it said so."""

    count: int
    latency: Percentiles  # seconds from sending to the refusal

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "latency_ms": self.latency.in_ms()}


@dataclass(frozen=True)
class BenchResult:
    """What a run measured."""

    config: BenchConfig
    model: str  # the model name the requests were sent to
    max_model_len: int  # tokens of context the lengths were scaled to
    started: str  # wall-clock start of the run, ISO 8601 (UTC)
    summary: BenchSummary
    records: tuple[RequestRecord, ...]  # every sent request, in order of sending

    @property
    def errors(self) -> dict[str, int]:
        """Failed requests by error kind (see `client.ERROR_KINDS`), most frequent first;
        refusals are not errors (`refusals`)."""
        kinds = Counter(str(r.error_kind) for r in self.records if _is_error(r))
        return dict(kinds.most_common())

    @property
    def error_messages(self) -> dict[str, str]:
        """The first message of each error kind."""
        messages: dict[str, str] = {}
        for record in filter(_is_error, self.records):
            messages.setdefault(str(record.error_kind), record.error_message or "")
        return messages

    @property
    def refusals(self) -> Refusals:
        """The requests the server refused (admission control), failed requests all the
        same for the metrics (their first token's deadline is missed)."""
        refused = [r for r in self.records if r.error_kind == REFUSED]
        return Refusals(
            len(refused), Percentiles.of([r.finished - r.timeline.start for r in refused])
        )


def _is_error(record: RequestRecord) -> bool:
    return record.error_kind is not None and record.error_kind != REFUSED


def run_bench(config: BenchConfig) -> BenchResult:
    """Run the benchmark `config` describes (blocking; see the module docstring)."""
    return asyncio.run(bench(config))


async def bench(config: BenchConfig, stop: asyncio.Event | None = None) -> BenchResult:
    """Run the benchmark in the running event loop; setting `stop` ends it early."""
    stop = stop if stop is not None else asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=None)
    connector = aiohttp.TCPConnector(limit=0)  # no client-side queue: it would delay sends
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        model, max_model_len = await discover(session, config)
        plan = plan_requests(
            config.planned_workload, config.rate, config.seed, max_model_len, config.vocab_size
        )
        started = datetime.now(UTC).isoformat(timespec="seconds")
        with _stop_on_sigint(stop):
            replay = _Replay(session, config, model, stop)
            records, duration = await replay.run(plan)
    summary = summarize(records, planned=len(plan), duration=duration, interrupted=stop.is_set())
    return BenchResult(config, model, max_model_len, started, summary, tuple(records))


async def discover(session: aiohttp.ClientSession, config: BenchConfig) -> tuple[str, int]:
    """The model name and its context in tokens: from the config, else from `/v1/models`."""
    if config.model is not None and config.max_model_len is not None:
        return config.model, config.max_model_len
    url = config.base_url + "/v1/models"
    try:
        models = await list_models(session, url, DISCOVERY_TIMEOUT)
    except StreamError as error:
        raise BenchSetupError(f"cannot list the models: {error.message}") from None
    entry = _pick_model(models, config.model)
    max_model_len = config.max_model_len or entry.get("max_model_len")
    if not isinstance(max_model_len, int) or isinstance(max_model_len, bool):
        raise BenchSetupError(
            f"{url} gives no max_model_len for {entry.get('id')!r}: pass --max-model-len"
        )
    return str(entry["id"]), max_model_len


def _pick_model(models: list[Any], name: str | None) -> dict[str, Any]:
    entries = [m for m in models if isinstance(m, dict) and "id" in m]
    if not entries:
        raise BenchSetupError("the server lists no model: pass --model and --max-model-len")
    if name is None:
        return entries[0]
    for entry in entries:
        if entry["id"] == name:
            return entry
    known = ", ".join(str(m["id"]) for m in entries)
    raise BenchSetupError(f"the server has no model {name!r}; it serves {known}")


class _Flight(NamedTuple):
    """A request in flight: what was planned and what has come back so far."""

    planned: PlannedRequest
    progress: StreamProgress


class _Replay:
    """One pass over a plan: send on schedule, wait, cancel what is left at a stop."""

    def __init__(
        self, session: aiohttp.ClientSession, config: BenchConfig, model: str, stop: asyncio.Event
    ) -> None:
        self.session = session
        self.config = config
        self.model = model
        self.stop = stop
        self.url = config.base_url + "/v1/completions"
        self.flights: dict[asyncio.Task[RequestRecord], _Flight] = {}
        self.start = time.monotonic()

    def clock(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.start

    async def run(self, plan: list[PlannedRequest]) -> tuple[list[RequestRecord], float]:
        """Every sent request's record, and the run's duration in seconds."""
        to_send = [p for p in plan if p.send_at <= self.config.max_duration]
        bar = tqdm(total=len(to_send), unit="req", desc="bench", disable=not self.config.progress)
        with bar:
            self.start = time.monotonic()
            await self._send_all(to_send, bar)
            await self._drain()
            duration = self.clock()
            records = [self._record(task, flight) for task, flight in self.flights.items()]
        return records, duration

    async def _send_all(self, plan: list[PlannedRequest], bar: tqdm[Any]) -> None:
        """Start each request at its send time, unless the run is stopped first."""
        for planned in plan:
            delay = planned.send_at - self.clock()
            if self.stop.is_set() or (delay > 0 and await _stopped_within(self.stop, delay)):
                return
            progress = StreamProgress()
            task = asyncio.create_task(self._one(planned, progress))
            task.add_done_callback(lambda _: bar.update(1))
            self.flights[task] = _Flight(planned, progress)

    async def _one(self, planned: PlannedRequest, progress: StreamProgress) -> RequestRecord:
        body = request_body(
            planned,
            self.model,
            xargs=self.config.xargs,
            priority=self.config.priority_from_slo,
            cache_salt=self.config.cache_salt,
        )
        try:
            await stream_completion(
                self.session, self.url, body, progress, self.clock, self.config.request_timeout
            )
        except StreamError as error:
            return _make_record(planned, progress, self.clock(), error.kind, error.message)
        except Exception as error:  # a client bug must still show up in the report
            message = f"{type(error).__name__}: {error}"
            return _make_record(planned, progress, self.clock(), "client_error", message)
        return _make_record(planned, progress, self.clock())

    async def _drain(self) -> None:
        """Wait for every request (bounded by the request timeout) or a stop, then cancel
        what is still running."""
        tasks = set(self.flights)
        if tasks:
            everything = asyncio.ensure_future(asyncio.wait(tasks))
            stopped = asyncio.ensure_future(self.stop.wait())
            limit = self.config.request_timeout + DRAIN_MARGIN
            await asyncio.wait({everything, stopped}, timeout=limit, return_when="FIRST_COMPLETED")
            everything.cancel()
            stopped.cancel()
        running = [task for task in tasks if not task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=CANCEL_GRACE)

    def _record(self, task: asyncio.Task[RequestRecord], flight: _Flight) -> RequestRecord:
        if task.done() and not task.cancelled():
            return task.result()
        return _make_record(flight.planned, flight.progress, self.clock(), cancelled=True)


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds`; True if `stop` was set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True


def _make_record(
    planned: PlannedRequest,
    progress: StreamProgress,
    now: float,
    error_kind: str | None = None,
    error_message: str | None = None,
    *,
    cancelled: bool = False,
) -> RequestRecord:
    if cancelled:
        outcome = Outcome.CANCELLED
    else:
        outcome = Outcome.FAILED if error_kind is not None else Outcome.COMPLETED
    timeline = Timeline(
        arrival=planned.send_at,
        slo=planned.slo,
        chunk_times=tuple(progress.chunk_times),
        chunk_tokens=tuple(progress.chunk_tokens),
        outcome=outcome,
        output_tokens=progress.usage_tokens,
        sent=progress.sent if progress.sent is not None else now,
    )
    return RequestRecord(
        request_id=planned.request_id,
        timeline=timeline,
        finished=now,
        prompt_tokens=planned.prompt_tokens,
        max_tokens=planned.max_tokens,
        error_kind=error_kind,
        error_message=error_message,
    )


@contextlib.contextmanager
def _stop_on_sigint(stop: asyncio.Event) -> Iterator[None]:
    """While inside, the first SIGINT sets `stop` and puts the previous handler back (so a
    second one acts as usual); only in the main thread, where signals can be caught."""
    loop = asyncio.get_running_loop()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    restore = _restorer(loop, previous)

    def on_sigint() -> None:
        stop.set()
        restore()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        restore()


def _restorer(loop: asyncio.AbstractEventLoop, previous: Any) -> Callable[[], None]:
    """A function that takes the loop's SIGINT handler away and puts `previous` back, once."""
    done = False

    def restore() -> None:
        nonlocal done
        if done:
            return
        done = True
        loop.remove_signal_handler(signal.SIGINT)
        if previous is not None:
            signal.signal(signal.SIGINT, previous)

    return restore
