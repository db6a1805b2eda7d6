"""The engine core's view of its load, published for the API server's admission check.

The API server answers a hopeless request at once (`overload.py`), but the numbers that
decide it live in the engine core, another process: the prefill rate the policy's admission
control assumes and the prefill queued in the engine. The adapter keeps them in a
`LoadPublisher`, whose thread writes them as a small JSON file (`LoadRecord`) twenty times a
second, one file per engine core (`record_path`: data-parallel engines each write their
own) in a folder that `serve` creates and names to both processes. The API server reads
the folder (`read_records`) on each completion request it checks, with no round trip to
the engine.

**Fail open.** A record is only believed while fresh: older than `MAX_AGE` (the engine core
stopped, hung, or never had admission control), missing, unreadable or malformed, it is as
if there were none, and with none the API server refuses nothing; the engine's own refusal
(`refusals.py`) remains the backstop. The thread writes even while the engine is idle, so
a fresh record means a live engine core, not a busy one.

No vLLM import: tested with plain files and a fake clock.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

logger = logging.getLogger(__name__)

LOAD_DIR_ENV = "SLIDINGSERVE_LOAD_DIR"
"""Environment variable naming the folder of the engine cores' load records, for the API
server (the engine cores get it in the adapter's settings, `AdapterSettings.load_dir`)."""

ADMITTED_MARK = "slidingserve-admitted"
"""In a request id: the API server tested the request against a published queue and let it
through (`overload.Verdict.admitted`); a sole engine does not test it again on arrival."""

PUBLISH_INTERVAL = 0.05  # seconds between two writes of a record
MAX_QUEUE_ENTRIES = 512  # requests of the queue published, the earliest deadlines
MAX_AGE = 2.0  # seconds after its writing that a record is still believed
RECORD_GLOB = "engine-*.json"


@dataclass(frozen=True, slots=True)
class QueueView:
    """The queue a queue-aware admission test saw (`core/queue_fit.py`), on the wall clock."""

    seen: float  # wall-clock time the engine saw it (`time.time()`), seconds
    rate: float  # prefill tokens per second the test assumes, >= 0 (0: nothing fits)
    # (seconds from `seen` to the first token's deadline, prefill tokens left), by deadline;
    # at most `MAX_QUEUE_ENTRIES`, the earliest deadlines
    entries: tuple[tuple[float, int], ...]
    decode_seats: int | None = None  # new requests the decodes can take; None: not tested

    def is_valid(self) -> bool:
        finite = math.isfinite(self.seen) and math.isfinite(self.rate) and self.rate >= 0
        seats = self.decode_seats is None or self.decode_seats >= 0
        return (
            finite
            and seats
            and all(math.isfinite(seconds) and tokens >= 0 for seconds, tokens in self.entries)
        )


@dataclass(frozen=True, slots=True)
class LoadRecord:
    """One engine core's load, as its adapter last saw it."""

    written: float  # wall-clock time of the writing (`time.time()`), seconds
    prefill_rate: float  # prefill tokens per second the admission test assumes, > 0
    queued_prefill_s: float  # seconds to prefill what is waiting, at that rate, >= 0
    queue: QueueView | None = None  # for the queue-aware test; None without it

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> LoadRecord | None:
        """The record `text` holds, or None if it is not a valid one."""
        try:
            values = json.loads(text)
            record = cls(
                float(values["written"]),
                float(values["prefill_rate"]),
                float(values["queued_prefill_s"]),
                _queue_view(values.get("queue")),
            )
        except (ValueError, TypeError, KeyError):
            return None
        return record if record.is_valid() else None

    def is_valid(self) -> bool:
        """Finite numbers, a positive rate and a queue time not below zero; a valid queue."""
        numbers = (self.written, self.prefill_rate, self.queued_prefill_s)
        finite = all(map(math.isfinite, numbers))
        valid_queue = self.queue is None or self.queue.is_valid()
        return finite and self.prefill_rate > 0 and self.queued_prefill_s >= 0 and valid_queue

    def is_fresh(self, now: float, max_age: float = MAX_AGE) -> bool:
        """Whether the record was written within `max_age` seconds before `now` (wall clock;
        a record from up to `max_age` in the future, a clock step, is believed too)."""
        return abs(now - self.written) <= max_age


def _queue_view(values: object) -> QueueView | None:
    """The queue of a record's JSON (None when absent); TypeError or ValueError if malformed."""
    if values is None:
        return None
    if not isinstance(values, dict):
        raise TypeError("queue must be an object")
    entries = tuple((float(seconds), int(tokens)) for seconds, tokens in values["entries"])
    seats = values.get("decode_seats")
    decode_seats = None if seats is None else int(seats)
    return QueueView(float(values["seen"]), float(values["rate"]), entries, decode_seats)


def record_path(folder: str | os.PathLike[str], engine_index: int) -> Path:
    """The record file of the engine core `engine_index` (its data-parallel rank)."""
    return Path(folder) / f"engine-{engine_index}.json"


def write_record(path: Path, record: LoadRecord) -> None:
    """Replace `path` with `record` at once (a temporary file renamed over it: a reader sees
    the old record or the new one, never a part). Not synced to disk: the record is worth
    nothing after a crash, when it goes stale anyway."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temp.write_text(record.to_json(), encoding="utf-8")
    os.replace(temp, path)


def read_record(path: Path, now: float, max_age: float = MAX_AGE) -> LoadRecord | None:
    """The fresh, valid record at `path`, else None (missing, unreadable, malformed, stale)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    record = LoadRecord.from_json(text)
    return record if record is not None and record.is_fresh(now, max_age) else None


def read_records(
    folder: str | os.PathLike[str], now: float, max_age: float = MAX_AGE
) -> list[LoadRecord]:
    """The fresh, valid records of every engine core in `folder` (none if it is missing)."""
    try:
        paths = sorted(Path(folder).glob(RECORD_GLOB))
    except OSError:
        return []
    records = (read_record(path, now, max_age) for path in paths)
    return [record for record in records if record is not None]


class LoadPublisher:
    """The adapter's latest load figures, written to `path` every `interval` seconds by a
    daemon thread (each writing stamped with the time it happens, so an idle engine's
    record stays fresh). `update` is called from the scheduling thread; the thread reads
    the figures as one tuple (one assignment, no lock)."""

    def __init__(
        self,
        path: Path,
        interval: float = PUBLISH_INTERVAL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.interval = interval
        self.clock = clock
        # (prefill_rate, queued_prefill_s, the queue or None)
        self._figures: tuple[float, float, QueueView | None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0  # writings that raised (logged once)

    def update(
        self, prefill_rate: float, queued_prefill_s: float, queue: QueueView | None = None
    ) -> None:
        """The figures to publish from now on (rate in tokens/s, queue in seconds, and the
        queue of a queue-aware admission test)."""
        self._figures = (prefill_rate, queued_prefill_s, queue)

    def publish(self) -> LoadRecord | None:
        """Write the latest figures now, stamped with the clock; the record written, or
        None when there is nothing valid to write or the writing failed."""
        if self._figures is None:
            return None
        record = LoadRecord(self.clock(), *self._figures)
        if not record.is_valid():
            return None
        try:
            write_record(self.path, record)
        except OSError as error:  # a full or removed folder must not stop the engine
            if not self.failures:
                logger.warning("cannot publish the load record %s: %s", self.path, error)
            self.failures += 1
            return None
        return record

    def start(self) -> None:
        """Publish every `interval` seconds in a daemon thread until `stop`."""
        self._thread = threading.Thread(target=self._run, name="load-record", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the thread and remove the record, so that no reader believes it meanwhile."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.path.unlink(missing_ok=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.publish()
            self._stop.wait(self.interval)
