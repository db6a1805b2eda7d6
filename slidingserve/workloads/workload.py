"""Named workloads and the generator that turns one into a list of `Request`s.

Determinism and common random numbers: `generate_requests(config, rate, seed, ...)` depends
only on its arguments. The seed feeds three independent numpy Generators, spawned from one
`SeedSequence(seed)` in a fixed order: mixing (which source each request comes from), lengths
(one child per source) and arrivals (unit-rate pattern). The rate enters only when the unit-rate
arrival pattern is mapped to seconds, so for one seed the request lengths, sources and classes
are the same at every rate, and without an overload window the arrival times are inversely
proportional to the rate. Later streams are spawned after these three, which leaves them
unchanged: the fourth draws SLO tiers, the fifth which requests get a system prompt
(prefixes.py). A replayed trace (`--arrival trace`, replay.py) draws nothing: the seed picks
its window of rows, and the rate only rescales the window's own arrival times.

Content: requests carry what their tokens are (`Request.content`, runs of `core/prefix.py`)
when the workload knows which share a prefix: a replayed trace's `hash_ids`, or the
synthetic system prompt and conversations of prefixes.py. Otherwise it is empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from slidingserve.core.checks import require_int
from slidingserve.core.request import SLO, Request
from slidingserve.workloads import segments
from slidingserve.workloads.arrivals import ArrivalConfig, arrival_times
from slidingserve.workloads.lengths import (
    TRACE_FILES,
    LengthDistribution,
    TraceLengths,
    embedded_distribution,
    trace_distribution,
)
from slidingserve.workloads.prefixes import Conversations, SystemPrompt, compose
from slidingserve.workloads.replay import (
    TRACE_WORKLOAD,
    Replay,
    TraceSource,
    load_trace,
    replay_window,
)
from slidingserve.workloads.slo import (
    CONVERSATIONAL,
    SUMMARIZATION,
    WORKLOAD_CLASSES,
    check_slo_choice,
    slo_for,
)
from slidingserve.workloads.tiers import TierMix
from slidingserve.workloads.trace_files import TRACE_BLOCK_SIZE

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy.typing as npt

    from slidingserve.core.prefix import Run


class WorkloadSource(NamedTuple):
    """One stream of requests inside a workload."""

    source: str  # length source: a key of TRACE_FILES ("sharegpt", "arxiv"), or a label
    workload_class: str  # SLO class of its requests, one of slo.WORKLOAD_CLASSES
    weight: float  # share of the requests, relative to the workload's other sources
    trace: TraceSource | None = None  # a --trace file, when the source is one


@dataclass(frozen=True)
class WorkloadSpec:
    """A named workload: where request lengths come from and in what proportion."""

    name: str
    sources: tuple[WorkloadSource, ...]

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError(f"workload {self.name!r} has no sources")
        for source in self.sources:
            if source.trace is None and source.source not in TRACE_FILES:
                known = ", ".join(sorted(TRACE_FILES))
                raise ValueError(f"{self.name}: unknown source {source.source!r}; known: {known}")
            if source.workload_class not in WORKLOAD_CLASSES:
                known = ", ".join(WORKLOAD_CLASSES)
                raise ValueError(
                    f"{self.name}: unknown class {source.workload_class!r}; known: {known}"
                )
            if not source.weight > 0:
                raise ValueError(f"{self.name}: weight of {source.source} must be positive")

    @property
    def probabilities(self) -> npt.NDArray[np.float64]:
        """Probability that a request comes from each source, in `sources` order."""
        weights = np.asarray([source.weight for source in self.sources], dtype=np.float64)
        probabilities: npt.NDArray[np.float64] = weights / weights.sum()
        return probabilities


_SHAREGPT = WorkloadSource("sharegpt", CONVERSATIONAL, 1.0)
_ARXIV = WorkloadSource("arxiv", SUMMARIZATION, 1.0)

WORKLOADS: dict[str, WorkloadSpec] = {
    "sharegpt": WorkloadSpec("sharegpt", (_SHAREGPT,)),
    "arxiv": WorkloadSpec("arxiv", (_ARXIV,)),
    "mixed-v1": WorkloadSpec("mixed-v1", (_SHAREGPT._replace(weight=3.0), _ARXIV)),
    "mixed-v2": WorkloadSpec("mixed-v2", (_SHAREGPT._replace(weight=5.0), _ARXIV)),
}
"""Workload name -> spec. The mixes are ShareGPT:arXiv by request count, drawn at random."""


def get_workload(name: str) -> WorkloadSpec:
    """The workload called `name`; ValueError listing the known names otherwise."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    return WORKLOADS[name]


