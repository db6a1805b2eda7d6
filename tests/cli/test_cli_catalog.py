"""`slidingserve list` and `import-profile`, and the latency-model lines that `simulate` and
`goodput` print for built-in GPUs, imported ones, `--profile-dir` and `--model config.json`.

The built-in cases run on the tables shipped in the package. The imported A100 is a copy of
`../shared/data/profiles` laid out as Vidur's profiler writes it (in a temporary folder, never
in the repository); those tests skip when the data is absent. Broken directories and renames
use a small synthetic directory and always run.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from slidingserve.cli import main
from slidingserve.sim.hardware import HardwareConfig, load_model
from slidingserve.sim.hardware.optables import ALL_OPS
from slidingserve.sim.hardware.store import store_dir

PROFILES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "profiles"
TINY = ["--policies", "sarathi,sarathi-edf", "--workloads", "sharegpt", "--seeds", "1"]
TINY += ["--requests", "30", "--precision", "0.3", "--curve-points", "0", "--jobs", "1"]
TINY += ["--no-progress"]
A100 = "NVIDIA A100-SXM4-80GB"
A40 = "NVIDIA A40 (GA102, the die of the RTX 3090)"
NVLINK_PAIR = "NVLink bridge pair, 56.25 GB/s nominal a direction x 0.66: 44 µs"
PCIE = "PCIe 4.0 x16, 32 GB/s nominal a direction x 0.74: 72 µs"
A40_ATTENTION = (
    "derived: a100's fit, prefill ÷ 0.48 (peak compute), decode ÷ 0.34 (memory bandwidth)"
)
SAME_AS_A100 = (
    "derived: a100's fit, prefill ÷ 1.00 (peak compute), decode ÷ 1.00 (memory bandwidth)"
)


class Run(NamedTuple):
    code: int
    out: str
    err: str


def slidingserve(*argv: str) -> Run:
    """The command line `slidingserve ARGV`, its output captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return Run(code, out.getvalue(), err.getvalue())


def simulate(*argv: str) -> Run:
    return slidingserve("simulate", "--requests", "30", *argv)


def header(run: Run) -> list[str]:
    """`simulate`'s lines before its table (the setup, then the latency model)."""
    return run.out.split("\n\n")[0].splitlines()


def sarathi_row(run: Run) -> str:
    """`simulate`'s one table row (metrics of sarathi on sharegpt)."""
    (row,) = [line for line in run.out.splitlines() if line.startswith("sarathi  sharegpt")]
    return row


def entry(listing: str, name: str) -> list[str]:
    """The lines of `name`'s entry in a listing: `  name: ...` or `  name (...): ...`, then
    its more deeply indented lines."""
    lines = listing.splitlines()
    start = next(
        i for i, line in enumerate(lines) if re.match(rf"  {re.escape(name)}( \(.*\))?: ", line)
    )
    end = next(
        (i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines)
    )
    return lines[start:end]


def per_gpu(listing: str, model: str) -> dict[str, str]:
    """A model's entry in `list` as {GPU: "measured; TP ..." or "scaled from ...; TP ..."}."""
    return dict(line.strip().split(": ", 1) for line in entry(listing, model)[1:])


def one_line_error(run: Run, command: str) -> str:
    """The message of a run that failed with one line on stderr and nothing on stdout."""
    assert (run.code, run.out) == (2, "")
    assert run.err.startswith(f"slidingserve {command}: error: ")
    assert run.err.count("\n") == 1
    return run.err.removeprefix(f"slidingserve {command}: error: ").rstrip("\n")


def stored() -> list[str]:
    folder = store_dir()
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


# --- laying out directories in Vidur's layout --------------------------------------------


