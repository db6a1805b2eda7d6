"""Importing a directory in Vidur's profile layout: tables, fits, topologies, store, registry.

The happy paths read a copy of the A100 profiles (`../shared/data/profiles`) laid out as
Vidur's profiler writes them, and compare it with the built-in A100, which was derived from
the same CSVs; they skip when the data is absent. The broken directories are small synthetic
ones and always run.
"""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from slidingserve.sim.hardware import GroundTruthLatency, HardwareConfig, load_model
from slidingserve.sim.hardware.optables import ALL_OPS, OpTable
from slidingserve.sim.hardware.profiles import GPUProfile, builtin_profile, provenance
from slidingserve.sim.hardware.registry import gpu_profile, known_gpus
from slidingserve.sim.hardware.store import save_profile, store_dir, stored_gpus, stored_profile
from slidingserve.sim.hardware.vidur import read_vidur_dir

PROFILES = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "profiles"
MODELS = ("Meta-Llama-3-8B", "Llama-2-7b-hf")
NETWORK_CSV = "network/a100_pairwise_nvlink/all_reduce.csv"
OBSERVED_ATTENTION = "a100/Llama-2-7b-hf/attention_observed.csv"
LLAMA2 = "compute/a100/meta-llama/Llama-2-7b-hf"
TOKENS = np.array([1, 7, 64, 333, 512, 2048, 4096, 8192])

# Vidur's attention.csv columns (those the importer reads and those it carries along).
ATTENTION_HEADER = (
    "n_embd",
    "n_q_head",
    "n_kv_head",
    "block_size",
    "num_tensor_parallel_workers",
    "max_model_len",
    "batch_size",
    "prefill_chunk_size",
    "kv_cache_size",
    "is_prefill",
    "time_stats.attn_prefill.median",
    "time_stats.attn_decode.median",
)
LLAMA2_ATTENTION_SHAPE = {
    "n_embd": "4096",
    "n_q_head": "32",
    "n_kv_head": "32",
    "block_size": "16",
    "num_tensor_parallel_workers": "1",
    "max_model_len": "4096",
}


# --- laying out directories -------------------------------------------------------------


def shared(relative: str) -> Path:
    path = PROFILES / relative
    if not path.exists():
        pytest.skip(f"profile data absent: {path}")
    return path


def lay_out_a100(
    root: Path, topologies: Sequence[str] = ("pairwise_nvlink",), attention: bool = False
) -> Path:
    """A copy of the A100 profiles in Vidur's layout under `root`; returns `root`."""
    for model in MODELS:
        folder = root / "compute" / "a100" / "meta-llama" / model
        folder.mkdir(parents=True)
        shutil.copyfile(shared(f"a100/{model}/mlp.csv"), folder / "mlp.csv")
    for topology in topologies:
        folder = root / "network" / f"a100_{topology}"
        folder.mkdir(parents=True)
        shutil.copyfile(shared(NETWORK_CSV), folder / "all_reduce.csv")
    if attention:
        write_attention_csv(root / LLAMA2 / "attention.csv")
    return root


