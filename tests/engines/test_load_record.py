"""The engine cores' load records: written whole, read back, believed only while fresh."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from slidingserve.engines.vllm.load_record import (
    MAX_AGE,
    LoadPublisher,
    LoadRecord,
    QueueView,
    read_record,
    read_records,
    record_path,
    write_record,
)

MALFORMED_QUEUES: list[object] = [
    [],
    {"seen": 1e3, "rate": 5e3},
    {"seen": 1e3, "rate": -1, "entries": []},
    {"seen": 1e3, "rate": 5e3, "entries": [[0.5]]},
    {"seen": 1e3, "rate": 5e3, "entries": [[0.5, -3]]},
    {"seen": 1e3, "rate": 5e3, "entries": [], "decode_seats": -1},
]


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_record(written: float = 1000.0, rate: float = 5000.0, queued: float = 0.5) -> LoadRecord:
    return LoadRecord(written=written, prefill_rate=rate, queued_prefill_s=queued)


class TestFile:
    def test_a_written_record_reads_back_while_fresh(self, tmp_path: Path) -> None:
        path = record_path(tmp_path, 0)
        write_record(path, make_record())
        assert read_record(path, now=1000.0 + MAX_AGE) == make_record()
        assert [p.name for p in tmp_path.iterdir()] == ["engine-0.json"]  # no temporary left

    @pytest.mark.parametrize("age", [MAX_AGE + 0.01, -MAX_AGE - 0.01, 3600.0])
    def test_a_stale_record_is_none(self, tmp_path: Path, age: float) -> None:
        path = record_path(tmp_path, 0)
        write_record(path, make_record(written=1000.0))
        assert read_record(path, now=1000.0 + age) is None

    def test_a_missing_record_is_none(self, tmp_path: Path) -> None:
        assert read_record(tmp_path / "engine-0.json", now=1000.0) is None
        assert read_records(tmp_path / "no-such-folder", now=1000.0) == []

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "{not json",
            "[]",
            json.dumps({"written": 1000.0, "prefill_rate": 5000.0}),
            json.dumps({"written": 1000.0, "prefill_rate": 0, "queued_prefill_s": 0}),
            json.dumps({"written": 1000.0, "prefill_rate": -1, "queued_prefill_s": 0}),
            json.dumps({"written": 1000.0, "prefill_rate": 5e3, "queued_prefill_s": -1}),
            json.dumps({"written": "x", "prefill_rate": 5e3, "queued_prefill_s": 0}),
            '{"written": 1000.0, "prefill_rate": NaN, "queued_prefill_s": 0}',
            '{"written": 1000.0, "prefill_rate": Infinity, "queued_prefill_s": 0}',
            *(
                json.dumps({"written": 1e3, "prefill_rate": 5e3, "queued_prefill_s": 0, "queue": q})
                for q in MALFORMED_QUEUES
            ),
        ],
    )
    def test_a_malformed_record_is_none(self, tmp_path: Path, text: str) -> None:
        path = tmp_path / "engine-0.json"
        path.write_text(text)
        assert read_record(path, now=1000.0) is None

    def test_a_record_with_its_queue_reads_back(self, tmp_path: Path) -> None:
        path = record_path(tmp_path, 0)
        queue = QueueView(999.5, 4000.0, ((0.25, 300), (1.5, 1200)), decode_seats=3)
        record = LoadRecord(1000.0, 5000.0, 0.4, queue)
        write_record(path, record)
        assert read_record(path, now=1000.0) == record

    def test_a_queue_at_a_rate_of_zero_reads_back(self, tmp_path: Path) -> None:
        # The decodes alone fill the TBT: nothing fits, which the API server must hear.
        path = record_path(tmp_path, 0)
        record = LoadRecord(1000.0, 5000.0, 0.4, QueueView(999.5, 0.0, ((0.25, 300),), 0))
        write_record(path, record)
        assert read_record(path, now=1000.0) == record

    def test_bytes_that_are_not_text_are_none(self, tmp_path: Path) -> None:
        path = tmp_path / "engine-0.json"
        path.write_bytes(b"\xff\xfe\x00")
        assert read_record(path, now=1000.0) is None

    def test_every_fresh_engine_is_read_and_the_stale_one_left_out(self, tmp_path: Path) -> None:
        write_record(record_path(tmp_path, 0), make_record(rate=1000.0))
        write_record(record_path(tmp_path, 1), make_record(rate=2000.0))
        write_record(record_path(tmp_path, 2), make_record(written=900.0))
        (tmp_path / "notes.txt").write_text("not a record")
        rates = [r.prefill_rate for r in read_records(tmp_path, now=1000.5)]
        assert rates == [1000.0, 2000.0]


class TestPublisher:
    def test_nothing_is_written_before_the_first_figures(self, tmp_path: Path) -> None:
        publisher = LoadPublisher(record_path(tmp_path, 0), clock=FakeClock())
        assert publisher.publish() is None
        assert not record_path(tmp_path, 0).exists()

    def test_each_writing_is_stamped_with_its_own_time(self, tmp_path: Path) -> None:
        clock = FakeClock(1000.0)
        path = record_path(tmp_path, 3)
        publisher = LoadPublisher(path, clock=clock)
        publisher.update(4000.0, 1.5)
        publisher.publish()
        clock.now = 1010.0  # an idle engine: the same figures, a fresh record
        publisher.publish()
        assert read_record(path, now=1010.0) == make_record(1010.0, 4000.0, 1.5)

    @pytest.mark.parametrize(("rate", "queued"), [(0.0, 0.0), (float("nan"), 0.0), (1.0, -1.0)])
    def test_invalid_figures_are_not_written(
        self, tmp_path: Path, rate: float, queued: float
    ) -> None:
        publisher = LoadPublisher(record_path(tmp_path, 0), clock=FakeClock())
        publisher.update(rate, queued)
        assert publisher.publish() is None
        assert not record_path(tmp_path, 0).exists()

    def test_a_failed_writing_is_counted_not_raised(self, tmp_path: Path) -> None:
        publisher = LoadPublisher(tmp_path / "gone" / "engine-0.json", clock=FakeClock())
        publisher.update(4000.0, 0.0)
        assert publisher.publish() is None
        assert publisher.failures == 1

    def test_the_thread_keeps_the_record_fresh_and_stop_removes_it(self, tmp_path: Path) -> None:
        path = record_path(tmp_path, 0)
        publisher = LoadPublisher(path, interval=0.01)
        publisher.update(4000.0, 0.25)
        publisher.start()
        try:
            deadline = time.monotonic() + 5.0
            while read_record(path, time.time()) is None and time.monotonic() < deadline:
                time.sleep(0.01)
            first = read_record(path, time.time())
            later = first
            while later == first and time.monotonic() < deadline:
                time.sleep(0.01)
                later = read_record(path, time.time())
        finally:
            publisher.stop()
        assert first is not None and later is not None
        assert later.written > first.written
        assert not path.exists()
        assert not any(t.name == "load-record" for t in threading.enumerate())