@pytest.fixture(scope="module")
def a100_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared A100 profiles in Vidur's layout: two models' mlp.csv, one NVLink topology,
    no attention.csv (read-only for tests)."""
    root = tmp_path_factory.mktemp("vidur-a100")
    copies = {
        "a100/Meta-Llama-3-8B/mlp.csv": "compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv",
        "a100/Llama-2-7b-hf/mlp.csv": "compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv",
        "network/a100_pairwise_nvlink/all_reduce.csv": (
            "network/a100_pairwise_nvlink/all_reduce.csv"
        ),
    }
    for source, target in copies.items():
        if not (PROFILES / source).is_file():
            pytest.skip(f"profile data absent: {PROFILES / source}")
        (root / target).parent.mkdir(parents=True)
        shutil.copyfile(PROFILES / source, root / target)
    return root


def write_csv(path: Path, rows: Sequence[Mapping[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def small_directory(root: Path, topologies: Sequence[str] = ()) -> Path:
    """A tiny valid directory: one a100 mlp.csv at TP 1, an all_reduce.csv per topology."""
    shape = {"n_head": 4, "n_kv_head": 2, "n_embd": 256, "n_expanded_embd": 512, "vocab_size": 99}
    mlp = [
        {
            **shape,
            "num_tokens": 2**i,
            "num_tensor_parallel_workers": 1,
            **{f"time_stats.{op}.median": 0.01 * (1 + 2**i / 64) for op in ALL_OPS},
        }
        for i in range(6)
    ]
    write_csv(root / "compute" / "a100" / "org" / "model" / "mlp.csv", mlp)
    reduce = [
        {"num_workers": 2, "size": size, "time_stats.all_reduce.median": 0.01 + size / 1e8}
        for size in (1024, 4096, 16384)
    ]
    for topology in topologies:
        write_csv(root / "network" / f"a100_{topology}" / "all_reduce.csv", reduce)
    return root


# --- 1. list --------------------------------------------------------------------------


@pytest.fixture
def listing() -> str:
    run = slidingserve("list")
    assert (run.code, run.err) == (0, "")
    return run.out


GPU_ENTRIES = {
    "a100": [
        f"  a100: {A100}, 80 GiB, 312 TFLOP/s, 2039 GB/s (built in)",
        "    operators: measured for a100 Meta-Llama-3-8B (TP 1, 2, 4, 8); "
        "a100 Llama-2-7b-hf (TP 1, 2, 4, 8)",
        "    attention: fitted to measured rows",
        "    all-reduce (TP 2, 4): measured (a100_pairwise_nvlink_all_reduce.json)",
    ],
    "a40": [
        f"  a40: {A40}, 48 GiB, 149.7 TFLOP/s, 696 GB/s (built in)",
        "    operators: measured for a40 Llama-2-7b-hf (TP 1, 2, 4, 8)",
        f"    attention: {A40_ATTENTION}",
        f"    all-reduce (TP 2): modelled: {NVLINK_PAIR} + 2(n-1)/n × bytes ÷ 37.1 GB/s, "
        "up to 2 GPUs",
    ],
    "a40-pcie": [
        f"  a40-pcie: {A40}, 48 GiB, 149.7 TFLOP/s, 696 GB/s (built in)",
        "    operators: measured for a40 Llama-2-7b-hf (TP 1, 2, 4, 8)",
        f"    attention: {A40_ATTENTION}",
        f"    all-reduce (TP 2, 4, 8): modelled: {PCIE} + 2(n-1)/n × bytes ÷ 23.7 GB/s, "
        "up to 8 GPUs",
    ],
}


@pytest.mark.parametrize("gpu", list(GPU_ENTRIES))
def test_list_says_where_each_gpus_numbers_come_from(listing: str, gpu: str) -> None:
    assert entry(listing, gpu) == GPU_ENTRIES[gpu]


def test_list_shows_only_the_built_in_gpus_when_nothing_is_imported(listing: str) -> None:
    gpus = listing.split("\nGPUs:\n")[1].split("\n\nmodels")[0]
    assert re.findall(r"^  (\S+): ", gpus, re.MULTILINE) == ["a100", "a40", "a40-pcie"]


MODEL_ENTRIES = {
    "llama-2-7b": {
        "a100": "measured; TP 1, 2, 4",
        "a40": "measured; TP 1, 2",
        "a40-pcie": "measured; TP 1, 2, 4, 8",
    },
    "llama-3-8b": {
        "a100": "measured; TP 1, 2, 4",
        "a40": "scaled from a40 Llama-2-7b-hf; TP 1, 2",
        "a40-pcie": "scaled from a40 Llama-2-7b-hf; TP 1, 2, 4, 8",
    },
    # 28 heads / 4 KV heads: no TP 8 anywhere; the A40 NVLink pair has 2 GPUs, so no TP 4.
    "qwen2.5-7b": {
        "a100": "scaled from a100 Meta-Llama-3-8B; TP 1, 2, 4",
        "a40": "scaled from a40 Llama-2-7b-hf; TP 1, 2",
        "a40-pcie": "scaled from a40 Llama-2-7b-hf; TP 1, 2, 4",
    },
}


@pytest.mark.parametrize("model", list(MODEL_ENTRIES))
def test_list_says_per_gpu_whether_a_models_operators_are_measured(
    listing: str, model: str
) -> None:
    spec = load_model(model)
    assert entry(listing, model)[0].startswith(
        f"  {model} ({spec.hf_name}): {spec.num_layers} layers, hidden {spec.hidden_size}, "
        f"{spec.num_heads} heads / {spec.num_kv_heads} KV"
    )
    assert per_gpu(listing, model) == MODEL_ENTRIES[model]


# --- 2. goodput on the embedded tables only ---------------------------------------------


def test_goodput_on_a40_tp2_qwen_reports_its_latency_model(tmp_path: Path) -> None:
    run = slidingserve(
        "goodput", *TINY, "--gpu", "a40", "--tp", "2", "--model", "qwen2.5-7b",
        "--out-dir", str(tmp_path),
    )  # fmt: skip
    assert (run.code, run.err) == (0, "")
    lines = run.out.splitlines()
    assert lines[3].startswith("a40 qwen2.5-7b TP2, strict SLOs")
    start = lines.index("latency model:") + 1
    model = lines[start : start + 5]
    assert model[:2] == [f"  GPU a40: {A40}, built in", "  model qwen2.5-7b (Qwen/Qwen2.5-7B)"]
    assert model[2].startswith("  operators scaled from a40 Llama-2-7b-hf by a roofline ")
    assert model[3] == f"  attention {A40_ATTENTION}"
    assert model[4].startswith(f"  all-reduce modelled: {NVLINK_PAIR}")
    assert not lines[start + 5].startswith("  ")  # five lines, no more

    saved = json.loads((tmp_path / "goodput.json").read_text())
    config = HardwareConfig(gpu="a40", model="qwen2.5-7b", tp=2)
    assert saved["latency_model"] == [line.strip() for line in model] == list(config.provenance())
    hardware = saved["experiment"]["hardware"]
    assert (hardware["gpu"], hardware["model"], hardware["tp"]) == ("a40", "qwen2.5-7b", 2)
    assert all(row["goodput_mean"] > 0 for row in saved["goodput"])


# --- 3. simulate: the latency model, and a TP the model cannot run at ---------------------


def test_simulate_prints_the_latency_model_before_the_table() -> None:
    run = simulate("--gpu", "a40-pcie", "--tp", "2", "--model", "llama-2-7b")
    assert (run.code, run.err) == (0, "")
    lines = header(run)
    assert lines[:5] == [
        "a40-pcie llama-2-7b TP2, latency model:",
        f"  GPU a40-pcie: {A40}, built in",
        "  model llama-2-7b (meta-llama/Llama-2-7b-hf)",
        "  operators measured (a40 Llama-2-7b-hf)",
        f"  attention {A40_ATTENTION}",
    ]
    assert lines[5].startswith(f"  all-reduce modelled: {PCIE}")
    assert len(lines) == 6
    table = run.out.split("\n\n")[1].splitlines()
    assert table[0].startswith("workload sharegpt: poisson arrivals; ")
    assert table[1].startswith("policy   workload  rate")


@pytest.mark.parametrize(
    ("gpu", "model", "tp", "message"),
    [
        ("a40-pcie", "llama-2-7b", 3, "tp=3 does not divide llama-2-7b's 32 KV heads"),
        ("a40-pcie", "qwen2.5-7b", 8, "tp=8 does not divide qwen2.5-7b's 4 KV heads"),
        ("a40", "llama-2-7b", 4, "tp=4 unsupported for llama-2-7b on a40: operator and "
         "all-reduce times exist for tp in [1, 2]"),
    ],
)  # fmt: skip
def test_a_tp_the_model_cannot_run_at_is_one_line(
    gpu: str, model: str, tp: int, message: str
) -> None:
    run = simulate("--gpu", gpu, "--tp", str(tp), "--model", model)
    assert one_line_error(run, "simulate") == message


# --- 4. --model path/to/config.json -------------------------------------------------------

LLAMA_3_8B_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


def config_file(folder: Path, **changes: Any) -> Path:
    path = folder / "config.json"
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, **changes}), encoding="utf-8")
    return path


def test_a_llama_3_8b_config_runs_on_the_measured_a100_table(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    # head_dim 4096 / 32 = 128 and the parameter count come out as the catalog's.
    catalog = load_model("llama-3-8b")
    assert replace(load_model(str(path)), hf_name=catalog.hf_name, name=catalog.name) == catalog

    run = simulate("--gpu", "a100", "--model", str(path))
    assert (run.code, run.err) == (0, "")
    assert header(run) == [
        f"a100 {path} TP1, latency model:",
        f"  GPU a100: {A100}, built in",
        f"  model {path}",
        "  operators measured (a100 Meta-Llama-3-8B)",
        "  attention fitted to measured rows",
    ]
    # The same shape is the same replica: the same metrics as the catalog's model.
    assert sarathi_row(run) == sarathi_row(simulate("--gpu", "a100", "--model", "llama-3-8b"))


@pytest.mark.parametrize(
    ("changes", "operators"),
    [
        # Vidur's tables key on the layer shapes; the vocabulary only sizes the embedding.
        ({"vocab_size": 32000}, "measured (a100 Meta-Llama-3-8B)"),
        # Layers nearer Llama-2-7B's in FLOPs per token than Llama-3-8B's.
        ({"intermediate_size": 12288}, "scaled from a100 Llama-2-7b-hf by a roofline "),
        # Same hidden size and heads, but q/k/v half as wide: not the measured layer.
        ({"head_dim": 64}, "scaled from a100 Llama-2-7b-hf by a roofline "),
    ],
)
def test_a_config_of_another_shape_says_scaled_from(
    tmp_path: Path, changes: dict[str, int], operators: str
) -> None:
    run = simulate("--gpu", "a100", "--model", str(config_file(tmp_path, **changes)))
    assert (run.code, run.err) == (0, "")
    assert header(run)[3].startswith(f"  operators {operators}")


# --- 5. import-profile ---------------------------------------------------------------------


def test_a_built_in_name_is_refused_with_a_rename_suggested(a100_copy: Path) -> None:
    message = one_line_error(slidingserve("import-profile", str(a100_copy)), "import-profile")
    assert message.startswith("a100: built-in GPU name(s); import under another name with ")
    assert "--rename a100=my-a100" in message
    assert stored() == []


def test_a_renamed_import_is_saved_listed_and_simulated(a100_copy: Path) -> None:
    run = slidingserve("import-profile", str(a100_copy), "--rename", "a100=lab-a100")
    assert (run.code, run.err) == (0, "")
    saved = store_dir() / "lab-a100.json"
    assert run.out.splitlines() == [
        f"  lab-a100: {A100}, 80 GiB, 312 TFLOP/s, 2039 GB/s (imported from {a100_copy})",
        "    operators: measured for a100 meta-llama/Llama-2-7b-hf (TP 1, 2, 4, 8); "
        "a100 meta-llama/Meta-Llama-3-8B (TP 1, 2, 4, 8)",
        f"    attention: {SAME_AS_A100} (no attention.csv in {a100_copy / 'compute' / 'a100'})",
        "    all-reduce (TP 2, 4): measured "
        f"({a100_copy / 'network' / 'a100_pairwise_nvlink' / 'all_reduce.csv'})",
        "    llama-2-7b: measured; TP 1, 2, 4",
        "    llama-3-8b: measured; TP 1, 2, 4",
        "    qwen2.5-7b: scaled from a100 meta-llama/Meta-Llama-3-8B; TP 1, 2, 4",
        f"saved lab-a100 → {saved}",
    ]
    assert stored() == ["lab-a100.json"]

    listing = slidingserve("list").out
    assert entry(listing, "lab-a100")[0].endswith(f"(imported from {a100_copy})")
    assert per_gpu(listing, "llama-3-8b")["lab-a100"] == "measured; TP 1, 2, 4"

    run = simulate("--gpu", "lab-a100")
    assert (run.code, run.err) == (0, "")
    assert header(run)[1] == f"  GPU lab-a100: {A100}, imported from {a100_copy}"
    assert header(run)[3] == "  operators measured (a100 meta-llama/Meta-Llama-3-8B)"
    # The copy holds the CSVs the built-in A100 was derived from.
    assert sarathi_row(run) == sarathi_row(simulate("--gpu", "a100"))

    again = slidingserve("import-profile", str(a100_copy), "--rename", "a100=lab-a100")
    assert again.out.splitlines()[-1] == f"saved lab-a100 → {saved} (replacing the earlier import)"


def test_check_reports_and_saves_nothing(a100_copy: Path) -> None:
    run = slidingserve("import-profile", str(a100_copy), "--check")
    assert (run.code, run.err) == (0, "")
    assert run.out.splitlines()[0].startswith(f"  a100: {A100}")
    tail = run.out.split("\n\n")[1:]
    assert tail[0].startswith("to import: a100: built-in GPU name(s)")
    assert tail[1] == "checked 1 GPU profile(s); nothing saved (--check)\n"
    renamed = slidingserve("import-profile", str(a100_copy), "--check", "--rename", "a100=x")
    assert renamed.out.splitlines()[0].startswith(f"  x: {A100}")
    assert "to import" not in renamed.out
    assert stored() == []


@pytest.mark.parametrize(
    ("folder", "message"),
    [
        ("", "no compute/ folder (Vidur's layout: compute/<gpu>/<org>/<model>/mlp.csv)"),
        ("absent", "not a directory"),
    ],
)
def test_a_broken_directory_is_one_line_naming_it(
    tmp_path: Path, folder: str, message: str
) -> None:
    (tmp_path / "network").mkdir()  # Vidur's layout, but no compute/
    directory = tmp_path / folder
    run = slidingserve("import-profile", str(directory))
    assert one_line_error(run, "import-profile") == f"{directory}: {message}"
    assert stored() == []


@pytest.mark.parametrize(
    ("renames", "message"),
    [
        (["a100"], "--rename expects GPU=NAME, got 'a100'"),
        (["a100=lab", "h100=lab-h100"], "--rename names GPU(s) not in {root}: h100"),
        (["a100=a40"], "a40: built-in GPU name(s); import under another name with --rename "
         "a40=my-a40"),
        (["a100=../lab"], "'../lab': not usable as GPU name(s)"),
        (["a100=lab:2"], "'lab:2': not usable as GPU name(s)"),
        (["a100=lab", "a100-pcie=lab"], "lab: more than one GPU would be saved under this name"),
    ],
)  # fmt: skip
def test_a_bad_rename_is_one_line_and_saves_nothing(
    tmp_path: Path, renames: list[str], message: str
) -> None:
    root = small_directory(tmp_path / "profiles", topologies=("nvlink", "pcie"))
    flags = [arg for rename in renames for arg in ("--rename", rename)]
    run = slidingserve("import-profile", str(root), *flags)
    assert one_line_error(run, "import-profile").startswith(message.format(root=root))
    assert stored() == []
    assert not (store_dir().parent / "lab.json").exists()


def test_the_small_directory_imports_under_a_new_name(tmp_path: Path) -> None:
    """The bad renames above fail for their rename, not for the directory."""
    root = small_directory(tmp_path / "profiles", topologies=("nvlink", "pcie"))
    run = slidingserve("import-profile", str(root), "--rename", "a100=lab")
    assert (run.code, run.err) == (0, "")
    assert stored() == ["a100-nvlink.json", "a100-pcie.json", "lab.json"]


# --- 6. --profile-dir ------------------------------------------------------------------------


def test_profile_dir_gpus_win_over_built_in_ones(a100_copy: Path) -> None:
    run = simulate("--profile-dir", str(a100_copy), "--gpu", "a100")
    assert (run.code, run.err) == (0, "")
    assert header(run)[1:4] == [
        f"  GPU a100: {A100}, imported from {a100_copy}",
        "  model llama-3-8b (meta-llama/Meta-Llama-3-8B)",
        "  operators measured (a100 meta-llama/Meta-Llama-3-8B)",
    ]
    listing = slidingserve("list", "--profile-dir", str(a100_copy)).out
    assert entry(listing, "a100")[0].endswith(f"(imported from {a100_copy})")
    assert entry(listing, "a40") == GPU_ENTRIES["a40"]
    assert stored() == []