def write_attention_csv(path: Path) -> None:
    """`attention_observed.csv` in Vidur's attention.csv columns.

    Its `kv_cache_size` is already per request for decode rows (the README's decode fit reads
    K = batch × kv_cache_size), which is what Vidur's column means, so it is copied as is.
    """
    with shared(OBSERVED_ATTENTION).open(newline="") as file:
        observed = list(csv.DictReader(file))
    rows = []
    for row in observed:
        prefill = row["kind"] == "prefill"
        rows.append(
            {
                **LLAMA2_ATTENTION_SHAPE,
                "batch_size": row["batch_size"],
                "prefill_chunk_size": row["prefill_chunk_size"] if prefill else "0",
                "kv_cache_size": row["kv_cache_size"],
                "is_prefill": str(prefill),
                "time_stats.attn_prefill.median": row["median_ms"] if prefill else "",
                "time_stats.attn_decode.median": "" if prefill else row["median_ms"],
            }
        )
    write_csv(path, ATTENTION_HEADER, rows)


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Mapping[str, object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, header)
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def a100_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The A100 copy with one measured topology and no attention.csv (read-only for tests)."""
    return lay_out_a100(tmp_path_factory.mktemp("vidur-a100"))


@pytest.fixture(scope="module")
def a100(a100_dir: Path) -> GPUProfile:
    (profile,) = read_vidur_dir(a100_dir)
    return profile


def latency(
    gpu: str = "a100", profile_dir: Path | None = None, model: str = "llama-3-8b", tp: int = 1
) -> GroundTruthLatency:
    directory = str(profile_dir) if profile_dir else ""
    return GroundTruthLatency(
        HardwareConfig(gpu=gpu, model=model, tp=tp, noise=0.0, profile_dir=directory)
    )


def attention_coefficients(model: GroundTruthLatency) -> tuple[float, ...]:
    per_chunk = model.prefill_attention_coefficients()
    decode = tuple(float(t) for t in model.decode_attention_time([1, 1, 2], [0, 1000, 0]))
    return (*per_chunk, *decode)


# --- 1. the copy is the built-in A100 ---------------------------------------------------


def table_with_shape(tables: Sequence[OpTable], wanted: OpTable) -> OpTable:
    (found,) = [table for table in tables if table.shape == wanted.shape]
    return found


def test_copy_reads_as_one_a100_with_the_built_in_tables(a100: GPUProfile) -> None:
    builtin = builtin_profile("a100")
    assert a100.name == "a100"
    assert len(a100.tables) == len(builtin.tables) == 2
    for expected in builtin.tables:
        table = table_with_shape(a100.tables, expected)
        assert sorted(table.per_tp) == sorted(expected.per_tp) == [1, 2, 4, 8]
        for tp, grid in expected.per_tp.items():
            got = table.per_tp[tp]
            assert got.num_tokens == grid.num_tokens
            assert got.layer_ms == grid.layer_ms
            for op in ALL_OPS:
                assert got.ops[op] == grid.ops[op], (expected.label, tp, op)
    assert dict(a100.all_reduce.measured) == dict(builtin.all_reduce.measured)
    assert a100.all_reduce.workers() == (2, 4)
    assert a100.device == builtin.device


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("model", ["llama-3-8b", "llama-2-7b"])
def test_copy_gives_the_built_in_non_attention_times(a100_dir: Path, model: str, tp: int) -> None:
    imported = latency(profile_dir=a100_dir, model=model, tp=tp)
    builtin = latency(model=model, tp=tp)
    assert imported.gpu.origin == f"imported from {a100_dir}"
    got, expected = imported.non_attention_time(TOKENS), builtin.non_attention_time(TOKENS)
    assert np.all(np.diff(got) > 0)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
    assert attention_coefficients(imported) == pytest.approx(
        attention_coefficients(builtin), rel=1e-12
    )


# --- 2. attention: derived without attention.csv, fitted with it ------------------------


def test_without_attention_csv_attention_is_the_a100_fit_derived(
    a100: GPUProfile, a100_dir: Path
) -> None:
    assert a100.attention_source == (
        "derived: a100's fit, prefill ÷ 1.00 (peak compute), decode ÷ 1.00 (memory bandwidth)"
        f" (no attention.csv in {a100_dir / 'compute' / 'a100'})"
    )
    assert a100.attention == builtin_profile("a100").attention
    lines = provenance(a100, load_model("llama-3-8b"), 1)
    assert f"attention {a100.attention_source}" in lines


def test_attention_csv_is_fitted_close_to_the_readme_fit(tmp_path: Path) -> None:
    (profile,) = read_vidur_dir(lay_out_a100(tmp_path, attention=True))
    fit, readme = profile.attention, builtin_profile("a100").attention
    assert profile.attention_source == f"fitted to {tmp_path / LLAMA2 / 'attention.csv'}"
    assert (fit.reference_num_heads, fit.reference_num_kv_heads, fit.reference_head_dim) == (
        32,
        32,
        128,
    )
    # Measured: every coefficient within 0.6% of the README's (decode per KV token 8.839e-6
    # against 8.84e-6, prefill chunk² 1.545e-7 against 1.55e-7). Reading kv_cache_size as
    # total KV tokens instead would move the per-KV-token term by ~100×.
    for field in (
        "decode_ms",
        "decode_ms_per_request",
        "decode_ms_per_kv_token",
        "prefill_ms",
        "prefill_ms_per_chunk_cached",
        "prefill_ms_per_chunk_squared",
    ):
        assert getattr(fit, field) == pytest.approx(getattr(readme, field), rel=0.02), field


# --- 3. all-reduce: link model without network/, one profile per topology ---------------


def test_without_network_folder_all_reduce_is_the_pcie_link_model(tmp_path: Path) -> None:
    (profile,) = read_vidur_dir(lay_out_a100(tmp_path, topologies=()))
    reduce = profile.all_reduce
    assert not reduce.measured
    assert reduce.link is not None and reduce.link.name == "pcie4"
    assert reduce.source.startswith("modelled: PCIe 4.0")
    assert reduce.source.endswith("(no network/a100_<topology>/all_reduce.csv)")
    assert reduce.workers() == (2, 4, 8)
    message = np.array([8.0e6])  # 8 MB among 2 GPUs: 72 µs + 8e6 B ÷ 23.7 GB/s
    assert float(reduce.ms(message, 2)[0]) == pytest.approx(0.072 + 8e6 / 23.7e6)


def test_two_topologies_give_a_profile_each_and_a_default(tmp_path: Path) -> None:
    root = lay_out_a100(tmp_path, topologies=("pairwise_nvlink", "other"))
    profiles = {profile.name: profile for profile in read_vidur_dir(root)}
    assert sorted(profiles) == ["a100", "a100-other", "a100-pairwise_nvlink"]
    for topology in ("other", "pairwise_nvlink"):
        csv_path = root / "network" / f"a100_{topology}" / "all_reduce.csv"
        assert profiles[f"a100-{topology}"].all_reduce.source == f"measured ({csv_path})"
    # The plain name is the first topology by name.
    assert profiles["a100"].all_reduce == profiles["a100-other"].all_reduce


# --- 4. a model the directory does not hold -----------------------------------------------


def test_model_without_a_table_runs_on_scaled_operators(a100_dir: Path) -> None:
    config = HardwareConfig(gpu="a100", model="qwen2.5-7b", profile_dir=str(a100_dir), noise=0)
    lines = config.provenance()
    assert lines[0].endswith(f"imported from {a100_dir}")
    assert lines[2].startswith("operators scaled from a100 meta-llama/")
    assert "roofline" in lines[2]
    imported = GroundTruthLatency(config)
    builtin = latency(model="qwen2.5-7b")
    got = imported.non_attention_time(TOKENS)
    assert np.all(np.diff(got) > 0)
    # The same tables (in another order) give the same roofline and the same scaled times.
    np.testing.assert_allclose(got, builtin.non_attention_time(TOKENS), rtol=1e-12)


# --- 5. the store ----------------------------------------------------------------------


def test_a_stored_profile_comes_back_equal_and_resolves_by_name(a100: GPUProfile) -> None:
    # Built-in names win over stored ones, so the copy is kept under a name of its own.
    mine = replace(a100, name="myA100")
    path = save_profile(mine)
    assert path == store_dir() / "myA100.json"
    assert stored_gpus() == ["myA100"]
    assert "myA100" in known_gpus()
    assert stored_profile("myA100") == mine
    for tp in (1, 2):
        stored, original = latency(gpu="myA100", tp=tp), latency(tp=tp)
        assert stored.gpu.origin == a100.origin
        np.testing.assert_array_equal(
            stored.non_attention_time(TOKENS), original.non_attention_time(TOKENS)
        )
        assert attention_coefficients(stored) == attention_coefficients(original)


@pytest.mark.parametrize(
    "content",
    [
        '{"format": 1, "name": ',  # cut short
        "[]",  # JSON, but not an object
        '{"format": 1, "name": "broken", "tables": ["a100"]}',  # a table that is not one
        '{"format": 2}',  # a later format
    ],
)
def test_a_corrupt_store_file_is_named(content: str) -> None:
    folder = store_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "broken.json"
    path.write_text(content, encoding="utf-8")
    assert stored_gpus() == ["broken"]
    loads: tuple[Callable[[str], GPUProfile], ...] = (stored_profile, gpu_profile)
    for load in loads:
        with pytest.raises(ValueError, match="not a readable imported profile") as error:
            load("broken")
        assert str(path) in str(error.value)


# --- 6. broken directories ----------------------------------------------------------------

SHAPE = {"n_head": 4, "n_kv_head": 2, "n_embd": 256, "n_expanded_embd": 512, "vocab_size": 1000}
MLP_HEADER = (
    *SHAPE,
    "num_tokens",
    "num_tensor_parallel_workers",
    *(f"time_stats.{op}.median" for op in ALL_OPS),
)


def mlp_rows(count: int = 6) -> list[dict[str, object]]:
    """A small, plausible mlp.csv: TP 1, doubling token counts, times growing with them."""
    return [
        {
            **SHAPE,
            "num_tokens": 2**i,
            "num_tensor_parallel_workers": 1,
            **{f"time_stats.{op}.median": 0.01 * (1 + 2**i / 64) for op in ALL_OPS},
        }
        for i in range(count)
    ]


def small_mlp(root: Path, gpu: str = "a100") -> Path:
    return write_csv(root / "compute" / gpu / "org" / "model" / "mlp.csv", MLP_HEADER, mlp_rows())


def test_the_small_directory_itself_reads(tmp_path: Path) -> None:
    """The broken cases below break this one valid directory in one place each."""
    small_mlp(tmp_path)
    (profile,) = read_vidur_dir(tmp_path)
    assert profile.name == "a100"
    assert profile.tables[0].per_tp[1].num_tokens == (1, 2, 4, 8, 16, 32)


def test_whole_numbers_written_as_floats_read_as_integers(tmp_path: Path) -> None:
    """pandas writes an integer column with a gap as "8.0"; the importer takes it."""
    rows = [
        {
            k: f"{v}.0" if k in (*SHAPE, "num_tokens", "num_tensor_parallel_workers") else v
            for k, v in row.items()
        }
        for row in mlp_rows()
    ]
    write_csv(tmp_path / "compute" / "a100" / "org" / "model" / "mlp.csv", MLP_HEADER, rows)
    (profile,) = read_vidur_dir(tmp_path)
    assert profile.tables[0].shape.n_embd == 256
    assert profile.tables[0].per_tp[1].num_tokens == (1, 2, 4, 8, 16, 32)


def not_a_directory(root: Path) -> Path:
    path = root / "file.txt"
    path.write_text("", encoding="utf-8")
    return path


def no_compute_folder(root: Path) -> Path:
    (root / "network").mkdir()
    return root


def no_mlp_csv(root: Path) -> Path:
    (root / "compute" / "a100" / "org" / "model").mkdir(parents=True)
    return root


def drop_column(column: str) -> Callable[[Path], Path]:
    def lay_out(root: Path) -> Path:
        header = [name for name in MLP_HEADER if name != column]
        rows = [{k: v for k, v in row.items() if k != column} for row in mlp_rows()]
        write_csv(root / "compute" / "a100" / "org" / "model" / "mlp.csv", header, rows)
        return root

    return lay_out


def mlp_without_rows(root: Path) -> Path:
    write_csv(root / "compute" / "a100" / "org" / "model" / "mlp.csv", MLP_HEADER, [])
    return root


def non_numeric_cell(root: Path) -> Path:
    rows = mlp_rows()
    rows[1]["time_stats.add.median"] = "n/a"  # line 3: after the header and the first row
    write_csv(root / "compute" / "a100" / "org" / "model" / "mlp.csv", MLP_HEADER, rows)
    return root


def fractional_token_count(root: Path) -> Path:
    rows = mlp_rows()
    rows[2]["num_tokens"] = 4.5  # line 4
    write_csv(root / "compute" / "a100" / "org" / "model" / "mlp.csv", MLP_HEADER, rows)
    return root


def unknown_device(root: Path) -> Path:
    small_mlp(root, gpu="h200")
    return root


def all_reduce_without_time(root: Path) -> Path:
    small_mlp(root)
    path = root / "network" / "a100_nvlink" / "all_reduce.csv"
    write_csv(path, ("num_workers", "size"), [{"num_workers": 2, "size": 1024}])
    return root


def attention_with_two_decode_rows(root: Path) -> Path:
    small_mlp(root)
    rows = [
        {
            **LLAMA2_ATTENTION_SHAPE,
            "batch_size": batch,
            "prefill_chunk_size": chunk,
            "kv_cache_size": kv,
            "is_prefill": chunk > 0,
            f"time_stats.attn_{'prefill' if chunk else 'decode'}.median": 0.01 * (batch + kv),
        }
        for batch, chunk, kv in ((1, 0, 32), (8, 0, 512), (1, 64, 0), (1, 128, 64), (1, 256, 0))
    ]
    write_csv(root / "compute" / "a100" / "org" / "model" / "attention.csv", ATTENTION_HEADER, rows)
    return root


BROKEN: dict[str, tuple[Callable[[Path], Path], str, tuple[str, ...]]] = {
    # case: (lay out, the path the message names (relative to tmp_path), what it says)
    "not a directory": (not_a_directory, "file.txt", ("not a directory",)),
    "no compute folder": (no_compute_folder, "", ("no compute/ folder", "<org>/<model>")),
    "no mlp.csv": (no_mlp_csv, "compute/a100", ("no <org>/<model>/mlp.csv",)),
    "mlp missing a column": (
        drop_column("time_stats.mlp_up_proj.median"),
        "compute/a100/org/model/mlp.csv",
        ("missing column(s) time_stats.mlp_up_proj.median",),
    ),
    "mlp missing a shape column": (
        drop_column("n_kv_head"),
        "compute/a100/org/model/mlp.csv",
        ("missing column(s) n_kv_head",),
    ),
    "mlp without rows": (mlp_without_rows, "compute/a100/org/model/mlp.csv", ("no rows",)),
    "non-numeric cell": (
        non_numeric_cell,
        "compute/a100/org/model/mlp.csv",
        ("line 3", "time_stats.add.median is not a number", "'n/a'"),
    ),
    "fractional token count": (
        fractional_token_count,
        "compute/a100/org/model/mlp.csv",
        ("line 4", "num_tokens is not whole", "'4.5'"),
    ),
    "unknown device": (
        unknown_device,
        "compute/h200",
        ("unknown device 'h200'", "known devices: a100, a40, h100"),
    ),
    "all_reduce missing a column": (
        all_reduce_without_time,
        "network/a100_nvlink/all_reduce.csv",
        ("missing column(s) time_stats.all_reduce.median",),
    ),
    "too few decode rows": (
        attention_with_two_decode_rows,
        "compute/a100/org/model/attention.csv",
        ("need 3 or more rows", "time_stats.attn_decode.median", "found 2"),
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_directory_names_the_file_and_what_is_missing(tmp_path: Path, case: str) -> None:
    lay_out, named, fragments = BROKEN[case]
    directory = lay_out(tmp_path)
    with pytest.raises(ValueError) as error:
        read_vidur_dir(directory)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(str(tmp_path / named) if named else str(tmp_path))
    for fragment in fragments:
        assert fragment in message


def test_a_missing_directory_is_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        read_vidur_dir(tmp_path / "absent")


# --- 7. the registry ------------------------------------------------------------------


def test_profile_dir_gpus_win_over_built_in_ones(a100_dir: Path) -> None:
    imported = gpu_profile("a100", profile_dir=str(a100_dir))
    assert imported.origin == f"imported from {a100_dir}"
    assert str(a100_dir) in imported.describe()
    assert gpu_profile("a100").origin == "built in"
    # Names the directory lacks still resolve to the built-in ones.
    assert gpu_profile("a40", profile_dir=str(a100_dir)).origin == "built in"


def test_an_unknown_gpu_lists_every_known_one() -> None:
    with pytest.raises(ValueError, match="unknown gpu 'nope'") as error:
        gpu_profile("nope")
    assert "known: ['a100', 'a40', 'a40-pcie']" in str(error.value)


def test_an_unknown_gpu_lists_the_directory_s_too(tmp_path: Path) -> None:
    small_mlp(tmp_path, gpu="h100")
    with pytest.raises(ValueError) as error:
        HardwareConfig(gpu="nope", profile_dir=str(tmp_path))
    assert "known: ['a100', 'a40', 'a40-pcie', 'h100']" in str(error.value)
