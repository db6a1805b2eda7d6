"""Saved files are written whole or not at all: a crash mid-write leaves the old file and no
temporary one; a truncated or corrupt file is refused with one line naming it."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from factories import linear_engine_steps

from slidingserve.engines.vllm.context import STARTING_GUESS
from slidingserve.engines.vllm.engine_timing import save_profile
from slidingserve.predictor import (
    BatchLatencyPredictor,
    PredictorMetadata,
    load_predictor,
    save_predictor,
)
from slidingserve.predictor.steps import load_engine_steps, save_engine_steps
from slidingserve.reporting import write_csv, write_json

OLD = "the old contents\n"


class CrashError(Exception):
    """The stand-in of a crash in the middle of a write."""


def old_file(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text(OLD)
    return path


def save_a_predictor(path: Path) -> None:
    metadata = PredictorMetadata("tiny", "vllm-cpu", 300, "2026-11-01T00:00:00+00:00")
    predictor = BatchLatencyPredictor.single(STARTING_GUESS)
    save_predictor(path, predictor, metadata, linear_engine_steps().batches)


def save_a_profile(path: Path) -> None:
    save_profile(path, linear_engine_steps(), "/models/tiny", "vllm-cpu")


SAVES: dict[str, Callable[[Path], None]] = {
    "predictor": save_a_predictor,
    "profile": save_a_profile,
    "engine steps": lambda path: save_engine_steps(path, linear_engine_steps()),
    "json results": lambda path: write_json(path, {"rows": [{"p99": float("nan")}] * 50}),
    "csv results": lambda path: write_csv(path, [{"policy": "sarathi", "rate": 1.5}] * 50),
}


def crash_after_writing(monkeypatch: pytest.MonkeyPatch, written: list[int]) -> None:
    """Every write reaches the disk (`fsync` is where the writer crashes): the temporary file
    holds all the new contents, `written` their size."""

    def fsync(fd: int) -> None:
        written.append(os.fstat(fd).st_size)
        raise CrashError

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("save", SAVES.values(), ids=SAVES.keys())
class TestCrashMidWrite:
    def test_the_old_file_stays_and_no_temporary_is_left(
        self, save: Callable[[Path], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = old_file(tmp_path, "out.json")
        written: list[int] = []
        crash_after_writing(monkeypatch, written)
        with pytest.raises(CrashError):
            save(path)
        assert written[0] > 500  # the new contents were all written, then the crash
        assert path.read_text() == OLD
        assert os.listdir(tmp_path) == ["out.json"]

    def test_an_interrupt_too(
        self, save: Callable[[Path], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = old_file(tmp_path, "out.json")

        def interrupted(fd: int) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(os, "fsync", interrupted)
        with pytest.raises(KeyboardInterrupt):
            save(path)
        assert path.read_text() == OLD
        assert os.listdir(tmp_path) == ["out.json"]

    def test_a_write_without_crash_replaces_the_file(
        self, save: Callable[[Path], None], tmp_path: Path
    ) -> None:
        path = old_file(tmp_path, "out.json")
        (tmp_path / "plain").write_text("")
        save(path)
        assert path.read_text() != OLD
        assert sorted(os.listdir(tmp_path)) == ["out.json", "plain"]
        # The mode of a file made by `open` (the umask's), not the 0600 of a temporary file.
        assert path.stat().st_mode == (tmp_path / "plain").stat().st_mode


def test_json_crashing_halfway_through_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = old_file(tmp_path, "results.json")
    real_dump = json.dump

    def dump(value: Any, stream: Any, **kwargs: Any) -> None:
        text = json.dumps(value, **kwargs)
        stream.write(text[: len(text) // 2])
        raise CrashError

    monkeypatch.setattr(json, "dump", dump)
    with pytest.raises(CrashError):
        write_json(path, {"rows": list(range(1000))})
    assert path.read_text() == OLD
    assert os.listdir(tmp_path) == ["results.json"]
    monkeypatch.setattr(json, "dump", real_dump)
    write_json(path, {"rows": [1, 2]})
    assert json.loads(path.read_text()) == {"rows": [1, 2]}


def test_csv_crashing_after_some_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = old_file(tmp_path, "results.csv")

    def writerows(self: csv.DictWriter[str], rows: list[dict[str, Any]]) -> None:
        self.writerow(rows[0])
        raise CrashError

    monkeypatch.setattr(csv.DictWriter, "writerows", writerows)
    with pytest.raises(CrashError):
        write_csv(path, [{"a": 1}, {"a": 2}])
    assert path.read_text() == OLD
    assert os.listdir(tmp_path) == ["results.csv"]


def test_a_missing_folder_is_named_as_the_file_asked_for(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as error:
        save_a_predictor(tmp_path / "absent" / "predictor.json")
    assert error.value.filename == str(tmp_path / "absent" / "predictor.json")


LOADS: dict[str, tuple[Callable[[Path], None], Callable[[Path], object]]] = {
    "predictor": (save_a_predictor, load_predictor),
    "engine steps": (
        lambda path: save_engine_steps(path, linear_engine_steps()),
        load_engine_steps,
    ),
}


@pytest.mark.parametrize(("save", "load"), LOADS.values(), ids=LOADS.keys())
class TestDamagedFiles:
    @pytest.mark.parametrize("keep", [0.0, 0.5, 0.99])
    def test_a_truncated_file(
        self,
        save: Callable[[Path], None],
        load: Callable[[Path], object],
        keep: float,
        tmp_path: Path,
    ) -> None:
        path = tmp_path / "saved.json"
        save(path)
        text = path.read_text()
        path.write_text(text[: int(len(text) * keep)])
        with pytest.raises(ValueError, match="not valid JSON, truncated or corrupt") as error:
            load(path)
        assert str(error.value).startswith(f"{path}: ")
        assert "\n" not in str(error.value)

    def test_a_binary_file(
        self, save: Callable[[Path], None], load: Callable[[Path], object], tmp_path: Path
    ) -> None:
        path = tmp_path / "saved.json"
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
        with pytest.raises(ValueError, match=r"saved\.json: not a JSON text file"):
            load(path)

    def test_a_whole_file_loads(
        self, save: Callable[[Path], None], load: Callable[[Path], object], tmp_path: Path
    ) -> None:
        save(tmp_path / "saved.json")
        assert load(tmp_path / "saved.json") is not None
