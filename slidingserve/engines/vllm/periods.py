"""Whole engine iterations, timed from the start of one step to the start of the next.

The adapter's `samples` time the model alone. A live server's iteration also schedules,
handles the model's output, takes in new requests and shares the CPU with the API server;
`PeriodRecorder` times all of that, per batch, for as long as the engine stays busy (a step
after which nothing was left to run ends in idle waiting, so it is not recorded). These
periods are what a simulation of the live server must charge per iteration. The adapter
saves them whenever the engine falls idle (vLLM's shutdown kills the engine before its
scheduler is told), so a write never delays a step. A recorder keeps at most `max_steps`
periods (the most recent); one with `max_steps=0` keeps none. Under async scheduling steps
overlap, and the timer measures each period whole instead (`record`, see `timing.py`).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from slidingserve.core.batch import BatchShape, TimedBatch
from slidingserve.predictor.steps import MIN_STEPS, EngineSteps, save_engine_steps

if TYPE_CHECKING:
    from pathlib import Path

    from slidingserve.core.view import EngineLimits

MAX_PERIODS = 100_000
"""Periods kept for a steps file, the most recent ones: about 80 MB with a dozen requests a
batch (see `timing.MAX_SAMPLES`). The adapter keeps none unless a file is asked for
(`steps_out`)."""


class PeriodRecorder:
    """Step periods of a busy engine; see the module docstring."""

    def __init__(self, max_steps: int) -> None:
        self.periods: deque[TimedBatch] = deque(maxlen=max_steps)
        self._open: tuple[BatchShape, float] | None = None
        self.unsaved = 0  # periods recorded since the last save

    def step_started(self, now: float) -> None:
        """A step begins at `now`: the previous busy one, if any, ends here."""
        if self._open is not None:
            shape, started = self._open
            self.periods.append(TimedBatch(shape, now - started))
            self.unsaved += 1
        self._open = None

    def step_scheduled(self, shape: BatchShape, started: float) -> None:
        """The step that began at `started` runs `shape` (nothing is timed for an empty one)."""
        self._open = (shape, started) if shape.num_tokens else None

    def record(self, shape: BatchShape, seconds: float) -> None:
        """A period measured whole (async scheduling, where steps overlap)."""
        self.periods.append(TimedBatch(shape, seconds))
        self.unsaved += 1

    def engine_idle(self) -> None:
        """Nothing is left to run: the time until the next step is waiting, not working."""
        self._open = None

    @property
    def due(self) -> bool:
        """Whether a save would write something new, in a file long enough to load
        (`MIN_STEPS` periods)."""
        return self.unsaved > 0 and len(self.periods) >= MIN_STEPS

    def save(self, path: Path, engine: str, max_model_len: int, kv_blocks: int,
             limits: EngineLimits) -> None:  # fmt: skip
        """Write the periods and the engine's facts as an engine-steps file."""
        steps = EngineSteps(
            engine=engine,
            max_model_len=max_model_len,
            kv_blocks=kv_blocks,
            block_size=limits.block_size,
            max_num_batched_tokens=limits.max_num_batched_tokens,
            max_num_seqs=limits.max_num_seqs,
            batches=tuple(self.periods),
        )
        temporary = path.with_name(path.name + ".partial")
        save_engine_steps(temporary, steps)
        temporary.replace(path)  # readers never see half a file
        self.unsaved = 0
