"""The `list` and `import-profile` commands: what the simulator knows and where from."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

from slidingserve.policies import POLICIES
from slidingserve.sim.hardware import list_gpus, list_models, load_model
from slidingserve.sim.hardware.models import ModelSpec
from slidingserve.sim.hardware.profiles import (
    GPUProfile,
    available_tp,
    measured_table,
    source_table,
)
from slidingserve.sim.hardware.registry import gpu_profile, known_gpus
from slidingserve.sim.hardware.store import save_profile, store_dir, stored_gpus
from slidingserve.sim.hardware.vidur import read_vidur_dir
from slidingserve.workloads import SLO_PRESETS, WORKLOADS

_GPU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a file name and a --hardware field


def add_parser(commands: Any) -> None:
    """Add `list` and `import-profile` to the `slidingserve` subcommands."""
    listing = commands.add_parser(
        "list",
        help="policies, workloads, models, GPUs (and where their numbers come from), SLO presets",
    )
    listing.add_argument("--profile-dir", help="also a directory in Vidur's layout")
    listing.set_defaults(handler=run_list)

    importing = commands.add_parser(
        "import-profile",
        help="read GPU profiles in Vidur's layout and keep them for --gpu",
        description=(
            "Reads DIR laid out as Vidur's profiler writes it (compute/<gpu>/<org>/<model>/"
            "mlp.csv, optional attention.csv beside it, network/<gpu>_<topology>/"
            "all_reduce.csv), derives the tables the simulator uses, says where each part "
            f"comes from, and saves each GPU in the profile store ({store_dir()}; "
            "$SLIDINGSERVE_PROFILES moves it) so that --gpu NAME finds it."
        ),
    )
    importing.add_argument("directory", type=Path, help="the profiles directory")
    importing.add_argument(
        "--rename",
        action="append",
        default=[],
        metavar="GPU=NAME",
        help="save GPU under NAME (needed when it is a built-in name; repeatable)",
    )
    importing.add_argument("--check", action="store_true", help="read and report, save nothing")
    importing.set_defaults(handler=run_import_profile)


def run_list(args: argparse.Namespace) -> int:
    """Print what the simulator knows: policies, workloads, GPUs, models, SLO presets."""
    profile_dir = args.profile_dir or ""
    print("policies: " + ", ".join(POLICIES))
    print("workloads: " + ", ".join(WORKLOADS))
    gpus = [gpu_profile(name, profile_dir) for name in known_gpus(profile_dir)]
    print("\nGPUs:")
    for gpu in gpus:
        print(gpu_summary(gpu))
    print("\nmodels (operator times per GPU: measured, or scaled from a measured model):")
    for name in list_models():
        print(model_summary(load_model(name), gpus))
    print("  (or --model path/to/config.json: a Llama-family Hugging Face config)")
    for preset, by_class in SLO_PRESETS.items():
        targets = ", ".join(
            f"{cls} TTFT {slo.ttft:g} s / TBT {slo.tbt * 1000:g} ms"
            for cls, slo in by_class.items()
        )
        print(f"SLO preset {preset}: {targets}")
    return 0


def gpu_summary(gpu: GPUProfile) -> str:
    """Several lines: the GPU, then where its operators, attention and all-reduce come from."""
    device = gpu.device
    tables = "; ".join(
        f"{table.label} (TP {', '.join(map(str, sorted(table.per_tp)))})" for table in gpu.tables
    )
    workers = gpu.all_reduce.workers()
    reduce_for = f"TP {', '.join(map(str, workers))}" if workers else "none"
    return "\n".join(
        [
            f"  {gpu.name}: {device.description}, {device.memory_gib:g} GiB, "
            f"{device.peak_tflops:g} TFLOP/s, {device.memory_bandwidth_gbs:g} GB/s ({gpu.origin})",
            f"    operators: measured for {tables}",
            f"    attention: {gpu.attention_source}",
            f"    all-reduce ({reduce_for}): {gpu.all_reduce.source}",
        ]
    )


def model_summary(model: ModelSpec, gpus: list[GPUProfile]) -> str:
    """One model's shape, then per GPU: measured or scaled from which table, at which TP."""
    shape = (
        f"  {model.name} ({model.hf_name}): {model.num_layers} layers, hidden "
        f"{model.hidden_size}, {model.num_heads} heads / {model.num_kv_heads} KV, MLP "
        f"{model.intermediate_size}, vocab {model.vocab_size}, context {model.max_model_len}"
    )
    return "\n".join([shape, *(f"    {gpu.name}: {operator_source(gpu, model)}" for gpu in gpus)])


def operator_source(gpu: GPUProfile, model: ModelSpec) -> str:
    """Whether `model`'s operators are measured on `gpu` or scaled (from which table), and the
    TP degrees it runs at there."""
    tps = ", ".join(map(str, available_tp(gpu, model))) or "none"
    if measured_table(gpu, model) is not None:
        return f"measured; TP {tps}"
    return f"scaled from {source_table(gpu, model).label}; TP {tps}"


def run_import_profile(args: argparse.Namespace) -> int:
    """Read a Vidur-layout directory, report each GPU, and save them (unless --check)."""
    renames = _renames(args.rename)
    profiles = read_vidur_dir(args.directory)
    unknown = sorted(set(renames) - {profile.name for profile in profiles})
    if unknown:
        raise ValueError(f"--rename names GPU(s) not in {args.directory}: {', '.join(unknown)}")
    profiles = [
        dataclasses.replace(profile, name=renames.get(profile.name, profile.name))
        for profile in profiles
    ]
    problem = _naming_problem([profile.name for profile in profiles])
    if problem and not args.check:
        raise ValueError(problem)
    for profile in profiles:
        print(gpu_summary(profile))
        for name in list_models():
            print(f"    {name}: {operator_source(profile, load_model(name))}")
    if args.check:
        if problem:
            print(f"\nto import: {problem}")
        print(f"\nchecked {len(profiles)} GPU profile(s); nothing saved (--check)")
        return 0
    for profile in profiles:
        replaced = " (replacing the earlier import)" if profile.name in stored_gpus() else ""
        print(f"saved {profile.name} → {save_profile(profile)}{replaced}")
    return 0


def _naming_problem(names: list[str]) -> str:
    """Why profiles under `names` cannot be saved (one line), or "" when they can.

    A stored profile is the file `<name>.json` and is chosen with `--gpu NAME` or
    `--hardware NAME:MODEL:TP`, so a name holds no path separator or colon.
    """
    clashes = [name for name in names if name in list_gpus()]
    if clashes:
        return (
            f"{', '.join(clashes)}: built-in GPU name(s); import under another name with "
            f"--rename {clashes[0]}=my-{clashes[0]} (or use --profile-dir, which reads the "
            "directory as it is and wins over built-in names)"
        )
    malformed = [name for name in names if not _GPU_NAME.fullmatch(name)]
    if malformed:
        return (
            f"{', '.join(map(repr, malformed))}: not usable as GPU name(s) (letters, digits, "
            "'.', '_' and '-', starting with a letter or digit); give another with --rename"
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        return f"{', '.join(repeated)}: more than one GPU would be saved under this name"
    return ""


def _renames(texts: list[str]) -> dict[str, str]:
    renames = {}
    for text in texts:
        old, equals, new = text.partition("=")
        if not equals or not old.strip() or not new.strip():
            raise ValueError(f"--rename expects GPU=NAME, got {text!r}")
        renames[old.strip()] = new.strip()
    return renames
