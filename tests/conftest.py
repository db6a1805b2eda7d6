"""Test-wide settings."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from slidingserve.sim.hardware.store import STORE_ENV

# CI runs the same examples every time (a new random failure there would block a landing);
# local runs keep exploring.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _empty_profile_store(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test sees GPUs imported into the user's own profile store."""
    monkeypatch.setenv(STORE_ENV, str(tmp_path_factory.mktemp("profile-store")))
