"""The `trace-stats` command: what one or more trace files hold (lengths and arrivals), a
block of text each, a PNG each and one JSON for all."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slidingserve.cli import settings as cfg
from slidingserve.reporting import format_table, write_json
from slidingserve.workloads.trace_files import TRACE_BLOCK_SIZE, TraceColumns, read_trace_file
from slidingserve.workloads.trace_stats import MIN_MINUTE_ARRIVALS, trace_stats
from slidingserve.workloads.traces import TraceFormatError

if TYPE_CHECKING:
    from slidingserve.workloads.trace_files import TimedTrace
    from slidingserve.workloads.trace_stats import (
        ArrivalStats,
        BlockStats,
        LengthStats,
        TraceStats,
    )

STATS_FILE = "trace_stats.json"


def add_parser(commands: Any) -> None:
    """Add `trace-stats` to the `slidingserve` subcommands."""
    parser = commands.add_parser(
        "trace-stats",
        help="describe trace files: lengths, arrival rate and burstiness, a PNG each",
        description=(
            "Reads each trace (Vidur-style CSV, Mooncake-style JSON lines, or a length-only "
            "CSV) and prints its rows, prompt and output length quantiles, the share of "
            "prompts over 4k, 8k and 32k contexts and, when it records arrival times, its "
            "duration, mean rate and burstiness: the CV of the gaps between arrivals, of the "
            "arrivals per second, and of the gaps within each minute, and, when it records "
            "hash_ids, the share of prompt blocks that repeat an earlier row's (definitions in "
            "slidingserve/workloads/trace_stats.py). Writes <file stem>.png for each file and "
            f"{STATS_FILE} for all to --out-dir. A file that cannot be read is reported and "
            "the others still described (exit status 2)."
        ),
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="trace files")
    parser.add_argument(
        "--columns",
        help="prompt=COL,output=COL,time=COL,time_unit=s|ms, where the files' columns are not "
        "named as Vidur's or Mooncake's",
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=cfg.TRACE_STATS_OUT_DIR,
        help="where the files go (default %(default)s)",
    )
    parser.add_argument("--no-plot", action="store_true", help="write no PNG")
    parser.add_argument(
        "--trace-block-size",
        type=int,
        default=TRACE_BLOCK_SIZE,
        help="prompt tokens per hash id, for the report (default %(default)s)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Describe each file; 2 when a file could not be read."""
    columns = TraceColumns.parse(args.columns) if args.columns else None
    described: list[tuple[Path, TimedTrace, TraceStats]] = []
    errors: list[str] = []
    for path in args.files:
        try:
            trace = read_trace_file(path, columns)
        except TraceFormatError as error:
            print(f"slidingserve {args.command}: error: {error}", file=sys.stderr)
            errors.append(str(error))
            continue
        stats = trace_stats(trace)
        if described:
            print()
        print(describe(stats, path, args.trace_block_size))
        described.append((path, trace, stats))
    if described:
        for written in _write(described, errors, args.out_dir, plot=not args.no_plot):
            print(f"wrote {written}")
    return 2 if errors else 0


def describe(stats: TraceStats, path: Path, block_size: int = TRACE_BLOCK_SIZE) -> str:
    """A block of text: the file, its rows, arrivals, prompt blocks and lengths."""
    shares = ", ".join(
        f"{share:.1%} over {context:,}" for context, share in stats.prompt_share_over.items()
    )
    labelled = [
        *_arrival_lines(stats.arrivals),
        ("long prompts", f"{shares} tokens"),
        *_block_lines(stats.blocks, block_size),
    ]
    table = format_table(
        ["tokens", "mean", "p50", "p90", "p99", "max"],
        [_length_row("prompt", stats.prompt), _length_row("output", stats.output)],
    )
    return "\n".join(
        [
            f"{path}: {stats.rows:,} requests",
            *(f"  {label:<13} {text}" for label, text in labelled),
            *(f"  {line}" for line in table.splitlines()),
        ]
    )


def _arrival_lines(arrivals: ArrivalStats | None) -> list[tuple[str, str]]:
    """(label, text) lines on the arrivals."""
    if arrivals is None:
        return [("arrivals", "no arrival times")]
    rate = "no rate" if arrivals.mean_rate is None else f"{arrivals.mean_rate:.2f} req/s"
    minutes = arrivals.minutes_with_gap_cv
    within = (
        f"median {_number(arrivals.minute_gap_cv_median)}, max "
        f"{_number(arrivals.minute_gap_cv_max)} ({minutes} minute{'s' * (minutes != 1)} "
        f"with ≥ {MIN_MINUTE_ARRIVALS} arrivals)"
        if minutes
        else f"undefined (no minute with ≥ {MIN_MINUTE_ARRIVALS} arrivals and a gap > 0)"
    )
    return [
        ("arrivals", f"{arrivals.duration:,.1f} s ({arrivals.duration / 60:,.1f} min), {rate}"),
        (
            "per second",
            f"count CV {arrivals.second_count_cv:.2f}, busiest {arrivals.busiest_second} "
            f"(busiest minute {arrivals.busiest_minute:,})",
        ),
        ("gaps", f"CV {_number(arrivals.gap_cv)}; CV within a minute {within}"),
    ]


def _block_lines(blocks: BlockStats | None, block_size: int) -> list[tuple[str, str]]:
    """(label, text) lines on the prompt blocks, when the trace has hash ids."""
    if blocks is None:
        return []
    return [
        (
            "prompt blocks",
            f"{blocks.blocks:,} of {block_size:,} tokens; {blocks.repeat_share:.0%} repeat an "
            "earlier one",
        )
    ]


def _length_row(name: str, lengths: LengthStats) -> list[str]:
    values = (lengths.mean, lengths.p50, lengths.p90, lengths.p99, lengths.max)
    return [name, *(f"{value:,.0f}" for value in values)]


def _number(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.2f}"


def _write(
    described: list[tuple[Path, TimedTrace, TraceStats]], errors: list[str], out: Path, plot: bool
) -> list[Path]:
    """The PNGs (unless not `plot`) and the JSON: every file's stats, the unread files' errors."""
    written = []
    if plot:
        from slidingserve.eval.trace_plot import plot_trace  # matplotlib: only here

        for name, (_, trace, stats) in zip(_png_names(described), described, strict=True):
            written.append(plot_trace(trace, stats, out / name))
    payload = {"files": [dataclasses.asdict(stats) for _, _, stats in described], "errors": errors}
    write_json(out / STATS_FILE, payload)
    return [*written, out / STATS_FILE]


def _png_names(described: list[tuple[Path, TimedTrace, TraceStats]]) -> list[str]:
    """`<stem>.png` for each file; a stem already taken gets `-2`, `-3`, ..."""
    names: list[str] = []
    for path, _, _ in described:
        name, count = f"{path.stem}.png", 1
        while name in names:
            count += 1
            name = f"{path.stem}-{count}.png"
        names.append(name)
    return names
