"""`benchmarks/compiled_reads.py`: the scratch passes compile, agree with the project's own,
and every row is timed."""

from __future__ import annotations

import shutil

import pytest
from factories import run_benchmark

SCRIPT = "compiled_reads.py"
ROWS = 6  # two readers × two classes of the deadline pass, then Moore–Hodgson twice


@pytest.mark.skipif(shutil.which("cc") is None, reason="mypyc needs a C compiler")
def test_every_pass_is_compiled_checked_and_timed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("mypyc")
    lines = run_benchmark(SCRIPT, monkeypatch, capsys, "--requests", "16", "--repeats", "2")
    assert lines[0] == "16 requests (8 waiting), best of 2 calls"
    table = [line.rsplit(maxsplit=2) for line in lines[2:]]
    assert len(table) == ROWS
    assert table[0][0] == "deadlines: interpreted, over Request" and table[0][2] == "1.00"
    assert all(float(micros) > 0 for _, micros, _ in table)