@dataclass(frozen=True)
class WorkloadConfig:
    """Everything that defines a workload except the rate and the seed.

    Lengths come from the embedded tables when `trace_dir` is None, else by resampling the
    trace CSVs (`TRACE_FILES` names) in `trace_dir`. `trace_files` names a CSV per source
    explicitly, e.g. `(("arxiv", Path("my_arxiv.csv")),)`, and wins over both.
    """

    name: str  # a key of WORKLOADS, or TRACE_WORKLOAD with `traces`
    num_requests: int
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)
    slo_preset: str = "strict"  # a key of slo.SLO_PRESETS
    slo_scale: float = 1.0  # multiplies every TTFT and TBT target
    trace_dir: Path | None = None
    trace_files: tuple[tuple[str, Path], ...] = ()  # (source, CSV path) overrides
    tiers: TierMix | None = None  # SLO tiers; None: every request gets its class SLO
    traces: tuple[TraceSource, ...] = ()  # --trace files: the workload TRACE_WORKLOAD
    trace_start: int = 0  # replay: the first row of seed 0's window
    trace_spread: bool = False  # replay: space requests that share a timestamp (replay.py)
    trace_block_size: int = TRACE_BLOCK_SIZE  # replay: prompt tokens per trace hash id
    system_prompt: SystemPrompt | None = None  # a shared system prompt (prefixes.py)
    conversations: Conversations | None = None  # multi-turn conversations (prefixes.py)

    def __post_init__(self) -> None:
        require_int("num_requests", self.num_requests)
        require_int("trace_start", self.trace_start, minimum=0)
        require_int("trace_block_size", self.trace_block_size)
        check_slo_choice(self.slo_preset, self.slo_scale)
        self._check_traces()
        spec = self.spec
        used = {source.source for source in spec.sources}
        for source, _ in self.trace_files:
            if source not in used:
                known = ", ".join(sorted(used))
                raise ValueError(f"{self.name} has no source {source!r} to read; it has {known}")

    def _check_traces(self) -> None:
        if (self.name == TRACE_WORKLOAD) != bool(self.traces):
            raise ValueError(
                f"the workload {TRACE_WORKLOAD!r} is made of --trace files, and only it: "
                f"give --trace FILE with it, and no workload name but {TRACE_WORKLOAD!r} "
                "with --trace"
            )
        if self.arrival.process == "trace":
            if not self.traces:
                raise ValueError("--arrival trace replays the arrival times of --trace files")
            if any(trace.weight != 1.0 for trace in self.traces):
                raise ValueError(
                    "replayed traces keep their own mix: weights apply to resampled traces"
                )
            if self.synthetic_prefixes:
                raise ValueError(
                    "a system prompt or conversations would change a replayed trace's recorded "
                    "lengths; replayed requests share prefixes only by the trace's hash_ids "
                    "(resample the trace with poisson or gamma arrivals to add them)"
                )

    @property
    def spec(self) -> WorkloadSpec:
        if self.traces:
            return WorkloadSpec(
                TRACE_WORKLOAD,
                tuple(
                    WorkloadSource(trace.label, trace.workload_class, trace.weight, trace)
                    for trace in self.traces
                ),
            )
        return get_workload(self.name)

    @property
    def synthetic_prefixes(self) -> bool:
        """Whether requests get a system prompt or turns of conversations (prefixes.py)."""
        return self.system_prompt is not None or self.conversations is not None

    def prefix_note(self) -> str:
        """A clause on the workload's shared prefixes, for run headers ("" without)."""
        parts = [
            option.describe()
            for option in (self.system_prompt, self.conversations)
            if option is not None
        ]
        if self.replays and any(_has_hash_ids(trace) for trace in self.traces):
            parts.append(f"prompt blocks shared by hash_ids ({self.trace_block_size} tokens)")
        return "; ".join(parts)

    @property
    def replays(self) -> bool:
        """Whether requests are replayed from the traces (their own arrival times)."""
        return self.arrival.process == "trace"

    def trace_path(self, source: str) -> Path | None:
        """The CSV that `source` is resampled from, or None for the embedded table."""
        explicit = dict(self.trace_files)
        if source in explicit:
            return Path(explicit[source])
        if self.trace_dir is not None:
            return Path(self.trace_dir) / TRACE_FILES[source]
        return None


