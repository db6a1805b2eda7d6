"""`benchmarks/compiled_reads.py`: the scratch passes compile, agree with the project's own,
and every row is timed."""

from __future__ import annotations

import re
import shutil

import pytest
from factories import run_benchmark

SCRIPT = "compiled_reads.py"
ROWS = 6  # two readers × two classes of the deadline pass, then Moore–Hodgson twice
HEADER = re.compile(r"64 requests \(32 waiting, Moore–Hodgson keeps (\d+)\), best of 2 calls")


@pytest.mark.skipif(shutil.which("cc") is None, reason="mypyc needs a C compiler")
def test_every_pass_is_compiled_checked_and_timed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """64 requests, so that Moore–Hodgson gives some up (the script exits if the compiled
    one keeps other requests than the project's) and some waiting requests are protected."""
    pytest.importorskip("mypyc")
    lines = run_benchmark(SCRIPT, monkeypatch, capsys, "--requests", "64", "--repeats", "2")
    header = HEADER.fullmatch(lines[0])
    assert header is not None, lines[0]
    assert 0 < int(header.group(1)) < 32  # the check compared a triage that gives up some
    table = [line.rsplit(maxsplit=2) for line in lines[2:]]
    assert len(table) == ROWS
    assert table[0][0] == "deadlines: interpreted, over Request" and table[0][2] == "1.00"
    assert all(float(micros) > 0 for _, micros, _ in table)
