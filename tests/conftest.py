"""Test-wide settings, and which tests are slow.

Slow tests carry the `slow` marker and are deselected by default (`-m "not slow"` in
pyproject.toml's addopts), so that the README's test command stays a few minutes on two cores;
`.ci/run` runs them after it with `pytest -m slow`. A test is slow when it starts a vLLM engine
or server (every test that uses the `tiny_model` fixture, and those named in `SLOW` that build
their own model) or when it takes over ~10 s on two cores (named in `SLOW`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import settings

from slidingserve.sim.hardware.store import STORE_ENV

# CI runs the same examples every time (a new random failure there would block a landing);
# local runs keep exploring. No per-example deadline on CI's busy cores.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Test ids (a file, a file::test or a file::Class), relative to this folder, of the slow tests
# that do not use `tiny_model`. Each was over ~10 s on two cores.
SLOW = (
    # Live: a vLLM server on a tiny model of its own.
    "bench/test_bench_vllm.py",
    # Goodput searches and full simulations of every policy on every workload.
    "eval/test_slo_bound.py::test_no_simulated_policy_beats_it",
    "eval/test_slo_presets_achievable.py::test_strict_slos_are_met_at_a_tenth_of_capacity",
    "benchmarks/test_design_ablation.py::test_the_table_has_a_row_per_policy",
)
LIVE_FIXTURE = "tiny_model"  # tests/engines/with_vllm/conftest.py: the model vLLM serves
HERE = Path(__file__).parent


def _check_slow_ids() -> None:
    """Every id in `SLOW` names a file and tests that exist (a renamed test would silently
    move back into the default run)."""
    stale = []
    for test_id in SLOW:
        file, *names = test_id.split("::")
        path = HERE / file
        source = path.read_text() if path.is_file() else ""
        if not source or any(
            not re.search(rf"^\s*(def|class) {re.escape(name)}\b", source, re.MULTILINE)
            for name in names
        ):
            stale.append(test_id)
    if stale:
        raise pytest.UsageError(f"tests/conftest.py: SLOW names no test: {', '.join(stale)}")


def pytest_configure(config: pytest.Config) -> None:
    _check_slow_ids()


def _is_slow(item: pytest.Item) -> bool:
    if LIVE_FIXTURE in getattr(item, "fixturenames", ()):
        return True
    _, sep, rest = item.nodeid.partition("::")
    test_id = item.path.relative_to(HERE).as_posix() + sep + rest
    return any(test_id == slow or test_id.startswith((f"{slow}::", f"{slow}[")) for slow in SLOW)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _empty_profile_store(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test sees GPUs imported into the user's own profile store."""
    monkeypatch.setenv(STORE_ENV, str(tmp_path_factory.mktemp("profile-store")))