@dataclass(frozen=True)
class WorkloadSample:
    """A generated workload as arrays, request i in row i (before `Request`s are built)."""

    arrivals: npt.NDArray[np.float64]  # seconds, sorted, first at 0
    prompt_lens: npt.NDArray[np.int64]  # tokens, after trimming to the context
    output_lens: npt.NDArray[np.int64]  # tokens, after trimming to the context
    source_index: npt.NDArray[np.intp]  # position of each request's source in spec.sources
    spec: WorkloadSpec
    trimmed: int = 0  # requests whose prompt or output was cut to fit the context
    # per request its content runs (prompt then output, module docstring); None: unknown
    content: tuple[tuple[Run, ...], ...] | None = None

    def __len__(self) -> int:
        return len(self.arrivals)


class _Streams(NamedTuple):
    """Independent random streams of one seed (module docstring)."""

    mixing: np.random.Generator
    lengths: tuple[np.random.Generator, ...]  # one per source, in spec.sources order
    arrivals: np.random.Generator


def _streams(seed: int, num_sources: int) -> _Streams:
    require_int("seed", seed, minimum=0)
    mixing, lengths, arrivals = np.random.SeedSequence(seed).spawn(3)
    return _Streams(
        np.random.default_rng(mixing),
        tuple(np.random.default_rng(child) for child in lengths.spawn(num_sources)),
        np.random.default_rng(arrivals),
    )


def length_sources(config: WorkloadConfig) -> dict[str, LengthDistribution]:
    """The length distribution of each source of the workload; reads trace files if asked."""
    distributions: dict[str, LengthDistribution] = {}
    for source in config.spec.sources:
        if source.trace is not None:
            trace = load_trace(source.trace.path, source.trace.columns)
            distributions[source.source] = TraceLengths(trace.lengths)
            continue
        path = config.trace_path(source.source)
        distributions[source.source] = (
            embedded_distribution(source.source) if path is None else trace_distribution(path)
        )
    return distributions


