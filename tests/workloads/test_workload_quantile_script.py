"""The derivation script: valid output on any traces, and the embedded file is up to date."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from slidingserve.workloads import TRACE_FILES, load_quantile_tables

REPO_ROOT = Path(__file__).resolve().parents[2]
TRACE_DIR = REPO_ROOT.parent / "shared" / "data" / "traces"
EMBEDDED = REPO_ROOT / "slidingserve" / "workloads" / "data" / "trace_quantiles.json"


def load_script() -> ModuleType:
    path = REPO_ROOT / "scripts" / "derive_trace_quantiles.py"
    spec = importlib.util.spec_from_file_location("derive_trace_quantiles", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_synthetic_traces(folder: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for name in TRACE_FILES.values():
        prompt = rng.integers(1, 5000, size=800)
        output = rng.integers(1, 900, size=800)
        rows = "".join(f"{p},{o}\n" for p, o in zip(prompt, output, strict=True))
        (folder / name).write_text("num_prefill_tokens,num_decode_tokens\n" + rows)


def test_script_output_loads_and_is_small(tmp_path: Path) -> None:
    write_synthetic_traces(tmp_path)
    document: dict[str, Any] = load_script().derive(tmp_path, "2026-01-01")
    out = tmp_path / "tables.json"
    out.write_text(json.dumps(document, indent=1))
    tables = load_quantile_tables(out)
    assert set(tables) == set(TRACE_FILES)
    for name, table in tables.items():
        entry = document["traces"][name]
        assert entry["rows"] == 800 and table.rank_counts.sum() == 800
        assert entry["source_file"] == TRACE_FILES[name] and entry["license"]
    assert document["generated_by"] == "scripts/derive_trace_quantiles.py"
    assert document["generated_on"] == "2026-01-01"


def test_embedded_file_is_small_and_licensed() -> None:
    assert EMBEDDED.stat().st_size < 50_000
    document = json.loads(EMBEDDED.read_text())
    licenses = {name: entry["license"] for name, entry in document["traces"].items()}
    assert licenses["sharegpt"].startswith("Apache-2.0")
    assert licenses["arxiv"].startswith("MIT")


@pytest.mark.skipif(not TRACE_DIR.is_dir(), reason="shared trace data absent")
def test_embedded_file_matches_the_traces() -> None:
    embedded = json.loads(EMBEDDED.read_text())
    derived = json.loads(json.dumps(load_script().derive(TRACE_DIR, embedded["generated_on"])))
    assert derived == embedded, "rerun scripts/derive_trace_quantiles.py"
