"""`benchmarks/latency_check.py`'s table: a live figure of 0 gives no error, not a crash."""

from __future__ import annotations

import runpy

from factories import BENCHMARKS


def test_a_live_tpot_of_zero_prints_no_error_and_the_others_do() -> None:
    script = runpy.run_path(str(BENCHMARKS / "latency_check.py"))  # not as __main__
    row = script["Row"]
    live = [row("fcfs", 0, 0.100, 0.200, 0.0, 0.0)]  # every token in one streamed chunk
    simulated = [row("fcfs", 0, 0.110, 0.150, 0.012, 0.5)]
    line = script["table"](live, simulated, ["fcfs"]).splitlines()[1].split()
    assert line[:5] == ["fcfs", "100", "/", "110", "+10%"]
    assert line[5:9] == ["200", "/", "150", "-25%"]
    assert line[9:13] == ["0", "/", "12", "n/a"]
    assert line[13:] == ["0.0%", "/", "50.0%"]