def trim_to_context(
    prompt: npt.NDArray[np.int64], output: npt.NDArray[np.int64], max_model_len: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Trim lengths to the context: prompt ≤ L − 1, then output ≤ L − prompt (L in tokens).

    A request keeps at least one output token, and prompt + output never exceeds L.
    """
    require_int("max_model_len", max_model_len, minimum=2)
    trimmed_prompt = np.minimum(prompt, max_model_len - 1)
    return trimmed_prompt, np.minimum(output, max_model_len - trimmed_prompt)


def _trimmed(
    prompt: npt.NDArray[np.int64], output: npt.NDArray[np.int64], max_model_len: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """`trim_to_context`, and how many requests it cut."""
    short_prompt, short_output = trim_to_context(prompt, output, max_model_len)
    cut = int(np.count_nonzero((short_prompt < prompt) | (short_output < output)))
    return short_prompt, short_output, cut


def sample_workload(
    config: WorkloadConfig,
    rate: float,
    seed: int,
    max_model_len: int,
    lengths: Mapping[str, LengthDistribution] | None = None,
) -> WorkloadSample:
    """The workload's arrays at `rate` (requests/s) for `seed`; see `generate_requests`."""
    if config.replays:
        return _replayed_sample(config, rate, seed, max_model_len)
    spec, n = config.spec, config.num_requests
    streams = _streams(seed, len(spec.sources))
    distributions = length_sources(config) if lengths is None else lengths
    source_index = streams.mixing.choice(len(spec.sources), size=n, p=spec.probabilities)
    prompt = np.empty(n, dtype=np.int64)
    output = np.empty(n, dtype=np.int64)
    for k, source in enumerate(spec.sources):
        rows = np.flatnonzero(source_index == k)
        drawn = distributions[source.source].sample(len(rows), streams.lengths[k])
        prompt[rows], output[rows] = drawn.prompt, drawn.output
    arrivals = arrival_times(n, rate, config.arrival, streams.arrivals)
    if config.synthetic_prefixes:
        prefix_stream = np.random.default_rng(np.random.SeedSequence(seed).spawn(5)[4])
        composed = compose(
            prompt,
            output,
            max_model_len,
            config.system_prompt,
            config.conversations,
            prefix_stream,
        )
        return WorkloadSample(
            arrivals,
            composed.prompt,
            composed.output,
            source_index.astype(np.intp),
            spec,
            composed.trimmed,
            composed.content,
        )
    trimmed_prompt, trimmed_output, trimmed = _trimmed(prompt, output, max_model_len)
    return WorkloadSample(
        arrivals, trimmed_prompt, trimmed_output, source_index.astype(np.intp), spec, trimmed
    )


def _replayed_sample(
    config: WorkloadConfig, rate: float | None, seed: int, max_model_len: int
) -> WorkloadSample:
    """Seed `seed`'s window of the traces, replayed at mean `rate` (replay.py)."""
    require_int("seed", seed, minimum=0)
    n = config.num_requests
    start = config.trace_start + seed * n
    window = replay_window(config.traces, start, n, rate, config.trace_spread)
    prompt, output, trimmed = _trimmed(window.prompt, window.output, max_model_len)
    return WorkloadSample(
        window.arrivals,
        prompt,
        output,
        window.source_index,
        config.spec,
        trimmed,
        _replayed_content(window, prompt, output, config.trace_block_size),
    )


def _replayed_content(
    window: Replay,
    prompt: npt.NDArray[np.int64],
    output: npt.NDArray[np.int64],
    block_size: int,
) -> tuple[tuple[Run, ...], ...] | None:
    """Each replayed request's runs: its prompt by its hash ids (`segments.trace_prompt`,
    from the recorded prompt, then trimmed to `prompt`), then its own output; None when the
    traces have no hash ids."""
    if window.hash_ids is None:
        return None
    rows = zip(
        window.hash_ids,
        window.source_index.tolist(),
        window.prompt.tolist(),
        prompt.tolist(),
        output.tolist(),
        strict=True,
    )
    return tuple(
        segments.with_output(
            segments.trace_prompt(ids, source, recorded, block_size, i), kept, answer, i
        )
        for i, (ids, source, recorded, kept, answer) in enumerate(rows)
    )


def _has_hash_ids(trace: TraceSource) -> bool:
    """Whether a trace file records prompt block hash ids."""
    return load_trace(trace.path, trace.columns).hash_ids is not None


def recorded_rate(config: WorkloadConfig, seed: int = 0) -> float:
    """The mean rate (requests/s) of seed `seed`'s replay window as the trace recorded it."""
    if not config.replays:
        raise ValueError("only replayed traces (--arrival trace) have a recorded rate")
    n = config.num_requests
    start = config.trace_start + seed * n
    return replay_window(config.traces, start, n, None, config.trace_spread).recorded_rate


def generate_requests(
    config: WorkloadConfig,
    rate: float,
    seed: int,
    max_model_len: int,
    lengths: Mapping[str, LengthDistribution] | None = None,
) -> list[Request]:
    """`config.num_requests` requests "r0", "r1", ... arriving at base `rate` (requests/s).

    Deterministic for a seed, with common random numbers across rates (module docstring).
    Lengths are trimmed to the context of `max_model_len` tokens: prompt = min(prompt, L − 1),
    then output = min(output, L − prompt). Requests carry content runs when the workload has
    prefix information (module docstring). `lengths` (from `length_sources(config)`) saves
    re-reading trace files when generating the same workload many times.
    """
    sample = sample_workload(config, rate, seed, max_model_len, lengths)
    slos = _request_slos(config, sample, seed)
    rows = zip(
        sample.arrivals.tolist(),
        sample.prompt_lens.tolist(),
        sample.output_lens.tolist(),
        slos,
        sample.content or ((),) * len(sample),
        strict=True,
    )
    return [
        Request(f"r{i}", arrival, prompt, output, slo, content=content)
        for i, (arrival, prompt, output, slo, content) in enumerate(rows)
    ]


def _request_slos(config: WorkloadConfig, sample: WorkloadSample, seed: int) -> list[SLO]:
    """Each request's SLO: its class's, or its tier's when the workload has tiers.

    Tiers are drawn from a fourth stream of the seed, so lengths, sources and arrivals are
    the same with or without them.
    """
    by_source = _source_slos(config)
    classes = [by_source[k] for k in sample.source_index.tolist()]
    if config.tiers is None:
        return classes
    tier_stream = np.random.default_rng(np.random.SeedSequence(seed).spawn(4)[3])
    tiers = config.tiers.tiers
    picks = config.tiers.assign(len(classes), tier_stream).tolist()
    return [tiers[pick].slo(slo) for pick, slo in zip(picks, classes, strict=True)]


def _source_slos(config: WorkloadConfig) -> list[SLO]:
    """The SLO of each source's requests, in spec.sources order (per-request tiers go here)."""
    return [
        slo_for(source.workload_class, config.slo_preset, config.slo_scale)
        for source in config.spec.sources
    ]
