"""SlidingServe: SLO-aware sliding-window scheduling for LLM inference."""

from __future__ import annotations

__version__ = "0.1.0"
