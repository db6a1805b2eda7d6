"""Test-wide settings."""

from __future__ import annotations

import os

from hypothesis import settings

# CI runs the same examples every time (a new random failure there would block a landing);
# local runs keep exploring.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
